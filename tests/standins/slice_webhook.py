"""Stand-in for the slice controller's webhook server, the half of the closed image the API server calls.

The program deploys the real slice controller's Deployment, Service, empty certificate Secret and
a fail-closed MutatingWebhookConfiguration (k8s/slice_controller.py), and `pulumi up` waits until
that configuration carries a CA (`pulumi.com/waitFor` on `.webhooks[0].clientConfig.caBundle`).
On GKE the controller's certificate rotator makes a CA and a serving certificate for
`<service>.<namespace>.svc`, writes them into the Secret and the CA into the configuration, and
serves the webhooks on every replica. This stand-in does that, once the Service the webhooks
name selects a ready controller pod exposing the Service's target port:

1. writes the CA and a serving certificate into the Secret (`tls.crt`, `tls.key`, `ca.crt`, the
   rotator's keys) and the CA into every webhook of the configuration, by update; nothing else
   of the program's objects changes, so a second `pulumi up` still finds them as it left them;
2. serves the webhooks over HTTPS, records each call and allows it, adding to every pod template
   that names a slice shape Kueue's topology request for it (slice_topology.py: derived by us,
   since the controller's own mutation is closed);
3. stands in for the pod network: kwok's pods have loopback addresses, which EndpointSlices
   refuse, so the Service gets one more EndpointSlice (managed by this stand-in) with this
   machine's own address and the stand-in's port. The API server routes webhook calls to
   endpoints (`--enable-aggregator-routing`, tests/control_plane.py), so its call still goes
   through the program's Service reference, name, namespace, port and path.

What it cannot show: a replica receiving the call (the endpoint is the stand-in, not the pod),
what else the real controller's webhooks change on Jobs, JobSets, LWS and StatefulSets (their
mutations are closed), its certificate rotation and leader election, and its behaviour when a
replica is down.
"""

from __future__ import annotations

import base64
import http.server
import json
import socket
import ssl
import tempfile
import threading
from pathlib import Path
from typing import Any

from domain import topology
from k8s.slice_controller import CERT_SECRET, EXEMPT_NAMESPACES, NAMESPACE, WEBHOOK_CONFIG, WEBHOOK_SERVICE
from tests import control_plane as cp
from tests.standins import slice_topology
from tests.standins.poller import JsonHandler, ServingPoller

EXEMPT = frozenset(EXEMPT_NAMESPACES)


def host_address() -> str:
    """This machine's own non-loopback address (the route to a private address; nothing is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))
            address = str(probe.getsockname()[0])
        except OSError:
            address = ""
    if not address or address.startswith("127."):
        raise cp.ControlPlaneError("no non-loopback address on this machine for the webhook endpoint")
    return address


def publish_endpoint(plane: cp.ControlPlane, namespace: str, service: str, *, address: str, port: int, by: str) -> None:
    """One more EndpointSlice for `service`, managed by the stand-in `by`: this machine's `address` and
    the stand-in's `port`, unnamed as the Service's port is (the API server matches them by name)."""
    name = f"{service}-stand-in"
    plane.apply(
        f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices/{name}",
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"kubernetes.io/service-name": service, "endpointslice.kubernetes.io/managed-by": by},
            },
            "addressType": "IPv6" if ":" in address else "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
            "ports": [{"name": "", "port": port, "protocol": "TCP"}],
        },
        manager=by,
    )


CONFIG_PATH = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{WEBHOOK_CONFIG}"


def serving_certificate(directory: Path, dns_name: str) -> tuple[bytes, bytes, bytes]:
    """(ca.crt, tls.crt, tls.key) PEM for `dns_name`, made with openssl like the controllers' test certs."""
    ca_key, ca_crt = directory / "ca.key", directory / "ca.crt"
    key, csr, crt, ext = directory / "tls.key", directory / "tls.csr", directory / "tls.crt", directory / "san.ext"
    ext.write_text(f"subjectAltName=DNS:{dns_name}\nextendedKeyUsage=serverAuth\n")
    curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    cp._openssl("req", "-x509", *curve, "-keyout", str(ca_key), "-out", str(ca_crt), "-days", "2",
                "-subj", "/CN=slice-controller-stand-in-ca")  # fmt: skip
    cp._openssl("req", *curve, "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={dns_name}")
    cp._openssl("x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key), "-CAcreateserial",
                "-out", str(crt), "-days", "2", "-extfile", str(ext))  # fmt: skip
    return ca_crt.read_bytes(), crt.read_bytes(), key.read_bytes()


def _templates(kind: str, obj: dict[str, Any]) -> list[tuple[str, dict[str, Any], bool]]:
    """(JSON pointer, pod template, one group) of each pod template the object carries."""
    spec = obj.get("spec") or {}
    if kind == "LeaderWorkerSet":
        lws = spec.get("leaderWorkerTemplate") or {}
        return [
            (f"/spec/leaderWorkerTemplate/{t}", lws[t], True) for t in ("leaderTemplate", "workerTemplate") if t in lws
        ]
    if kind == "JobSet":
        return [
            (f"/spec/replicatedJobs/{i}/template/spec/template", job["template"]["spec"]["template"], False)
            for i, job in enumerate(spec.get("replicatedJobs") or [])
        ]
    if kind in ("Job", "StatefulSet") and "template" in spec:
        return [("/spec/template", spec["template"], kind == "StatefulSet")]
    return []


