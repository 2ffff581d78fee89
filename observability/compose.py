"""What a stack observes, from its settings: the PodMonitorings Managed Prometheus scrapes, the
dashboard and the opt-in alerts (each optional in `observability`).

The backend says what its scrape targets wait for (None: it has none); nothing here knows a
backend's components, only the `serving.backend` name the components key their charts and
selectors by.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_kubernetes as kubernetes

from observability.alerts import Alerts, AlertsArgs
from observability.dashboard import Dashboard, DashboardArgs, TpuHosts
from observability.pod_monitoring import PodMonitorings, PodMonitoringsArgs
from observability.tpu_alerts import TpuHealth
from settings.model import StackConfig


def observe(
    config: StackConfig,
    provider: kubernetes.Provider,
    *,
    monitored_after: list[pulumi.Resource] | None,
    apis_ready: Sequence[pulumi.Resource],
) -> pulumi.Output[str] | None:
    """Registers what `config.observability` asks for; returns the dashboard's URL, if any."""
    observability, serving, names = config.observability, config.serving, config.names
    if observability.pod_monitoring and monitored_after is not None:
        PodMonitorings(
            "pod-monitoring",
            PodMonitoringsArgs(
                provider=provider,
                namespace=serving.namespace,
                backend=serving.backend.value,
                depends_on=monitored_after,
            ),
        )
    url = None
    if observability.dashboard:
        dashboard = Dashboard(
            "dashboard",
            DashboardArgs(
                project=config.project,
                prefix=config.name_prefix,
                backend=serving.backend.value,
                node_pools=config.pool_names(),
                cluster_name=names.cluster,
                namespace=serving.namespace,
                hosts=TpuHosts(config.zone, config.tpu.machine_type) if serving.dynamic_slicing else None,
            ),
            opts=pulumi.ResourceOptions(depends_on=list(apis_ready)),
        )
        url = dashboard.url
    if observability.alerts.enabled:
        Alerts(
            "alerts",
            AlertsArgs(
                project=config.project,
                prefix=config.name_prefix,
                namespace=serving.namespace,
                notification_channels=observability.alerts.notification_channels,
                queue_threshold=observability.alerts.queue_threshold,
                backend=serving.backend.value,
                cluster_name=names.cluster,
                smoke_test=serving.smoke_test.enabled,
                tpu_health=TpuHealth(config.zone, config.tpu.machine_type) if serving.dynamic_slicing else None,
                group_floors={"prefill": serving.prefill.replicas, "decode": serving.decode.replicas},
                forced_deletion=config.kueue.recovery.force_delete_on_unreachable_host,
            ),
            opts=pulumi.ResourceOptions(depends_on=list(apis_ready)),
        )
    return url
