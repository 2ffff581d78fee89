"""The contracts components share: what every component that makes Kubernetes objects builds on,
and what one component opens that another selects or reaches: the object base, the common
labels, the ports, pod hardening, NetworkPolicies, await annotations and URLs.

The component packages (infra, k8s, workloads, observability) may use it and never each other,
so a label or a port has one definition that its owner and its readers share
(tests/test_layout.py). It depends on the domain and the settings only.
"""
