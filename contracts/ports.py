"""Ports that one component opens and another targets, scrapes or admits (no Pulumi).

A port a single component uses alone stays in that component; the ones here are read by
another package too (the router, the PodMonitorings), so both sides take the same number.
"""

from __future__ import annotations

# vLLM (workloads/vllm_command.py), from the reference: prefill vLLM serves the pool port
# itself; decode vLLM sits behind the routing sidecar, which owns the pool port.
POOL_PORT = 8000
DECODE_VLLM_PORT = 8200

# llm-d's endpoint picker (k8s/router.py): its Prometheus metrics.
EPP_METRICS_PORT = 9090

# JetStream's engine (workloads/jetstream.py): MaxText's `prometheus_port`.
JETSTREAM_PROMETHEUS_PORT = 9100