def topology_patch(generation: topology.Generation, kind: str, obj: dict[str, Any]) -> list[dict[str, Any]]:
    """JSON Patch adding Kueue's topology request to every template that names a slice shape."""
    patch = []
    templates = _templates(kind, obj)
    grouped = kind == "LeaderWorkerSet" and len(templates) == 2  # a leaderTemplate beside the workers'
    for pointer, template, one_group in templates:
        annotations = (template.get("metadata") or {}).get("annotations") or {}
        shape = annotations.get(slice_topology.SLICE_TOPOLOGY_ANNOTATION)
        if not shape:
            continue
        for key, value in slice_topology.kueue_annotations(
            generation, shape, one_group=one_group, grouped=grouped
        ).items():
            if key not in annotations:
                path = f"{pointer}/metadata/annotations/{key.replace('~', '~0').replace('/', '~1')}"
                patch.append({"op": "add", "path": path, "value": value})
    return patch


class _Mutate(JsonHandler):
    server_version = "slice-webhook-stand-in"
    calls: list[tuple[str, str, str]]  # (path, kind, namespace), set on the server's handler class
    generation: topology.Generation

    def do_POST(self) -> None:  # noqa: N802
        review = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        request = review.get("request") or {}
        kind = (request.get("kind") or {}).get("kind", "")
        self.calls.append((self.path, kind, request.get("namespace", "")))
        response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": True}
        patch = topology_patch(self.generation, kind, request.get("object") or {})
        if patch:
            response |= {"patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(patch).encode()).decode()}
        self.send_json(200, {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})


class SliceWebhook(ServingPoller):
    name = "slice-webhook-stand-in"

    def __init__(self, plane: cp.ControlPlane, generation: topology.Generation, *, interval: float = 0.5) -> None:
        super().__init__(plane, interval=interval)
        self._dir = Path(tempfile.mkdtemp(prefix="slice-webhook-", dir=plane.workdir))
        self.ca, self.cert, self.key = serving_certificate(self._dir, f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self._dir / "tls.crt", self._dir / "tls.key")
        self.calls: list[tuple[str, str, str]] = []
        handler = type("Mutate", (_Mutate,), {"calls": self.calls, "generation": generation})
        self.address = host_address()
        self.server = http.server.ThreadingHTTPServer((self.address, 0), handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.ready = False  # the CA is in the configuration and the endpoint is published
        self.paused = False
        self._lock = threading.Lock()  # a pause waits for a reconcile under way

    def pause(self) -> None:
        """The controller stops serving (a crash loop, a bad rollout): its Service is left with no
        ready endpoint, so the API server fails every call of the fail-closed webhooks with "no
        endpoints available for service" and refuses what they match."""
        with self._lock:
            self.paused, self.ready = True, False
        path = f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices/{WEBHOOK_SERVICE}-stand-in"
        try:
            self.plane.request("DELETE", path)
        except cp.ApiError as err:
            if err.status != 404:
                raise

    def resume(self) -> None:
        self.paused = False

    def reconcile(self) -> None:
        with self._lock:
            if not self.paused:
                self._reconcile()

    def _reconcile(self) -> None:
        try:
            config = self.plane.request("GET", CONFIG_PATH)
        except cp.ApiError as err:
            if err.status == 404:
                return  # the program creates it once the Deployment is ready
            raise
        webhooks = config.get("webhooks") or []
        bundle = base64.b64encode(self.ca).decode()
        if self.ready and all(hook["clientConfig"].get("caBundle") == bundle for hook in webhooks):
            return  # served; only a re-applied configuration needs the CA again
        services = {(h["clientConfig"]["service"]["namespace"], h["clientConfig"]["service"]["name"]) for h in webhooks}
        if services != {(NAMESPACE, WEBHOOK_SERVICE)}:
            raise cp.ControlPlaneError(f"the webhooks name {sorted(services)}, not the controller's Service")
        if not self._service_reaches_a_replica():
            return
        self._publish_endpoint()
        self._write_certificate()
        if any(hook["clientConfig"].get("caBundle") != bundle for hook in webhooks):
            for hook in webhooks:
                hook["clientConfig"]["caBundle"] = bundle
            self.plane.request("PUT", CONFIG_PATH, config)
        self.ready = True

    def _publish_endpoint(self) -> None:
        publish_endpoint(self.plane, NAMESPACE, WEBHOOK_SERVICE, address=self.address, port=self.port, by=self.name)

    def _service_reaches_a_replica(self) -> bool:
        """The Service selects a ready pod with a container port equal to its target port."""
        try:
            service = self.plane.request("GET", f"/api/v1/namespaces/{NAMESPACE}/services/{WEBHOOK_SERVICE}")
        except cp.ApiError as err:
            if err.status == 404:
                return False
            raise
        selector = service["spec"].get("selector") or {}
        targets = {p.get("targetPort", p["port"]) for p in service["spec"]["ports"] if p["port"] == 443}
        if not selector or not targets:
            return False
        pods = self.plane.request(
            "GET",
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            query={"labelSelector": ",".join(f"{k}={v}" for k, v in selector.items())},
        )["items"]
        for pod in pods:
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])
            ports = {
                value
                for container in pod["spec"]["containers"]
                for port in container.get("ports") or []
                for value in (port["containerPort"], port.get("name"))
            }
            if ready and targets & ports:
                return True
        return False

    def _write_certificate(self) -> None:
        path = f"/api/v1/namespaces/{NAMESPACE}/secrets/{CERT_SECRET}"
        secret = self.plane.request("GET", path)
        if (secret.get("data") or {}).get("tls.crt"):
            return
        files = {"ca.crt": self.ca, "tls.crt": self.cert, "tls.key": self.key}
        secret["data"] = {name: base64.b64encode(value).decode() for name, value in files.items()}
        self.plane.request("PUT", path, secret)
