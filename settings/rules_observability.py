"""What watches the stack: the alert policies and whom they tell.

Guards `observability.alerts` (notification channels in the Cloud Monitoring form, at least one when
alerts are on, and `podMonitoring` on, since the alert policies read the model servers' scraped metrics).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from settings.names import NameRule
from settings.refused import RefusedClass

if TYPE_CHECKING:
    from settings.model import StackConfig


# Cloud Monitoring's resource name of a channel, `projects/[PROJECT_ID_OR_NUMBER]/notificationChannels/
# [CHANNEL_ID]` (Cloud Monitoring API v3, NotificationChannel.name): the project by its id (6 to 30
# characters) or by its number.
NOTIFICATION_CHANNEL = NameRule(
    r"projects/([a-z][-a-z0-9]{4,28}[a-z0-9]|[1-9][0-9]{0,19})/notificationChannels/[0-9]+",
    "projects/<project id or number>/notificationChannels/<id>",
)


def notification_channels(value: list[str]) -> list[str]:
    for channel in value:
        if not NOTIFICATION_CHANNEL.matches(channel):
            raise ValueError(f"{channel!r} is not a notification channel: {NOTIFICATION_CHANNEL.allowed}")
    return value


def check_alerts(config: StackConfig) -> None:
    observability = config.observability
    if not observability.alerts.enabled:
        return
    if config.serving.backend.value == "saxml":
        # observability/alerts.py alert_specs: Saxml's servers document no Prometheus endpoint
        # (domain/metric_catalog.py NOT_SCRAPED) and its slices are not dynamic slicing, so no policy
        # is made: alerts on would create nothing and tell no one.
        raise ValueError(
            "observability.alerts.enabled makes no alert policy with serving.backend 'saxml': Saxml's servers "
            "export no Prometheus metrics and its slices have no partition health to watch, so it would be "
            "ignored without a word; allowed: alerts.enabled false (the TPU system metrics on the dashboard "
            "still cover its slices)"
        )
    if not observability.alerts.notification_channels:
        raise ValueError(
            "observability.alerts.notificationChannels is empty: the alert policies would open incidents no "
            "one is told of; allowed: at least one projects/<project>/notificationChannels/<id>, or "
            "alerts.enabled false"
        )
    if not observability.pod_monitoring:
        raise ValueError(
            "observability.alerts needs observability.podMonitoring: its metric policies read the model servers' "
            "/metrics, which nothing would scrape, so they could never fire; allowed: podMonitoring true, "
            "or alerts.enabled false"
        )


REFUSED: tuple[RefusedClass, ...] = (
    RefusedClass(
        "alerts on a backend that exports nothing they could watch",
        check_alerts,
        {
            "observability": {
                "alerts": {
                    "enabled": True,
                    "notificationChannels": ["projects/example-tpu-project/notificationChannels/1"],
                }
            }
        },
        "observability.alerts.enabled",
        "alerts.enabled false",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "alerts that tell no one",
        check_alerts,
        {"observability": {"alerts": {"enabled": True}}},
        "observability.alerts.notificationChannels",
        "at least one projects/<project>/notificationChannels/<id>",
    ),
    RefusedClass(
        "alerts on metrics nothing scrapes",
        check_alerts,
        {
            "observability": {
                "podMonitoring": False,
                "alerts": {
                    "enabled": True,
                    "notificationChannels": ["projects/example-tpu-project/notificationChannels/1"],
                },
            }
        },
        "observability.alerts",
        "podMonitoring true",
    ),
)
