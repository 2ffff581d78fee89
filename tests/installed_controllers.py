"""Bodies for the controllers the program's Helm Releases install on a plane whose pods are kwok's.

With `controllers.install: true` (every stack file's default) `pulumi up` installs JobSet, Kueue and
LWS from their charts through the real Kubernetes provider (Helm inside it). kwok "runs" the pods of
their Deployments, which have no process. `Bodies` plays them: when a controller's pod is bound to a
node it starts that controller (the binary `make controlplane` built at the same pin) out of
cluster, configured from what the Release put in the cluster, read back from the API server: the
ConfigMap the Deployment mounts at --config, the Deployment's arguments and its ServiceAccount (a
token from the TokenRequest API, so the chart's RBAC holds it), with the loopback differences of
tests/controllers.py `loopback_config` and nothing else.

Certificates: instead of the controller making its own and patching them in, `Bodies` makes a
serving certificate for the controller's Services (`<service>.<namespace>.svc`, what the API server
checks) and puts the test CA into the caBundle of the webhook configurations and CRD conversion
webhooks that name those Services, as the controller's certificate manager would.

When the process answers /readyz (the chart's readiness probe), its pods are annotated as served and
the plane's gated kwok Stage makes them Ready (tests/control_plane.py Network), which is what
satisfies the Release's await (Helm's wait for the Deployment). A Helm upgrade that changes the pod
template (a new chart version: its image, its configuration) makes the Deployment roll out a new
ReplicaSet (or, back to an earlier template, revive an old one with a new revision); when the first
pod of the newest ReplicaSet is bound, the process is restarted from the Deployment as it now is,
as that pod's container would start with the new configuration. The API server reaches the webhooks
through the pod network stand-in (tests/standins/pod_network.py), which `resolve` answers: a pod IP
and the container port of the manager's webhook server lead to the process's webhook port, and
Kueue's visibility port to the discovery stand-in of tests/standins/kueue_visibility.py. One
process plays every replica (Kueue's two), so leader election is off. When a controller's pods are
gone (helm uninstall), its process is stopped.

What it cannot show: the controllers' images (the binaries are built from the one pinned module tag,
not pulled, so a chart of another version runs the pinned binary with that chart's configuration),
their in-cluster certificate rotation, a rollout's overlap (one process plays the old and the new
replicas, so the webhooks are down while it restarts, where real replicas overlap), pod restarts
that do not change the template, resource limits and probes' timing.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from k8s import controllers as program
from tests import control_plane as cp
from tests import controllers as ctl
from tests.standins.kueue_visibility import KueueVisibility
from tests.standins.poller import Poller

REVISION = "deployment.kubernetes.io/revision"
GATED = ("app.kubernetes.io/instance", tuple(program.CHARTS))  # the charts' pods carry their release name


@dataclass
class Body:
    name: str
    process: cp._Process
    health: int
    webhook: int
    webhook_container_port: int
    visibility_container_port: int | None = None  # Kueue's aggregated API: tests/standins/kueue_visibility.py
    served: bool = False
    template: str = ""  # the pod-template-hash of the pods it was started for (the ReplicaSet's)


class Bodies(Poller):
    """The reconcile loop that gives each installed controller's pods a process."""

    name = "installed-controller-bodies"

    def __init__(self, plane: cp.ControlPlane, workdir: Path) -> None:
        super().__init__(plane, interval=0.3)
        self.workdir = workdir
        self.bodies: dict[str, Body] = {}
        self.started: list[str] = []  # "<name> <uid of the first pod>" per start
        self.stopped: list[str] = []  # the controllers whose pods were all gone (helm uninstall)
        self.restarted: list[str] = []  # "<name> <old template> -> <new template>" per rollout
        self.routed: list[str] = []  # the controller each routed connection reached
        self.visibility = KueueVisibility()

    # --- the loop -----------------------------------------------------------------------------

    def reconcile(self) -> None:
        for name, spec in program.CHARTS.items():
            pods = self._pods(spec.namespace, name)
            bound = [p for p in pods if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")]
            body = self.bodies.get(name)
            current = self._current_template(spec.namespace, spec.deployment) if bound else ""
            newer = [p for p in bound if body is not None and _template(p) == current != body.template]
            if body is not None and newer:
                self.restarted.append(f"{name} {body.template} -> {current}")
                self._stop_body(name, uninstalled=False)
                body = None
            if body is None and bound:
                self.bodies[name] = body = self._start(name, spec.namespace)
                body.template = current
                self.started.append(f"{name} {(newer or bound)[0]['metadata']['uid']}")
            if body is None:
                continue
            if body.process.popen.poll() is not None:
                raise cp.ControlPlaneError(
                    f"{name} exited with {body.process.popen.returncode}:\n{body.process.tail()}"
                )
            if not pods:
                self._stop_body(name)
                continue
            if not body.served:
                body.served = ctl._ready(body.health)
            if body.served:
                for pod in bound:
                    if cp.SERVED_ANNOTATION not in (pod["metadata"].get("annotations") or {}):
                        self.plane.request(
                            "PATCH",
                            f"/api/v1/namespaces/{spec.namespace}/pods/{pod['metadata']['name']}",
                            {"metadata": {"annotations": {cp.SERVED_ANNOTATION: "true"}}},
                            content_type="application/merge-patch+json",
                        )

    def resolve(self, pod_ip: str, port: int) -> tuple[str, int] | None:
        """The local address that plays `pod_ip:port`, for the pod network stand-in."""
        pods = self.plane.request("GET", "/api/v1/pods", query={"fieldSelector": f"status.podIP={pod_ip}"})["items"]
        for pod in pods:
            release = (pod["metadata"].get("labels") or {}).get(GATED[0])
            body = self.bodies.get(release or "")
            if body is not None and pod["metadata"]["namespace"] == program.CHARTS[body.name].namespace:
                if port == body.visibility_container_port:
                    return ("127.0.0.1", self.visibility.port)
                if port != body.webhook_container_port:
                    return None
                self.routed.append(body.name)
                return ("127.0.0.1", body.webhook)
        return None

    def start(self) -> None:
        self.visibility.start()
        super().start()

    def stop(self) -> None:
        super().stop()
        for name in list(self.bodies):
            self._stop_body(name)
        self.visibility.stop()

    # --- one controller -------------------------------------------------------------------------

    def _pods(self, namespace: str, release: str) -> list[dict[str, Any]]:
        selector = f"{GATED[0]}={release}"
        found = self.plane.request("GET", f"/api/v1/namespaces/{namespace}/pods", query={"labelSelector": selector})
        return list(found["items"])

    def _current_template(self, namespace: str, deployment: str) -> str:
        """The pod-template-hash of the Deployment's newest ReplicaSet: the one with the highest
        revision, which a rollback to an earlier template raises again (k8s.io/kubernetes v1.36.3
        pkg/controller/deployment/util/deployment_util.go:48 RevisionAnnotation)."""
        sets = self.plane.request("GET", f"/apis/apps/v1/namespaces/{namespace}/replicasets")["items"]
        mine = [
            rs
            for rs in sets
            if any(
                o["kind"] == "Deployment" and o["name"] == deployment
                for o in rs["metadata"].get("ownerReferences") or []
            )
        ]
        if not mine:
            return ""
        newest = max(mine, key=lambda rs: int((rs["metadata"].get("annotations") or {}).get(REVISION, "0")))
        return str((newest["metadata"].get("labels") or {}).get("pod-template-hash", ""))

    def _deployment(self, name: str, namespace: str) -> dict[str, Any]:
        path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{program.CHARTS[name].deployment}"
        return dict(self.plane.request("GET", path))

    def _start(self, name: str, namespace: str) -> Body:
        deployment = self._deployment(name, namespace)
        pod_spec = deployment["spec"]["template"]["spec"]
        (container,) = [c for c in pod_spec["containers"] if c.get("command") == ["/manager"]]
        args = [str(a) for a in container.get("args") or []]
        config_file = Path(next(a for a in args if a.startswith("--config=")).removeprefix("--config=")).name
        installed = self._installed_configuration(namespace, pod_spec, config_file)
        ports = {p.get("name"): p["containerPort"] for p in container.get("ports") or []}
        webhook_port = next(port for port in ports.values() if port == 9443)  # each chart's webhook server
        workdir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.workdir))
        services = self.plane.request("GET", f"/api/v1/namespaces/{namespace}/services")["items"]
        dns = [f"{s['metadata']['name']}.{namespace}.svc" for s in services]
        cert_dir, ca_bundle = ctl._certificates(workdir / "certs", dns)
        self._inject_ca_bundle(namespace, ca_bundle)
        health, webhook = cp.free_port(), cp.free_port()
        config = workdir / "config.yaml"
        configuration = ctl.loopback_config(name, health, webhook, cert_dir, installed=installed)
        config.write_text(yaml.safe_dump(configuration, sort_keys=False))
        kubeconfig = self._token_kubeconfig(namespace, pod_spec["serviceAccountName"], workdir / "kubeconfig")
        (workdir / "logs").mkdir()
        rest = [a for a in args if not a.startswith("--config")]
        argv = ctl._command(name, config, kubeconfig, workdir, cert_dir, args=rest)
        return Body(name, ctl._start(workdir, name, argv), health, webhook, webhook_port, ports.get("visibility"))

    def _installed_configuration(self, namespace: str, pod_spec: Mapping[str, Any], file: str) -> dict[str, Any]:
        for volume in pod_spec.get("volumes") or []:
            name = (volume.get("configMap") or {}).get("name")
            if not name:
                continue
            data = self.plane.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}").get("data") or {}
            if file in data:
                return dict(yaml.safe_load(data[file]))
        raise cp.ControlPlaneError(f"no ConfigMap in {namespace} holds {file}")

    def _token_kubeconfig(self, namespace: str, account: str, path: Path) -> Path:
        answer = self.plane.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": ctl.TOKEN_SECONDS}},
        )  # fmt: skip
        user = f"system:serviceaccount:{namespace}:{account}"
        cp._write_kubeconfig(path, self.plane.server, self.plane.ca_file, user, answer["status"]["token"])
        return path

    def _inject_ca_bundle(self, namespace: str, ca_bundle: bytes) -> None:
        """What the controller's certificate manager does: the CA into every webhook that names one
        of its Services (admission webhooks, and Kueue's CRD conversion webhooks)."""
        bundle = base64.b64encode(ca_bundle).decode()
        for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            base = f"/apis/admissionregistration.k8s.io/v1/{plural}"
            for item in self.plane.request("GET", base)["items"]:
                changed = copy.deepcopy(item)
                for webhook in changed.get("webhooks") or []:
                    if (webhook["clientConfig"].get("service") or {}).get("namespace") == namespace:
                        webhook["clientConfig"]["caBundle"] = bundle
                if changed != item:
                    self.plane.request("PUT", f"{base}/{item['metadata']['name']}", changed)
        base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        for crd in self.plane.request("GET", base)["items"]:
            conversion = (crd["spec"].get("conversion") or {}).get("webhook") or {}
            if (conversion.get("clientConfig", {}).get("service") or {}).get("namespace") == namespace:
                changed = copy.deepcopy(crd)
                changed["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] = bundle
                self.plane.request("PUT", f"{base}/{crd['metadata']['name']}", changed)

    def _stop_body(self, name: str, uninstalled: bool = True) -> None:
        body = self.bodies.pop(name, None)
        if body is not None:
            body.process.stop()
            if uninstalled:
                self.stopped.append(name)

    def log_tail(self, name: str, lines: int = 40) -> str:
        body = self.bodies.get(name)
        return body.process.tail(lines) if body else ""


def _template(pod: Mapping[str, Any]) -> str:
    # The Deployment controller labels a ReplicaSet's pods with its template's hash
    # (k8s.io/kubernetes v1.36.3 pkg/controller/deployment/sync.go:199, DefaultDeploymentUniqueLabelKey).
    return str((pod["metadata"].get("labels") or {}).get("pod-template-hash", ""))


@contextlib.contextmanager
def bodies(plane: cp.ControlPlane) -> Iterator[Bodies]:
    workdir = Path(tempfile.mkdtemp(prefix="tpu-slicing-bodies-"))
    running = Bodies(plane, workdir)
    running.start()
    try:
        yield running
    finally:
        running.stop()
        shutil.rmtree(workdir, ignore_errors=True)
