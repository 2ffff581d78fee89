"""The regional GKE cluster with the TPU slice controller, its system pool and a kubeconfig."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import pulumi
import pulumi_gcp as gcp
import yaml

from domain import gke_versions
from settings.model import MaintenanceExclusion, Platform
from settings.naming import Names

# GKE's minimal role for node service accounts: logging, monitoring and autoscaling metrics. It grants
# no image pulls from private Artifact Registry repositories (GKE "Configure GKE node service accounts"
# adds roles/artifactregistry.reader for those); every image the stacks pin is public.
NODE_ROLE = "roles/container.defaultNodeServiceAccount"
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
# Container-Optimized OS with containerd: what GKE's TPU and dynamic-slicing docs run on, pinned
# so a change of GKE's default image type never reaches the pools unannounced.
IMAGE_TYPE = "COS_CONTAINERD"


@dataclass(frozen=True)
class ClusterArgs:
    project: str
    region: str
    names: Names
    network: pulumi.Input[str]
    subnetwork: pulumi.Input[str]
    version: str | None  # an exact pin; None: chosen from what the channel offers
    platform: Platform
    system_machine_type: str
    system_nodes_per_zone: int
    deletion_protection: bool
    maintenance_window_start: str
    protect: bool = True  # Pulumi protect on the cluster and its pools (settings: cluster.protect)
    maintenance_exclusion: MaintenanceExclusion | None = None
    depends_on: Sequence[pulumi.Resource] = ()


def kubeconfig(name: str, endpoint: str, ca_certificate: str) -> str:
    """A kubeconfig that authenticates with gke-gcloud-auth-plugin, so it holds no token."""
    context = name
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": context,
                    "cluster": {"server": f"https://{endpoint}", "certificate-authority-data": ca_certificate},
                }
            ],
            "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
            "current-context": context,
            "users": [
                {
                    "name": context,
                    "user": {
                        "exec": {
                            "apiVersion": "client.authentication.k8s.io/v1beta1",
                            "command": "gke-gcloud-auth-plugin",
                            "provideClusterInfo": True,
                            "interactiveMode": "Never",
                            "installHint": "Install gke-gcloud-auth-plugin: "
                            "gcloud components install gke-gcloud-auth-plugin",
                        }
                    },
                }
            ],
        },
        sort_keys=False,
    )


def _in_force(exclusion: MaintenanceExclusion | None, now: datetime) -> MaintenanceExclusion | None:
    """The exclusion, or None once its end has passed: GKE refuses an exclusion that is over, so
    keeping it would fail every update after the stack's own window ends. Left out, the next `up`
    drops it from the cluster's policy in place, and node upgrades run at GKE's cadence again."""
    if exclusion is None or not exclusion.over(now):
        return exclusion
    assert exclusion.end is not None
    pulumi.log.warn(
        f"cluster.maintenanceExclusion {exclusion.name} ended {_rfc3339(exclusion.end)}: left out of the cluster's "
        "maintenance policy, so GKE upgrades the cluster and its TPU nodes at its cadence again; set a new window "
        "(an end in the future, or untilEndOfSupport: true) or remove it from the stack file"
    )
    return None


def _rfc3339(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _maintenance_policy(args: ClusterArgs) -> gcp.container.ClusterMaintenancePolicyArgs:
    exclusions = []
    exclusion = _in_force(args.maintenance_exclusion, datetime.now(UTC))
    if exclusion is not None:
        exclusions.append(
            gcp.container.ClusterMaintenancePolicyMaintenanceExclusionArgs(
                exclusion_name=exclusion.name,
                start_time=_rfc3339(exclusion.start),
                end_time=_rfc3339(exclusion.end) if exclusion.end else None,
                exclusion_options=gcp.container.ClusterMaintenancePolicyMaintenanceExclusionExclusionOptionsArgs(
                    scope=exclusion.scope.value,
                    end_time_behavior="UNTIL_END_OF_SUPPORT" if exclusion.until_end_of_support else None,
                ),
            )
        )
    return gcp.container.ClusterMaintenancePolicyArgs(
        # The provider needs a window whenever a policy block is present.
        daily_maintenance_window=gcp.container.ClusterMaintenancePolicyDailyMaintenanceWindowArgs(
            start_time=args.maintenance_window_start,
        ),
        maintenance_exclusions=exclusions or None,
    )


class VersionChoice:
    """The version a new cluster asks for, read at plan time once the Kubernetes Engine API is on.

    The read waits for the project's APIs (`depends_on`): GetServerConfig fails while
    container.googleapis.com is disabled (google-beta/services/container/
    data_source_google_container_engine_versions.go), so on a bare project the first preview
    would fail before anything exists. When the channel offers nothing that fits, the stack still
    previews (an existing cluster ignores the choice); `refuse_create` stops a new one.
    """

    def __init__(self, args: ClusterArgs):
        self.args = args
        self.choice: gke_versions.Choice | None = None

    def version(self) -> pulumi.Input[str]:
        args = self.args
        platform = args.platform
        # A pinned version is read against the location's whole list (no prefix); the settings
        # already hold a pin to the prefix (settings/rules_cluster.py).
        offered = gcp.container.get_engine_versions_output(
            project=args.project,
            location=args.region,
            version_prefix=None if args.version is not None else platform.version_prefix,
            opts=pulumi.InvokeOutputOptions(depends_on=list(args.depends_on)),
        )
        if args.version is not None:
            return offered.apply(self._pinned)
        return offered.apply(self._choose)

    def _pinned(self, found: gcp.container.GetEngineVersionsResult) -> str:
        assert self.args.version is not None
        self.choice = choice = gke_versions.check_pinned(
            _offered(found), self.args.platform.release_channel, self.args.version, self.args.region
        )
        if choice.problem is not None:
            pulumi.log.warn(f"{choice.problem}; an existing cluster keeps its version, a new one is refused")
        return choice.version

    def _choose(self, found: gcp.container.GetEngineVersionsResult) -> str:
        platform = self.args.platform
        self.choice = choice = gke_versions.choose(
            _offered(found),
            platform.release_channel,
            platform.version_prefix,
            platform.version_floor,
        )
        if choice.problem is not None:
            pulumi.log.warn(f"{choice.problem}; an existing cluster keeps its version, a new one is refused")
        return choice.version

    def refuse_create(self, hook: pulumi.ResourceHookArgs) -> None:
        if self.choice is not None and self.choice.problem is not None:
            raise gke_versions.NoOfferedVersionError(f"cluster {self.args.names.cluster}: {self.choice.problem}")


def _offered(found: gcp.container.GetEngineVersionsResult) -> gke_versions.OfferedVersions:
    return gke_versions.OfferedVersions(
        valid_master_versions=found.valid_master_versions or [],
        release_channel_latest_version=found.release_channel_latest_version or {},
        release_channel_default_version=found.release_channel_default_version or {},
    )


class Cluster(pulumi.ComponentResource):
    cluster: gcp.container.Cluster
    system_pool: gcp.container.NodePool
    node_account: gcp.serviceaccount.Account
    node_role: gcp.projects.IAMMember
    kubeconfig: pulumi.Output[str]

    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpu-slicing:infra:Cluster", name, None, opts)
        names = args.names
        child = pulumi.ResourceOptions(parent=self)
        versions = VersionChoice(args)
        self.node_account = gcp.serviceaccount.Account(
            "node-account",
            gcp.serviceaccount.AccountArgs(
                account_id=names.node_service_account,
                project=args.project,
                display_name=f"GKE nodes of {names.cluster}",
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        self.node_role = node_role = gcp.projects.IAMMember(
            "node-account-role",
            gcp.projects.IAMMemberArgs(project=args.project, role=NODE_ROLE, member=self.node_account.member),
            opts=child,
        )
        self.cluster = gcp.container.Cluster(
            "cluster",
            gcp.container.ClusterArgs(
                name=names.cluster,
                project=args.project,
                location=args.region,
                network=args.network,
                subnetwork=args.subnetwork,
                # The default pool is replaced by the system pool below, which
                # can be sized, labelled and changed without recreating the cluster.
                remove_default_node_pool=True,
                initial_node_count=1,
                # GKE still creates the default pool first (and deletes it); without this it would
                # run, however briefly, as the Compute Engine default service account.
                node_config=gcp.container.ClusterNodeConfigArgs(
                    service_account=self.node_account.email, oauth_scopes=[CLOUD_PLATFORM_SCOPE]
                ),
                release_channel=gcp.container.ClusterReleaseChannelArgs(channel=args.platform.release_channel),
                min_master_version=versions.version(),
                gateway_api_config=gcp.container.ClusterGatewayApiConfigArgs(channel="CHANNEL_STANDARD"),
                monitoring_config=gcp.container.ClusterMonitoringConfigArgs(
                    enable_components=["SYSTEM_COMPONENTS"],
                    managed_prometheus=gcp.container.ClusterMonitoringConfigManagedPrometheusArgs(enabled=True),
                    advanced_datapath_observability_config=(
                        gcp.container.ClusterMonitoringConfigAdvancedDatapathObservabilityConfigArgs(
                            enable_metrics=True, enable_relay=False
                        )
                    ),
                ),
                datapath_provider="ADVANCED_DATAPATH",
                workload_identity_config=gcp.container.ClusterWorkloadIdentityConfigArgs(
                    workload_pool=f"{args.project}.svc.id.goog",
                ),
                ip_allocation_policy=gcp.container.ClusterIpAllocationPolicyArgs(
                    cluster_secondary_range_name=names.pod_range,
                    services_secondary_range_name=names.service_range,
                ),
                addons_config=gcp.container.ClusterAddonsConfigArgs(
                    http_load_balancing=gcp.container.ClusterAddonsConfigHttpLoadBalancingArgs(disabled=False),
                    horizontal_pod_autoscaling=gcp.container.ClusterAddonsConfigHorizontalPodAutoscalingArgs(
                        disabled=False
                    ),
                    gcp_filestore_csi_driver_config=gcp.container.ClusterAddonsConfigGcpFilestoreCsiDriverConfigArgs(
                        enabled=True
                    ),
                    gcs_fuse_csi_driver_config=gcp.container.ClusterAddonsConfigGcsFuseCsiDriverConfigArgs(
                        enabled=True
                    ),
                    dns_cache_config=gcp.container.ClusterAddonsConfigDnsCacheConfigArgs(enabled=True),
                    slice_controller_config=(
                        gcp.container.ClusterAddonsConfigSliceControllerConfigArgs(enabled=True)
                        if args.platform.slice_controller
                        else None
                    ),
                ),
                deletion_protection=args.deletion_protection,
                maintenance_policy=_maintenance_policy(args),
            ),
            # A version chosen from the channel is kept in state: a later preview, when the channel
            # offers something newer, changes nothing (the channel upgrades the control plane
            # itself). An explicit pin is tracked, so editing it is an update.
            # nodeConfig only shapes the default pool at creation and is ForceNew (google-beta
            # node_config.go schemaNodeConfig): a cluster created before it was set is kept, not replaced.
            opts=pulumi.ResourceOptions(
                parent=self,
                protect=args.protect,
                depends_on=[node_role],
                ignore_changes=["nodeConfig", *([] if args.version else ["minMasterVersion"])],
                # Runs only when the cluster is to be created, in preview too.
                hooks=pulumi.ResourceHookBinding(
                    before_create=[
                        pulumi.ResourceHook(
                            "refuse-unoffered-gke-version",
                            versions.refuse_create,
                            pulumi.ResourceHookOptions(on_dry_run=True),
                        )
                    ]
                ),
            ),
        )
        self.system_pool = gcp.container.NodePool(
            "system-pool",
            gcp.container.NodePoolArgs(
                name=names.system_pool,
                project=args.project,
                cluster=self.cluster.id,
                location=args.region,
                node_count=args.system_nodes_per_zone,
                management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
                node_config=gcp.container.NodePoolNodeConfigArgs(
                    machine_type=args.system_machine_type,
                    image_type=IMAGE_TYPE,
                    service_account=self.node_account.email,
                    oauth_scopes=[CLOUD_PLATFORM_SCOPE],
                    workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(
                        mode="GKE_METADATA"
                    ),
                    shielded_instance_config=gcp.container.NodePoolNodeConfigShieldedInstanceConfigArgs(
                        enable_secure_boot=True, enable_integrity_monitoring=True
                    ),
                    labels={"tpu-slicing/role": "system"},
                ),
            ),
            # A fixed, ForceNew name: a replacement goes after its predecessor (409 otherwise).
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[node_role], protect=args.protect, delete_before_replace=True
            ),
        )
        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(
                self.cluster.name, self.cluster.endpoint, self.cluster.master_auth.cluster_ca_certificate
            ).apply(lambda parts: kubeconfig(str(parts[0]), str(parts[1]), str(parts[2])))
        )
        self.register_outputs(
            {
                "name": self.cluster.name,
                "location": self.cluster.location,
                "endpoint": self.cluster.endpoint,
                "kubeconfig": self.kubeconfig,
            }
        )
