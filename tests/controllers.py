"""The program's controllers on a local control plane: real Kueue, JobSet and LWS, run out of cluster,
configured as the program's Helm Releases install them.

`make controlplane` (tools/controlplane/build.sh) builds the three controllers at the versions of
settings/model.py Versions; Kueue's CRDs come from the same module download.
Everything else they run with comes from their charts rendered by real Helm with the program's
release names, namespaces and values (tests/charts.py): the manager Configuration, the container's
arguments, the webhook configurations with their rules and selectors, and the RBAC. Each
controller runs as its chart's ServiceAccount, with a token the plane issues for it, so a
permission the chart does not grant fails here as it would in the cluster.

`controllers(plane)` installs the CRDs and the charts' RBAC, starts the three controllers as
processes on loopback, waits until each answers /readyz, then registers the charts' webhooks
pointing at it, and starts the slice admission-check stand-in (tests/standins/slice_admission.py):

    with control_plane(nodes) as plane, controllers(plane) as running:
        plane.apply(...)

What cannot come from the rendering is changed in one place, `loopback_config` (addresses, ports
and certificates on 127.0.0.1 instead of a Service and in-cluster Secrets; one process per plane
instead of leader election; Kueue's visibility API server off). Kueue insists on a metrics certificate
at the fixed path /etc/kueue/metrics/certs (its cmd/kueue/main.go watches it whenever internal
certificate management is off), so it runs in a private mount namespace with an overlay over /etc
that holds the test certificate; the host's /etc is never written. That needs `unshare` and
overlayfs (root, or a user namespace that may mount), as on the machines the tests run on.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from k8s import controllers as program
from tests import charts
from tests import control_plane as cp
from tests.crd_schema import crd_cache, crd_root
from tests.standins import slice_admission

CONTROLLERS = ("kueue", "jobset", "lws")
ROOT = Path(__file__).resolve().parents[1]
NAMESPACES = {name: program.CHARTS[name].namespace for name in CONTROLLERS}
KUEUE_METRICS_CERTS = "kueue/metrics/certs"  # under /etc: cmd/kueue/main.go's fixed path
TOKEN_SECONDS = 6 * 3600  # a plane lives for one test module at most
RBAC_KINDS = {
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
}


def pinned_versions() -> dict[str, str]:
    from settings.model import Versions

    versions = Versions()
    return {"kueue": versions.kueue, "jobset": versions.jobset, "lws": versions.lws}


def rendered(name: str) -> charts.Rendered:
    """The controller's chart at the pinned version, rendered with the program's values."""
    return charts.render(name, pinned_versions()[name])


def crds_root() -> Path:
    return crd_root() or crd_cache()  # `make crds`; the missing files are named by missing()


def missing() -> list[str]:
    """What `make controlplane` and `make crds` have not provided; empty when everything is there."""
    found = [name for name in CONTROLLERS if not os.access(cp.cache_dir() / "bin" / name, os.X_OK)]
    if not os.access(charts.helm(), os.X_OK):
        found.append(f"{charts.helm()} (`make engine`)")
    found += [str(path) for path in _upstream_crd_files() if not path.is_file()]
    if shutil.which("unshare") is None:
        found.append("unshare (util-linux)")
    return found


def _upstream_crd_files() -> list[Path]:
    versions = pinned_versions()
    jobset = charts.module_version(versions["jobset"])
    lws = charts.module_version(versions["lws"])
    return [
        crds_root() / "jobset" / jobset / "jobset.x-k8s.io_jobsets.yaml",
        crds_root() / "lws" / lws / "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
    ]


@dataclass
class Controllers:
    """The running controllers: their ports, logs and start-up timings."""

    workdir: Path
    ports: dict[str, int]
    timings: dict[str, float] = field(default_factory=dict)
    processes: dict[str, cp._Process] = field(default_factory=dict, repr=False)
    webhooks: list[str] = field(default_factory=list)  # API paths of the registered configurations
    plane: cp.ControlPlane | None = field(default=None, repr=False)
    stand_in: slice_admission.SliceAdmission | None = field(default=None, repr=False)

    @property
    def startup_seconds(self) -> float:
        return self.timings.get("total", 0.0)

    def check_alive(self) -> None:
        for process in self.processes.values():
            code = process.popen.poll()
            if code is not None:
                raise cp.ControlPlaneError(f"{process.name} exited with {code}:\n{process.tail()}")
        if self.stand_in is not None and self.stand_in.error is not None:
            raise cp.ControlPlaneError(f"slice admission stand-in failed: {self.stand_in.error!r}")

    def log_tail(self, name: str, lines: int = 40) -> str:
        process = self.processes.get(name)
        return process.tail(lines) if process else ""

    def stop(self) -> None:
        if self.stand_in is not None:
            self.stand_in.stop()
        # Webhooks fail closed: unregister them before their servers go, so the plane stays usable.
        while self.webhooks and self.plane is not None:
            with contextlib.suppress(cp.ControlPlaneError, OSError):
                self.plane.request("DELETE", self.webhooks.pop())
        for process in reversed(list(self.processes.values())):
            process.stop()
        self.processes.clear()


# --- certificates and configuration ------------------------------------------------------------


def _certificates(directory: Path, dns_names: Sequence[str] = ()) -> tuple[Path, bytes]:
    """A CA and a serving certificate for 127.0.0.1 and `dns_names` (tls.crt/tls.key,
    controller-runtime's names)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_crt = directory / "ca.key", directory / "ca.crt"
    key, csr, crt = directory / "tls.key", directory / "tls.csr", directory / "tls.crt"
    ext = directory / "san.ext"
    names = ",".join(["IP:127.0.0.1", *(f"DNS:{name}" for name in dns_names)])
    ext.write_text(f"subjectAltName={names}\nextendedKeyUsage=serverAuth\n")
    curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    cp._openssl("req", "-x509", *curve, "-keyout", str(ca_key), "-out", str(ca_crt), "-days", "2",
                "-subj", "/CN=tpu-slicing-test-webhook-ca")  # fmt: skip
    cp._openssl("req", *curve, "-keyout", str(key), "-out", str(csr), "-subj", "/CN=127.0.0.1")
    cp._openssl("x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key), "-CAcreateserial",
                "-out", str(crt), "-days", "2", "-extfile", str(ext))  # fmt: skip
    return directory, ca_crt.read_bytes()


def loopback_config(
    name: str, health: int, webhook: int, cert_dir: Path, installed: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The chart's manager Configuration (or `installed`, the one a Release put in the cluster),
    with what a process on loopback must have instead. Every difference from the installed
    controller is here."""
    config = copy.deepcopy(dict(installed) if installed is not None else rendered(name).manager_config())
    # Health and webhooks on 127.0.0.1 and free ports (the chart's :8081 and 9443 serve in a pod).
    config["health"] = {**(config.get("health") or {}), "healthProbeBindAddress": f"127.0.0.1:{health}"}
    config["webhook"] = {
        **(config.get("webhook") or {}),
        "host": "127.0.0.1",
        "port": webhook,
        "certDir": str(cert_dir),
    }
    # No metrics listener: the chart's fixed :8443 would collide between planes, and nothing scrapes it.
    config["metrics"] = {**(config.get("metrics") or {}), "bindAddress": "0"}
    # One process per plane (playing every replica): no lease to win (a lease left by a stopped
    # controller would hold the next plane's back for its duration).
    config["leaderElection"] = {**(config.get("leaderElection") or {}), "leaderElect": False}
    # The test's CA and serving certificate instead of the ones the controller would make, keep in
    # the chart's Secret and patch into its webhook configurations (JobSet v0.12.0 would write them
    # to the host's /tmp/k8s-webhook-server: pkg/util/cert/cert.go certDir).
    config["internalCertManagement"] = {"enable": False}
    if name == "kueue":
        # Kueue's visibility API is an aggregated API server (the chart's APIService) that reads its
        # certificate from the fixed path /visibility (kueue pkg/visibility/server.go certDir).
        gates = dict(config.get("featureGates") or {})
        gates["VisibilityOnDemand"] = False
        config["featureGates"] = gates
    return config


def chart_args(name: str) -> list[str]:
    """The manager container's arguments from the chart, but the --config the process gets here."""
    args = rendered(name).manager_container().get("args") or []
    if any(arg.startswith("--feature-gates") for arg in args):
        # Kueue refuses gates given both ways (pkg/config/validation.go LoadAndValidateFeatureGates);
        # loopback_config sets them in the Configuration.
        raise cp.ControlPlaneError(f"{name}: the chart passes --feature-gates; merge it into loopback_config")
    return [str(arg) for arg in args if not str(arg).startswith("--config")]


# --- CRDs and webhooks ----------------------------------------------------------------------


def _documents(path: Path) -> list[dict[str, Any]]:
    # libyaml's loader when PyYAML has it: the pure-Python one takes seconds per large CRD.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [doc for doc in yaml.load_all(path.read_text(), Loader=loader) if doc]


def crd_files() -> list[Path]:
    """Kueue's whole CRD set from its module (the chart's copies carry conversion webhooks on its
    in-cluster Service), and JobSet's and LWS's from `make crds`."""
    kueue = charts.module_dir("kueue", pinned_versions()["kueue"]) / "config" / "components" / "crd" / "bases"
    return sorted(kueue.glob("*.yaml")) + _upstream_crd_files()


def install_crds(plane: cp.ControlPlane) -> None:
    install_documents(plane, [crd for path in crd_files() for crd in _documents(path)])


def install_documents(plane: cp.ControlPlane, crds: Sequence[Mapping[str, Any]]) -> None:
    """Create these CRDs and wait until they are Established and their kinds are in discovery."""
    names = []
    for crd in crds:
        name = crd["metadata"]["name"]
        # Create, not server-side apply: applying the Workload and LWS CRDs takes the apiserver
        # tens of seconds (managed fields of their huge schemas), creating them a second.
        try:
            plane.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd, timeout=120)
        except cp.ApiError as err:
            if err.status != 409:
                raise
            plane.apply(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", crd)
        names.append(name)

    def established() -> bool:
        items = plane.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")["items"]
        ready = {
            crd["metadata"]["name"]
            for crd in items
            if any(
                c["type"] == "Established" and c["status"] == "True"
                for c in crd.get("status", {}).get("conditions") or []
            )
        }
        return set(names) <= ready

    plane.wait_for(f"{len(names)} CRDs Established", established, 180)
    # Controllers map kinds through discovery at start-up and exit on a kind it does not list yet.
    served = {
        (crd["spec"]["group"], version["name"], crd["spec"]["names"]["plural"])
        for crd in crds
        for version in crd["spec"]["versions"]
        if version.get("served")
    }

    def discovered() -> bool:
        for group, version in {(g, v) for g, v, _ in served}:
            listed = {r["name"] for r in plane.request("GET", f"/apis/{group}/{version}")["resources"]}
            if not {plural for g, v, plural in served if (g, v) == (group, version)} <= listed:
                return False
        return True

    plane.wait_for("the CRDs' kinds in discovery", discovered, 180)


def webhook_configurations(name: str, port: int, ca_bundle: bytes) -> list[dict[str, Any]]:
    """The chart's webhook configurations as it renders them (rules, failure policies, namespace and
    object selectors), each webhook pointed at https://127.0.0.1:<port> instead of its Service."""
    bundle = base64.b64encode(ca_bundle).decode()
    configurations = []
    for configuration in rendered(name).webhook_configurations():
        for webhook in configuration.get("webhooks") or []:
            path = webhook["clientConfig"]["service"].get("path", "/")
            webhook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
        configuration["metadata"] = {"name": configuration["metadata"]["name"]}
        configurations.append(configuration)
    return configurations


def _rbac_path(document: Mapping[str, Any], namespace: str) -> str:
    prefix, plural, namespaced = RBAC_KINDS[document["kind"]]
    name = document["metadata"]["name"]
    if namespaced:
        return f"{prefix}/namespaces/{document['metadata'].get('namespace') or namespace}/{plural}/{name}"
    return f"{prefix}/{plural}/{name}"


def install_rbac(plane: cp.ControlPlane, name: str) -> None:
    """The chart's ServiceAccount, roles and bindings, as the Release creates them."""
    chart = rendered(name)
    for document in chart.rbac():
        plane.apply(_rbac_path(document, chart.namespace), document)


def service_account_kubeconfig(plane: cp.ControlPlane, name: str, path: Path) -> Path:
    """A kubeconfig that authenticates as the chart's ServiceAccount (a TokenRequest, as the
    kubelet's projected token would be), so the controller has the chart's permissions only."""
    chart = rendered(name)
    account = chart.service_account()
    answer = plane.request(
        "POST",
        f"/api/v1/namespaces/{chart.namespace}/serviceaccounts/{account}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": TOKEN_SECONDS},
        },
    )
    cp._write_kubeconfig(path, plane.server, plane.ca_file, f"system:serviceaccount:{chart.namespace}:{account}",
                         answer["status"]["token"])  # fmt: skip
    return path


