"""The internal GKE Gateway (regional internal Application Load Balancer) in front of the router."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from contracts.kubernetes_object import KubernetesObject
from contracts.labels import COMMON_LABELS

# gke-l7-rilb: internal to the VPC, served from the proxy-only subnet.
GATEWAY_CLASS = "gke-l7-rilb"
LISTENER_PORT = 80


@dataclass(frozen=True)
class InferenceGatewayArgs:
    provider: kubernetes.Provider
    name: str
    namespace: str
    address_timeout_seconds: int
    depends_on: Sequence[pulumi.Resource] = ()


def gateway_body(args: InferenceGatewayArgs) -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {
            "name": args.name,
            "namespace": args.namespace,
            "labels": dict(COMMON_LABELS),
            "annotations": {
                # `pulumi up` waits until the load balancer has an address, and no longer than this.
                "pulumi.com/waitFor": "jsonpath={.status.addresses[0].value}",
                "pulumi.com/timeoutSeconds": str(args.address_timeout_seconds),
            },
        },
        "spec": {
            "gatewayClassName": GATEWAY_CLASS,
            "listeners": [
                {
                    "name": "http",
                    "port": LISTENER_PORT,
                    "protocol": "HTTP",
                    # Only routes of the serving namespace may attach.
                    "allowedRoutes": {"namespaces": {"from": "Same"}},
                }
            ],
        },
    }


def first_address(status: Any) -> str:
    """The gateway's IP from its status (`status.addresses[0].value`)."""
    addresses = (status or {}).get("addresses") or []
    # Empty, not an error: a refresh can read a Gateway between addresses, and the program must
    # still run (the create waits for the address with pulumi.com/waitFor).
    return str(addresses[0].get("value") or "") if addresses else ""


class InferenceGateway(pulumi.ComponentResource):
    gateway: KubernetesObject
    address: pulumi.Output[str]

    def __init__(self, name: str, args: InferenceGatewayArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpu-slicing:k8s:InferenceGateway", name, None, opts)
        self.gateway = KubernetesObject(
            "gateway",
            gateway_body(args),
            pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on)),
        )
        self.address = self.gateway.status.apply(first_address)
        self.register_outputs({"address": self.address})
