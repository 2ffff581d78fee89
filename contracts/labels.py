"""Labels that one component puts on its pods and another selects them by (no Pulumi).

The owner sets them (workloads/vllm_pd.py, workloads/jetstream.py) and the readers select with
them (the PodMonitorings of observability/, the NetworkPolicies, the router's InferencePool), so
they live here rather than in the owner: a reader never imports another component's module.
"""

from __future__ import annotations

# Labels every object this program creates carries, so `kubectl get -l` finds them.
COMMON_LABELS = {"app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/part-of": "tpu-slicing"}

# llm-d's labels on the vLLM model-server pods (the pd-disaggregation guide).
GUIDE_LABEL = "llm-d.ai/guide"
ROLE_LABEL = "llm-d.ai/role"
# Only on leader pods: the InferencePool must not select workers, which serve no HTTP.
SERVING_LABEL = "llm-d.ai/inference-serving"

# The recommended app labels, as the JetStream pods carry them.
NAME_LABEL = "app.kubernetes.io/name"
COMPONENT_LABEL = "app.kubernetes.io/component"
JETSTREAM_APP = "jetstream"
# Pods that answer on 8000/9000: the Deployment's pods or the LWS leaders. Pathways workers get
# another component, so neither the Service nor the scrape selects them.
JETSTREAM_SERVER_COMPONENT = "server"
JETSTREAM_SERVER_LABELS = {NAME_LABEL: JETSTREAM_APP, COMPONENT_LABEL: JETSTREAM_SERVER_COMPONENT}