def _register_webhooks(plane: cp.ControlPlane, configurations: Sequence[Mapping[str, Any]]) -> list[str]:
    paths = []
    for configuration in configurations:
        plural = configuration["kind"].lower() + "s"
        path = f"/apis/admissionregistration.k8s.io/v1/{plural}/{configuration['metadata']['name']}"
        plane.apply(path, configuration)
        paths.append(path)
    return paths


# --- processes -------------------------------------------------------------------------------


def _start(workdir: Path, name: str, argv: Sequence[str]) -> cp._Process:
    log = workdir / "logs" / f"{name}.log"
    log_file = log.open("wb")
    popen = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        cwd=workdir,
        start_new_session=True,
        env=cp.go_environ(),
    )
    return cp._Process(name, popen, log, log_file)


def _command(
    name: str, config: Path, kubeconfig: Path, workdir: Path, cert_dir: Path, *, args: Sequence[str] | None = None
) -> list[str]:
    binary = str(cp.cache_dir() / "bin" / name)
    command = [
        binary,
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        *(chart_args(name) if args is None else args),
    ]
    if name != "kueue":
        return command
    upper, work = workdir / "etc-upper", workdir / "etc-work"
    certs = upper / KUEUE_METRICS_CERTS
    certs.mkdir(parents=True)
    work.mkdir()
    for file in ("tls.crt", "tls.key"):
        shutil.copy(cert_dir / file, certs / file)
    mount = f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={work} /etc"
    # exec: the controller replaces the shell, so stopping the group stops it.
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", f'{mount} && exec "$@"', "kueue", *command]


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _handlers_serve(configurations: Sequence[Mapping[str, Any]], ca_bundle: bytes) -> bool:
    """Every webhook of `configurations` answers at its URL as a registered handler does: any status
    but 404 (an empty review is refused with 400, or answered with an error inside a 200)."""
    context = ssl.create_default_context(cadata=ca_bundle.decode())
    for configuration in configurations:
        for webhook in configuration.get("webhooks") or []:
            url = webhook["clientConfig"]["url"]
            request = urllib.request.Request(url, b"{}", {"Content-Type": "application/json"}, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=2, context=context):
                    pass
            except urllib.error.HTTPError as err:
                if err.code == 404:
                    return False
            except (urllib.error.URLError, OSError):
                return False
    return True


