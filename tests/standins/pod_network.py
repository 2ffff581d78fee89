"""Stand-in for the cluster's pod network, as the API server reaches it: an HTTP CONNECT proxy.

On GKE the API server calls a webhook or an aggregated API that names a Service at one of the
Service's endpoints, a pod IP and target port on the cluster network (Konnectivity carries it on
private clusters). On the local plane the pods are kwok's and have no network, so the plane's
kube-apiserver is given an egress selector whose `cluster` connection is this proxy
(`control_plane(..., cluster_network=...)`; kube-apiserver v1.36.3 k8s.io/apiserver
pkg/util/webhook/authentication.go: Service-referenced webhooks dial through the `cluster` egress,
URL webhooks through `controlplane`, which stays direct). The API server still resolves the Service
to an EndpointSlice address itself (cmd/kube-apiserver/app/server.go buildServiceResolver, with
--enable-aggregator-routing), checks the serving certificate for `<service>.<namespace>.svc`, and
sends `CONNECT <pod IP>:<port>` here. The proxy asks `resolve(pod IP, port)` at that moment which
local address plays that pod's port (a controller process on loopback playing the pod: see
tests/installed_controllers.py) and connects the two, or refuses, as a pod that does not listen on
a port refuses a connection. Addresses in `direct` (this machine's own, where another stand-in's
EndpointSlice points: slice_webhook.py) are connected as they are, as a routed network would.

What it cannot show: NetworkPolicies (nothing here enforces them), the GKE firewall rules between
the control plane and the nodes, latency, or Konnectivity's own failures.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import socketserver
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

MAX_HEADER = 8192


class PodNetwork:
    """The proxy on a Unix socket; `resolve(pod IP, port)` names the local port behind an address."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.resolve: Callable[[str, int], tuple[str, int] | None] = lambda _ip, _port: None
        self.direct: set[str] = set()
        self.connections: list[tuple[str, int, bool]] = []  # (pod IP, port, routed)
        self._server: socketserver.ThreadingUnixStreamServer | None = None
        self._thread: threading.Thread | None = None

    def route(self, pod_ip: str, port: int) -> tuple[str, int] | None:
        try:
            return self.resolve(pod_ip, port)
        except Exception:  # the plane going away: nothing listens
            return None

    def egress_selector_configuration(self) -> dict[str, object]:
        """kube-apiserver's --egress-selector-config-file (apiserver.k8s.io/v1beta1
        EgressSelectorConfiguration): only the `cluster` network goes through the proxy."""
        return {
            "apiVersion": "apiserver.k8s.io/v1beta1",
            "kind": "EgressSelectorConfiguration",
            "egressSelections": [
                {
                    "name": "cluster",
                    "connection": {
                        "proxyProtocol": "HTTPConnect",
                        "transport": {"uds": {"udsName": str(self.socket_path)}},
                    },
                }
            ],
        }

    def start(self) -> None:
        network = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                network._handle(self.request)

        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        self._server = socketserver.ThreadingUnixStreamServer(str(self.socket_path), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="pod-network", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)

    def _handle(self, client: socket.socket) -> None:
        # A side that hangs up (the API server's call timing out, a process stopping) ends the pipe.
        with contextlib.suppress(OSError):
            self._connect(client)

    def _connect(self, client: socket.socket) -> None:
        header = b""
        while b"\r\n\r\n" not in header:
            chunk = client.recv(4096)
            if not chunk or len(header) > MAX_HEADER:
                return
            header += chunk
        head, _, rest = header.partition(b"\r\n\r\n")
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split()
        if len(parts) != 3 or parts[0] != "CONNECT":
            client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            return
        host, _, port_text = parts[1].rpartition(":")
        host = host.strip("[]")
        port = int(port_text) if port_text.isdigit() else 0
        target = self.route(host, port) or ((host, port) if host in self.direct else None)
        self.connections.append((host, port, target is not None))
        if target is None:
            # Nothing listens at that pod address: the API server reports the connection error.
            client.sendall(b"HTTP/1.1 503 Service Unavailable\r\n\r\nconnection refused\n")
            return
        try:
            upstream = socket.create_connection(target, timeout=10)
        except OSError:
            client.sendall(b"HTTP/1.1 503 Service Unavailable\r\n\r\nconnection refused\n")
            return
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        with upstream:
            if rest:
                upstream.sendall(rest)
            _pipe(client, upstream)


def _pipe(a: socket.socket, b: socket.socket) -> None:
    sockets = [a, b]
    while True:
        readable, _, broken = select.select(sockets, [], sockets, 300)
        if broken or not readable:
            return
        for source in readable:
            data = source.recv(65536)
            if not data:
                return
            (b if source is a else a).sendall(data)


@contextlib.contextmanager
def pod_network(socket_path: Path) -> Iterator[PodNetwork]:
    network = PodNetwork(socket_path)
    network.start()
    try:
        yield network
    finally:
        network.stop()
