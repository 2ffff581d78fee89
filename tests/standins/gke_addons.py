"""Stand-in for what GKE itself adds to a cluster the program creates, on the local control plane.

With the Gateway API, Managed Prometheus and the inference extension on, GKE installs CRDs and a
GatewayClass before the program's objects arrive, and its load-balancer controllers give
LoadBalancer Services and Gateways their addresses; `pulumi up` waits for those addresses
(contracts/awaits.py, k8s/inference_gateway.py). `install(plane)` puts in what GKE installs:

- the Gateway API CRDs (GatewayClass, Gateway, HTTPRoute) and the InferencePool CRD, from the
  upstream schemas `make crds` takes from their Go modules (never copied here), so the API server validates the
  program's objects against them, CEL rules included;
- GKE's HealthCheckPolicy and GCPBackendPolicy (networking.gke.io/v1) and Managed Prometheus'
  PodMonitoring (monitoring.googleapis.com/v1) as CRDs that keep any field: their schemas are not
  published, so here the API server checks only their names and types (tests/gke_schema.py and
  tests/gmp_schema.py check the fields offline);
- GKE's Slice kind (`slices.accelerator.gke.io`, from --enable-slice-controller) as a cluster-scoped
  CRD that keeps any field (no public manifest; its version here is a guess), which the slice
  stand-in (slice_admission.py) creates and finalizes;
- the `gke-l7-rilb` GatewayClass.

`LoadBalancers` then plays the load-balancer controllers: each LoadBalancer Service gets an
ingress IP and each Gateway of a known class an address with Accepted and Programmed conditions.

What it cannot show: GKE's own versions of these CRDs (its Gateway API channel may trail the
pinned upstream release), the policies' and PodMonitoring's field validation, whether GKE accepts
the Gateway (proxy-only subnet, certificates, health checks) or the Service annotations, the
addresses it really hands out and how long that takes.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from tests import control_plane as cp
from tests.controllers import install_documents
from tests.crd_schema import crd_cache, crd_root
from tests.standins.poller import Poller
from tests.standins.slice_admission import SLICE_KIND

GATEWAY_API = ("gateway-api", "v1.6.1")
GATEWAY_CLASSES = ("gke-l7-rilb",)
GATEWAY_CONTROLLER = "networking.gke.io/gateway"
# (group, kind, plural) of the GKE-managed kinds without a published schema.
UNPUBLISHED = (
    ("networking.gke.io", "HealthCheckPolicy", "healthcheckpolicies"),
    ("networking.gke.io", "GCPBackendPolicy", "gcpbackendpolicies"),
    ("monitoring.googleapis.com", "PodMonitoring", "podmonitorings"),
)


def _crds_root() -> Path:
    return crd_root() or crd_cache()  # `make crds`


def _unpublished_crd(
    group: str, kind: str, plural: str, version: str = "v1", scope: str = "Namespaced"
) -> dict[str, Any]:
    open_object = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": open_object, "status": open_object},
                        }
                    },
                }
            ],
        },
    }


def crds(inference_extension: str) -> list[dict[str, Any]]:
    """GKE installs the InferencePool CRD of its own choosing; here, the stack's pinned release."""
    documents: list[dict[str, Any]] = []
    for component, version in (GATEWAY_API, ("gateway-api-inference-extension", inference_extension)):
        folder = _crds_root() / component / version
        files = sorted(folder.glob("*.yaml"))
        if not files:
            raise cp.ControlPlaneError(f"no CRDs in {folder}: run `make crds` (or set TPU_SLICING_CRDS)")
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        documents += [doc for path in files for doc in yaml.load_all(path.read_text(), Loader=loader) if doc]
    # GKE's Slice kind (--enable-slice-controller), which the slice stand-in creates and finalizes.
    group, kind, plural, version = SLICE_KIND
    slices = _unpublished_crd(group, kind, plural, version, scope="Cluster")
    return [*documents, *(_unpublished_crd(*kind) for kind in UNPUBLISHED), slices]


def install(plane: cp.ControlPlane, inference_extension: str) -> None:
    install_documents(plane, crds(inference_extension))
    for name in GATEWAY_CLASSES:
        plane.apply(
            f"/apis/gateway.networking.k8s.io/v1/gatewayclasses/{name}",
            {
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "GatewayClass",
                "metadata": {"name": name},
                "spec": {"controllerName": GATEWAY_CONTROLLER},
            },
        )


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class LoadBalancers(Poller):
    """Give LoadBalancer Services and Gateways addresses from `pool`, as GKE's controllers do."""

    name = "gke-load-balancer-stand-in"
    watched = ("/api/v1/services", "/apis/gateway.networking.k8s.io/v1/gateways")  # what it reads
    idle = 5.0  # nothing but a new or changed object needs an address

    def __init__(self, plane: cp.ControlPlane, pool: str = "10.250.0.0/24", *, interval: float = 0.5) -> None:
        super().__init__(plane, interval=interval)
        self._addresses: Iterator[ipaddress.IPv4Address | ipaddress.IPv6Address] = ipaddress.ip_network(pool).hosts()
        self.assigned: dict[str, str] = {}  # "Kind namespace/name" -> address

    def _next(self, key: str) -> str:
        if key not in self.assigned:
            self.assigned[key] = str(next(self._addresses))
        return self.assigned[key]

    def _status(self, path: str, obj: dict[str, Any], status: dict[str, Any]) -> None:
        meta = obj["metadata"]
        body = {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "status": status,
        }
        self.plane.request(
            "PATCH",
            f"{path}/status",
            body,
            content_type="application/apply-patch+yaml",
            query={"fieldManager": self.name, "force": "true"},
        )

    def reconcile(self) -> None:
        for service in self.plane.request("GET", "/api/v1/services")["items"]:
            if service["spec"].get("type") != "LoadBalancer":
                continue
            if (service.get("status", {}).get("loadBalancer") or {}).get("ingress"):
                continue
            meta = service["metadata"]
            ip = self._next(f"Service {meta['namespace']}/{meta['name']}")
            service.setdefault("apiVersion", "v1")
            service.setdefault("kind", "Service")
            path = f"/api/v1/namespaces/{meta['namespace']}/services/{meta['name']}"
            self._status(path, service, {"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"}]}})
        try:
            gateways = self.plane.request("GET", "/apis/gateway.networking.k8s.io/v1/gateways")["items"]
        except cp.ApiError as err:
            if err.status == 404:
                return  # the Gateway API CRDs are not installed
            raise
        for gateway in gateways:
            if gateway["spec"].get("gatewayClassName") not in GATEWAY_CLASSES or gateway.get("status", {}).get(
                "addresses"
            ):
                continue
            meta = gateway["metadata"]
            ip = self._next(f"Gateway {meta['namespace']}/{meta['name']}")
            conditions = [
                {
                    "type": kind,
                    "status": "True",
                    "reason": kind,
                    "message": "stand-in (tests/standins/gke_addons.py)",
                    "observedGeneration": meta.get("generation", 1),
                    "lastTransitionTime": _now(),
                }
                for kind in ("Accepted", "Programmed")
            ]
            path = f"/apis/gateway.networking.k8s.io/v1/namespaces/{meta['namespace']}/gateways/{meta['name']}"
            self._status(path, gateway, {"addresses": [{"type": "IPAddress", "value": ip}], "conditions": conditions})