@contextlib.contextmanager
def controllers(plane: cp.ControlPlane, *, timeout: float = 180.0, keep: bool = False) -> Iterator[Controllers]:
    """Install the CRDs, start Kueue, JobSet and LWS and the slice stand-in; stop them all on exit."""
    absent = missing()
    if absent:
        raise cp.ControlPlaneError(f"{', '.join(absent)} missing: run `make controlplane`")
    workdir = Path(tempfile.mkdtemp(prefix="tpu-slicing-controllers-"))
    workdir.chmod(0o700)
    (workdir / "logs").mkdir()
    ports = {name: cp.free_port() for name in CONTROLLERS}
    health = {name: cp.free_port() for name in CONTROLLERS}
    running = Controllers(workdir, ports, plane=plane)
    started = time.monotonic()
    try:
        install_crds(plane)
        running.timings["crds"] = time.monotonic() - started
        for namespace in NAMESPACES.values():
            plane.apply(
                f"/api/v1/namespaces/{namespace}",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            )
        cert_dir, ca_bundle = _certificates(workdir / "certs")
        for name in CONTROLLERS:
            install_rbac(plane, name)
            kubeconfig = service_account_kubeconfig(plane, name, workdir / f"{name}.kubeconfig")
            config = workdir / f"{name}.yaml"
            config.write_text(
                yaml.safe_dump(loopback_config(name, health[name], ports[name], cert_dir), sort_keys=False)
            )
            argv = _command(name, config, kubeconfig, workdir, cert_dir)
            running.processes[name] = _start(workdir, name, argv)
        for name in CONTROLLERS:
            # Webhooks fail closed: register them only once their handlers answer. /readyz is not
            # enough: JobSet v0.12.0 reports ready once its certificates are in place and the webhook
            # server listens, while a goroutine registers the handlers after setting up its
            # controllers (main.go `go setupControllers`, `setupHealthzAndReadyzCheck`); a JobSet
            # posted in between was refused, "failed calling webhook ...: the server could not find
            # the requested resource" (the handler's path answered 404).
            configurations = webhook_configurations(name, ports[name], ca_bundle)

            def ready(name: str = name, configurations: list[dict[str, Any]] = configurations) -> bool:
                running.check_alive()
                return _ready(health[name]) and _handlers_serve(configurations, ca_bundle)

            try:
                plane.wait_for(f"{name} /readyz and its webhook handlers", ready, timeout)
            except cp.ControlPlaneError as err:
                raise cp.ControlPlaneError(f"{err}\n--- {name} log ---\n{running.log_tail(name)}") from None
            running.webhooks += _register_webhooks(plane, configurations)
            running.timings[name] = time.monotonic() - started
        running.stand_in = slice_admission.SliceAdmission(plane)
        running.stand_in.start()
        running.timings["total"] = time.monotonic() - started
        yield running
    finally:
        running.stop()
        if keep:
            print(f"controller files kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
