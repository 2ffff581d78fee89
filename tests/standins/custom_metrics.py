"""Stand-in for the Custom Metrics Stackdriver Adapter: the `custom.metrics.k8s.io` API an HPA reads.

The program registers the adapter's APIServices, which name its Service (k8s/metrics_adapter.py);
the HPA controller in kube-controller-manager asks the API server for a role's `Pods` metric, and
the aggregator proxies the call to an endpoint of that Service. This stand-in plays the adapter's
pod behind the program's own Service and APIServices:

1. serves HTTPS on this machine's own address (kwok's pods have no network), and gives the
   program's Service an EndpointSlice with that address and port, as slice_webhook.py does: the
   API server routes to endpoints (`--enable-aggregator-routing`, tests/control_plane.py), so a
   wrong Service name, namespace, port or APIService shows up as an unavailable API;
2. answers discovery (`/apis`, `/apis/custom.metrics.k8s.io/<version>`) and
   `GET /apis/custom.metrics.k8s.io/<version>/namespaces/<ns>/pods/*/<metric>?labelSelector=...`
   with a MetricValueList (sigs.k8s.io/custom-metrics-apiserver v1.35.0, the library the adapter
   serves it with; k8s.io/metrics pkg/apis/custom_metrics/v1beta2 types.go) holding one value per
   Ready pod of the selector: the adapter answers from Monitoring, which holds a series only for
   pods Managed Prometheus scraped, and a pod that is not Ready serves no /metrics yet;
3. takes the values from `values[(namespace, metric)]`, which the test sets as load would, and
   records each query (the metric name the HPA asked for, the selector, how many pods answered).

What it cannot show: Monitoring's delay and alignment, the adapter's authentication and
authorization of its callers (auth-delegator), Workload Identity, and the closed image itself.
"""

from __future__ import annotations

import datetime
import http.server
import ssl
import tempfile
import threading
import urllib.parse
from pathlib import Path
from typing import Any

from contracts import quantities
from k8s.metrics_adapter import NAME as SERVICE
from k8s.metrics_adapter import NAMESPACE
from tests import control_plane as cp
from tests.standins.poller import JsonHandler, ServingPoller
from tests.standins.slice_webhook import host_address, publish_endpoint, serving_certificate

GROUP = "custom.metrics.k8s.io"
VERSIONS = ("v1beta1", "v1beta2")


class _Api(JsonHandler):
    server_version = "custom-metrics-stand-in"
    stand_in: CustomMetrics  # set on the server's handler class

    def do_GET(self) -> None:  # noqa: N802
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]
        if parts == ["apis"]:
            versions = [{"groupVersion": f"{GROUP}/{v}", "version": v} for v in VERSIONS]
            group = {"name": GROUP, "versions": versions, "preferredVersion": versions[-1]}
            self.send_json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]})
        elif parts[:2] == ["apis", GROUP] and len(parts) == 3 and parts[2] in VERSIONS:
            resources = [
                {"name": "pods/*", "singularName": "", "namespaced": True, "kind": "MetricValueList", "verbs": ["get"]}
            ]
            self.send_json(
                200,
                {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": f"{GROUP}/{parts[2]}",
                    "resources": resources,
                },
            )
        elif (
            parts[:2] == ["apis", GROUP]
            and len(parts) == 8
            and parts[2] in VERSIONS
            and parts[3] == "namespaces"
            and parts[5:7] == ["pods", "*"]
        ):
            selector = urllib.parse.parse_qs(url.query).get("labelSelector", [""])[0]
            self.send_json(200, self.stand_in.values_list(parts[2], parts[4], parts[7], selector))
        else:
            self.send_json(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404})


class CustomMetrics(ServingPoller):
    name = "custom-metrics-stand-in"

    def __init__(self, plane: cp.ControlPlane, *, interval: float = 0.5) -> None:
        super().__init__(plane, interval=interval)
        self._dir = Path(tempfile.mkdtemp(prefix="custom-metrics-", dir=plane.workdir))
        serving_certificate(self._dir, f"{SERVICE}.{NAMESPACE}.svc")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self._dir / "tls.crt", self._dir / "tls.key")
        handler = type("Api", (_Api,), {"stand_in": self})
        self.address = host_address()
        self.server = http.server.ThreadingHTTPServer((self.address, 0), handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.values: dict[tuple[str, str], float] = {}  # (namespace, metric as the HPA names it) -> value
        self.queries: list[tuple[str, str, str, int]] = []  # (namespace, metric, selector, pods answered)
        self._lock = threading.Lock()
        self.published = False

    def values_list(self, version: str, namespace: str, metric: str, selector: str) -> dict[str, Any]:
        pods = self.plane.request(
            "GET", f"/api/v1/namespaces/{namespace}/pods", query={"labelSelector": selector} if selector else None
        )["items"]
        ready = [p for p in pods if _ready(p)]
        with self._lock:
            value = self.values.get((namespace, metric))
            self.queries.append((namespace, metric, selector, len(ready) if value is not None else 0))
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        items = [
            {
                "describedObject": {
                    "kind": "Pod",
                    "namespace": namespace,
                    "name": p["metadata"]["name"],
                    "apiVersion": "/v1",
                },
                "metric": {"name": metric, "selector": None} if version == "v1beta2" else None,
                "metricName": metric if version == "v1beta1" else None,
                "timestamp": now,
                "windowSeconds": 60,
                "value": quantities.decimal(value),
            }
            for p in ready
            if value is not None
        ]
        for item in items:  # each version has one of the two
            for key in ("metric", "metricName"):
                if item[key] is None:
                    del item[key]
        return {"kind": "MetricValueList", "apiVersion": f"{GROUP}/{version}", "metadata": {}, "items": items}

    def reconcile(self) -> None:
        if self.published:
            return
        try:
            self.plane.request("GET", f"/api/v1/namespaces/{NAMESPACE}/services/{SERVICE}")
        except cp.ApiError as err:
            if err.status == 404:
                return  # the program's Service is not there yet
            raise
        publish_endpoint(self.plane, NAMESPACE, SERVICE, address=self.address, port=self.port, by=self.name)
        self.published = True


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions") or [])
