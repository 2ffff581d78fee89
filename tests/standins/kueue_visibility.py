"""Stand-in for Kueue's visibility API server: the discovery its APIServices are checked by.

Kueue's chart registers `v1beta1` and `v1beta2` of `visibility.kueue.x-k8s.io` as APIServices
served by Kueue's own pods (port 8082). The out-of-cluster Kueue cannot serve them: the server
reads its certificate from the fixed path /visibility (kueue v0.19.2 pkg/visibility/server.go
certDir), so tests/controllers.py turns VisibilityOnDemand off. With the APIServices unavailable
the API server's discovery fails for that group, and the namespace controller leaves every
namespace it deletes Terminating ("Discovery failed for some groups"), as it would on a cluster
whose Kueue does not serve them: `pulumi destroy` then waits on the program's namespaces.

This stand-in answers what the aggregator and discovery ask of those pods: the group and the
resources each version serves, as Kueue registers them (pkg/visibility/storage/storage.go:
`clusterqueues` (cluster-scoped) and `localqueues` (namespaced), which
implement no verb, each with a `pendingworkloads` subresource that implements get). It runs over
TLS with a self-signed certificate: the chart's APIServices set insecureSkipTLSVerify.

What it cannot show: the pending-workload lists themselves, the server's authentication and
authorization delegation, and API Priority and Fairness for it.
"""

from __future__ import annotations

import http.server
import json
import ssl
import tempfile
import threading
from pathlib import Path
from typing import Any

from tests import control_plane as cp

GROUP = "visibility.kueue.x-k8s.io"
VERSIONS = ("v1beta2", "v1beta1")  # v1beta2 preferred: kueue v0.19.2 pkg/visibility/server.go codecs


def resources(version: str) -> dict[str, Any]:
    def resource(name: str, singular: str, namespaced: bool, verbs: list[str]) -> dict[str, Any]:
        kind = "PendingWorkloadsSummary"
        return {"name": name, "singularName": singular, "namespaced": namespaced, "kind": kind, "verbs": verbs}

    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{GROUP}/{version}",
        "resources": [
            resource("clusterqueues", "clusterqueue", False, []),
            resource("clusterqueues/pendingworkloads", "", False, ["get"]),
            resource("localqueues", "localqueue", True, []),
            resource("localqueues/pendingworkloads", "", True, ["get"]),
        ],
    }


def group() -> dict[str, Any]:
    versions = [{"groupVersion": f"{GROUP}/{v}", "version": v} for v in VERSIONS]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": GROUP, "versions": versions,
            "preferredVersion": versions[0]}  # fmt: skip


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        body: dict[str, Any] | None = None
        if path == "/apis":
            body = {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group()]}
        elif path == f"/apis/{GROUP}":
            body = group()
        elif path.startswith(f"/apis/{GROUP}/") and path.rsplit("/", 1)[1] in VERSIONS:
            body = resources(path.rsplit("/", 1)[1])
        elif path in ("/healthz", "/readyz", "/livez"):
            self._send(200, b"ok", "text/plain")
            return
        if body is None:
            self._send(404, b'{"kind":"Status","apiVersion":"v1","status":"Failure","code":404}', "application/json")
            return
        # Plain JSON even when aggregated discovery (apidiscovery.k8s.io/v2) is asked for: the API
        # server then falls back to the per-version documents, as for any server without it.
        self._send(200, json.dumps(body).encode(), "application/json")

    def _send(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class KueueVisibility:
    def __init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="kueue-visibility-"))
        key, crt = self._dir / "tls.key", self._dir / "tls.crt"
        cp._openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", str(key), "-out", str(crt), "-days", "2", "-subj", "/CN=kueue-visibility-server",
                    "-addext", "subjectAltName=IP:127.0.0.1")  # fmt: skip
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(crt, key)
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.port = int(self._server.server_address[1])

    def start(self) -> None:
        threading.Thread(target=self._server.serve_forever, name="kueue-visibility", daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        for path in self._dir.iterdir():
            path.unlink()
        self._dir.rmdir()
