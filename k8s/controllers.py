"""JobSet, Kueue and LeaderWorkerSet from their pinned OCI Helm charts (registry.k8s.io, or a mirror of it).

`helm.v3.Release` rather than `helm.v4.Chart`: a Release is a plain custom
resource, so a brand-new stack previews while the kubeconfig is still unknown
(v4 Chart is a provider-side component and cannot be constructed then; see
pulumi-kubernetes#3027 and pulumi#16331). Releases also wait for their
Deployments, which is what makes Kueue's webhooks answer before any Kueue
object is created.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes


@dataclass(frozen=True)
class ChartSpec:
    release: str  # also names the Deployment and the webhook Service of each chart
    component: str  # the upstream project, which names the chart's path in the registry
    namespace: str
    deployment: str


JOBSET = ChartSpec("jobset", "jobset", "jobset-system", "jobset-controller")
KUEUE = ChartSpec("kueue", "kueue", "kueue-system", "kueue-controller-manager")
LWS = ChartSpec("lws", "lws", "lws-system", "lws-controller-manager")


def chart_reference(registry: str, spec: ChartSpec) -> str:
    """The chart's OCI reference: registry.k8s.io serves each project's chart at <project>/charts/<project>
    (e.g. oci://registry.k8s.io/kueue/charts/kueue, kueue's install docs), and a remote repository that
    mirrors registry.k8s.io serves the same paths under its own root. `registry` is settings-checked."""
    return f"{registry}/{spec.component}/charts/{spec.component}"


INSTALL_TIMEOUT_SECONDS = 600


@dataclass(frozen=True)
class ControllersArgs:
    provider: kubernetes.Provider
    versions: Mapping[str, str]  # release name -> chart version, for the controllers to install
    chart_registry: str  # oci://<host>[/<path>] the charts are pulled from (settings/oci_registry.py)
    # False: a platform team runs them already (a shared cluster); nothing is installed, and the
    # objects that need them wait for nothing (their APIs and webhooks must already serve).
    install: bool = True


def _release(
    spec: ChartSpec, chart: str, version: str, values: dict[str, Any], opts: pulumi.ResourceOptions
) -> kubernetes.helm.v3.Release:
    return kubernetes.helm.v3.Release(
        spec.release,
        kubernetes.helm.v3.ReleaseArgs(
            name=spec.release,
            chart=chart,
            version=version,
            namespace=spec.namespace,
            create_namespace=True,
            values=values,
            # Wait for the Deployments (and webhooks behind them); roll back a failed install.
            skip_await=False,
            atomic=True,
            cleanup_on_fail=True,
            timeout=INSTALL_TIMEOUT_SECONDS,
        ),
        opts=opts,
    )


CHARTS = {spec.release: spec for spec in (JOBSET, KUEUE, LWS)}
VALUES: dict[str, dict[str, Any]] = {"kueue": {"controllerManager": {"replicas": 2}}}


class Controllers(pulumi.ComponentResource):
    """The batch controllers a backend needs: JobSet and LWS side by side, then Kueue.

    Kueue goes last. Its chart registers fail-closed webhooks for Deployments and Pods in every
    namespace but kube-system and its own (the `mdeployment`/`mpod` webhooks, namespaceSelector
    from its managedJobsNamespaceSelector, charts/kueue at v0.19.2), and they refuse every such
    object until Kueue's pods are Ready behind its webhook Service. Installed beside it, the JobSet
    and LWS charts' Deployments were refused ("no endpoints available for service
    kueue-webhook-service") and their atomic Releases rolled back: the first `up` of every stack
    failed (tests/test_cluster_up_installed.py found it). JobSet's and LWS's webhooks concern only
    their own kinds and their own pods, so they need no order between them. Kueue enables its JobSet
    and LWS integrations by default and finds their APIs already served.
    """

    releases: dict[str, kubernetes.helm.v3.Release]
    # Release name -> version the platform team must run (controllers.install false), else empty.
    required: dict[str, str]

    def __init__(self, name: str, args: ControllersArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpu-slicing:k8s:Controllers", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        wanted = dict(args.versions) if args.install else {}
        self.required = {} if args.install else dict(sorted(args.versions.items()))
        self.releases = {}
        for release in sorted(wanted, key=lambda r: r == KUEUE.release):  # Kueue last
            before = [self.releases[r] for r in self.releases] if release == KUEUE.release else []
            self.releases[release] = _release(
                CHARTS[release],
                chart_reference(args.chart_registry, CHARTS[release]),
                wanted[release],
                VALUES.get(release, {}),
                pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=before)),
            )
        self.register_outputs({"releases": sorted(self.releases), "installed": args.install})

    def ready(self, *names: str) -> list[pulumi.Resource]:
        """What an object that needs these controllers waits for: their releases when the program
        installs them, nothing when they were installed before it."""
        return [self.releases[name] for name in (names or tuple(self.releases)) if name in self.releases]
