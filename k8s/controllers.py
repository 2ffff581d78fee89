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
import yaml

from settings import rules_recovery
from settings.model import KueueRecoveryConfig


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
    # What the program adds to Kueue's manager Configuration: waitForPodsReady, requeuing and the
    # TAS recovery feature gates (settings/rules_recovery.py kueue_manager_config). Installed with
    # the chart, else required of the platform team's Kueue (docs/deploy.md, "A shared cluster").
    kueue_recovery: Mapping[str, Any] | None = None


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

# Kueue's chart takes its manager Configuration as one YAML string (charts/kueue/values.yaml
# `managerConfig.controllerManagerConfigYaml`, rendered whole by templates/manager/manager-config.yaml:
# no merge), so setting one key means writing all of them. These are the chart's own settings at
# v0.19.2 (tests/test_charts.py proves the rendered Configuration is the chart's default plus
# the recovery keys and nothing else); the chart's webhooks are rendered from `integrations`.
KUEUE_BASE_CONFIGURATION: dict[str, Any] = {
    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
    "kind": "Configuration",
    "health": {"healthProbeBindAddress": ":8081"},
    "metrics": {"bindAddress": ":8443"},
    "webhook": {"port": 9443},
    "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
    "controller": {
        "groupKindConcurrency": {
            "Job.batch": 5,
            "Pod": 5,
            "Workload.kueue.x-k8s.io": 10,
            "LocalQueue.kueue.x-k8s.io": 5,
            "ClusterQueue.kueue.x-k8s.io": 5,
            "ResourceFlavor.kueue.x-k8s.io": 1,
        }
    },
    "clientConnection": {"qps": 300, "burst": 500},
    "integrations": {
        "frameworks": [
            "batch/job",
            "kubeflow.org/mpijob",
            "ray.io/rayjob",
            "ray.io/rayservice",
            "ray.io/raycluster",
            "jobset.x-k8s.io/jobset",
            "workload.codeflare.dev/appwrapper",
            "trainer.kubeflow.org/trainjob",
            "pod",
            "deployment",
            "statefulset",
            "leaderworkerset.x-k8s.io/leaderworkerset",
        ]
    },
}


def kueue_configuration(recovery: Mapping[str, Any]) -> dict[str, Any]:
    """The manager Configuration the program installs: the chart's, with the recovery keys."""
    return {**KUEUE_BASE_CONFIGURATION, **recovery}


def chart_values(release: str, kueue_recovery: Mapping[str, Any] | None) -> dict[str, Any]:
    """The values a release is installed with: Kueue's carry its whole Configuration ."""
    values = dict(BASE_VALUES.get(release, {}))
    if release == KUEUE.release and kueue_recovery is not None:
        # Block YAML, one key a line, so a plan diff shows the setting that changed.
        configuration = yaml.safe_dump(kueue_configuration(kueue_recovery), sort_keys=True)
        values["managerConfig"] = {"controllerManagerConfigYaml": configuration}
    return values


BASE_VALUES: dict[str, dict[str, Any]] = {"kueue": {"controllerManager": {"replicas": 2}}}
# What a stack with the default settings installs (the local planes render the charts with these).
VALUES: dict[str, dict[str, Any]] = {
    release: chart_values(release, rules_recovery.kueue_manager_config(KueueRecoveryConfig.model_validate({})))
    for release in BASE_VALUES
}


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
                chart_values(release, args.kueue_recovery),
                pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=before)),
            )
        self.register_outputs(
            {
                "releases": sorted(self.releases),
                "installed": args.install,
                # In the stack's state either way: installed, or what a shared cluster's Kueue must run with.
                "kueueRecovery": dict(args.kueue_recovery or {}) if KUEUE.release in args.versions else {},
            }
        )

    def ready(self, *names: str) -> list[pulumi.Resource]:
        """What an object that needs these controllers waits for: their releases when the program
        installs them, nothing when they were installed before it."""
        return [self.releases[name] for name in (names or tuple(self.releases)) if name in self.releases]
