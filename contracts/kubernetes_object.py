"""A Kubernetes object of any kind, registered from its whole body.

`apiextensions.CustomResource` only carries `spec`; some kinds keep fields at the
top level (a WorkloadPriorityClass's `value`). Registering the body as it is
keeps one source for what is applied, what the tests validate against the
upstream CRD schemas and what the plan writes out as YAML.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

import pulumi

_PROVIDER_VERSION = version("pulumi_kubernetes")


class KubernetesObject(pulumi.CustomResource):
    metadata: pulumi.Output[Any]
    spec: pulumi.Output[Any]
    status: pulumi.Output[Any]

    def __init__(self, name: str, body: dict[str, Any], opts: pulumi.ResourceOptions | None = None):
        api_version, kind = body["apiVersion"], body["kind"]
        props: dict[str, Any] = {"metadata": None, "spec": None, **body, "status": None}
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(version=_PROVIDER_VERSION))
        # The provider's type tokens name the core group `core` (`kubernetes:core/v1:Service`).
        group_version = api_version if "/" in api_version else f"core/{api_version}"
        super().__init__(f"kubernetes:{group_version}:{kind}", name, props, opts)
