"""Observability: the PodMonitorings Managed Prometheus scrapes, the Cloud Monitoring dashboard
and the alert policies, each reading only metrics the catalog (domain/metric_catalog.py) lists."""
