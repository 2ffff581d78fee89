"""What every alert policy is made of (no Pulumi): a PromQL or log-match condition, the policy as keyword
arguments of `gcp.monitoring.AlertPolicy`, and the selector of a GKE system metric.

observability/alerts.py (the serving policies and `alert_specs`) and observability/tpu_alerts.py (the TPU7x
hardware policies) build their policies from these.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

EVALUATION_INTERVAL = "60s"
AUTO_CLOSE = "1800s"
LOG_RATE_LIMIT = "300s"


def k8s_selector(resource: str, cluster_name: str | None, *matchers: str) -> str:
    """A GKE system metric's selector: its monitored resource, the stack's cluster, then `matchers`."""
    parts = [f'monitored_resource="{resource}"']
    if cluster_name:
        parts.append(f'cluster_name="{cluster_name}"')
    return "{" + ",".join([*parts, *matchers]) + "}"


def promql_condition(title: str, query: str, duration: str, severity: str) -> dict[str, Any]:
    return {
        "display_name": title,
        "condition_prometheus_query_language": {
            "query": query,
            "duration": duration,
            "evaluation_interval": EVALUATION_INTERVAL,
            "labels": {"severity": severity.lower()},
            # Policies are created with the stack, before the first scrape has written the metrics.
            "disable_metric_validation": True,
        },
    }


@dataclass(frozen=True)
class Policy:
    """One alert policy before it becomes `gcp.monitoring.AlertPolicy` keyword arguments."""

    name: str  # the Pulumi resource name
    title: str
    condition: dict[str, Any]
    severity: str  # CRITICAL | ERROR | WARNING
    runbook: str  # Markdown shown in the incident
    alert_strategy: dict[str, Any] | None = None

    def spec(self, prefix: str, channels: Sequence[str]) -> dict[str, Any]:
        return {
            "name": self.name,
            "policy": {
                "display_name": f"{prefix}: {self.title}",
                "combiner": "OR",
                "conditions": [self.condition],
                "notification_channels": list(channels),
                "severity": self.severity,
                "documentation": {"content": self.runbook, "mime_type": "text/markdown"},
                "alert_strategy": self.alert_strategy or {"auto_close": AUTO_CLOSE},
                "user_labels": {"stack": prefix, "component": "tpu-serving"},
            },
        }


def log_policy(name: str, title: str, *, condition: str, log_filter: str, severity: str, runbook: str) -> Policy:
    return Policy(
        name,
        title,
        {"display_name": condition, "condition_matched_log": {"filter": log_filter}},
        severity,
        runbook,
        # Log-match conditions require a notification rate limit.
        {"notification_rate_limit": {"period": LOG_RATE_LIMIT}, "auto_close": AUTO_CLOSE},
    )
