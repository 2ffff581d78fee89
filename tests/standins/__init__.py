"""Stand-ins for the plugins the Go module proxy does not serve here.

The real-engine tests run the real `pulumi` CLI and the real Kubernetes provider, built by
`make engine` from pinned Go modules. Three plugins cannot be built on this machine because the
module proxy refuses their modules (403): the Python language host
(`github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3`), the GCP provider
(`github.com/pulumi/pulumi-gcp/provider/...`, a bridged Terraform provider) and the Command provider
(`github.com/pulumi/pulumi-command/provider`). Each stand-in here speaks the real plugin protocol
(the gRPC services of `pulumi.runtime.proto`) to the real engine, is small, and says in its module
docstring what it cannot show. None of them is used by the program itself: they are installed
into a test-only PULUMI_HOME by `tests/engine.py`.

The others stand in for what runs beside GKE's control plane and cannot run here, for the tests
that apply whole stacks to the local control plane (tests/test_cluster_up.py): the auth plugin
(`gke_auth_plugin.py`), what GKE installs and its load-balancer controllers (`gke_addons.py`), the
slice controller's webhook server and admission check (`slice_webhook.py`, `slice_admission.py`,
`slice_topology.py`), and GitHub's raw files for the inference CRDs (`curl.py`). Each polls the
plane on a thread (`poller.py`) or runs as a program on the test PATH.
"""
