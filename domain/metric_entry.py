"""What one catalog entry says of a metric: its kind, unit, source and labels, and the name PromQL reads it by.

The entries themselves are in domain/metric_gcp.py and domain/metric_prometheus.py; domain/metric_catalog.py
collects them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["prometheus", "gcp"]
Instrument = Literal["gauge", "counter", "histogram"]
Confidence = Literal["high", "medium"]

# PromQL's special label for the resource type of a `gcp` metric (PROMQL_MAPPING, domain/metric_gcp.py), and a
# histogram's bucket bound.
MONITORED_RESOURCE = "monitored_resource"
BUCKET_LABEL = "le"


@dataclass(frozen=True)
class Metric:
    name: str  # the Prometheus metric name, or the Cloud Monitoring metric type
    kind: Kind
    unit: str
    description: str
    source: str
    instrument: Instrument = "gauge"
    confidence: Confidence = "high"
    caveat: str = ""  # what has to hold for the series to exist
    labels: tuple[str, ...] | None = None  # the metric's labels as its source publishes them; None: not looked up
    resource_labels: tuple[str, ...] = ()  # the monitored resource's (gcp) or scrape target's (prometheus) labels

    @property
    def query_labels(self) -> frozenset[str] | None:
        """Every label a PromQL matcher or grouping may name on this metric; None when its labels are not listed."""
        if self.labels is None:
            return None
        special = (MONITORED_RESOURCE,) if self.kind == "gcp" else ()
        return frozenset((*self.labels, *self.resource_labels, *special))

    @property
    def promql_name(self) -> str:
        """The name PromQL knows this metric by (Cloud Monitoring's mapping rule for `gcp` metrics)."""
        if self.kind == "prometheus":
            return self.name
        domain, _, path = self.name.partition("/")
        return re.sub(r"[^a-zA-Z0-9_]", "_", domain) + ":" + re.sub(r"[^a-zA-Z0-9_]", "_", path)
