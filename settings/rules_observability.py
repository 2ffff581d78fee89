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
