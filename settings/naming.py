"""Every Google Cloud and cluster-scoped Kubernetes name, derived from `namePrefix`.

Names live here, next to their length limits, so the configuration check can
prove that a prefix keeps every derived name legal before anything is created,
and so two stacks with different prefixes never collide in one project/region.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from settings.storage_names import BENCHMARK_PREFIX

# Google Cloud limits (resource naming docs): most compute names 63, GKE
# cluster and node-pool names 40 (google-beta resource_container_node_pool.go, name_prefix:
# "name is limited to 40"), service account ids 30.
COMPUTE_LIMIT = 63
GKE_LIMIT = 40
POOL_HASH_CHARACTERS = 6  # of a long key's sha256: what keeps two shortened pool names apart
SERVICE_ACCOUNT_LIMIT = 30
# Kubernetes: a workload names its priority class in the label kueue.x-k8s.io/priority-class, and a label
# value is at most 63 characters (k8s.io/apimachinery validation IsValidLabelValue); the other cluster-scoped
# Kueue names are kept to the same 63, an RFC 1123 label (DNS1123LabelMaxLength). Every derived name is
# measured whole, prefix and suffix included.
K8S_NAME_LIMIT = 63


@dataclass(frozen=True)
class Names:
    prefix: str

    @property
    def network(self) -> str:
        return f"{self.prefix}-net"

    @property
    def node_subnet(self) -> str:
        return f"{self.prefix}-nodes"

    @property
    def proxy_subnet(self) -> str:
        return f"{self.prefix}-proxy"

    @property
    def pod_range(self) -> str:
        return f"{self.prefix}-pods"

    @property
    def service_range(self) -> str:
        return f"{self.prefix}-services"

    @property
    def firewall(self) -> str:
        return f"{self.prefix}-allow-internal"

    @property
    def cluster(self) -> str:
        return f"{self.prefix}-gke"

    @property
    def system_pool(self) -> str:
        return f"{self.prefix}-system"

    @property
    def node_service_account(self) -> str:
        return f"{self.prefix}-gke-nodes"

    @property
    def workload_policy(self) -> str:
        return f"{self.prefix}-cube-policy"

    @property
    def sax_account(self) -> str:
        return f"{self.prefix}-sax"

    def sax_bucket(self, project: str) -> str:
        # Bucket names are global: the project id keeps them unique across projects.
        return f"{project}-{self.prefix}-sax"

    def tpu_pool(self, key: str | int) -> str:
        """A TPU pool's name, from what it binds: its sub-block (``dev-tpu-sub-block-1``), or its
        position when pools share a block or run on demand (``dev-tpu-2``). GKE's pool name is
        ForceNew (resource_container_node_pool.go), so a name tied to a list position would rebind
        and replace a healthy cube when an earlier sub-block is retired.

        Sub-block names are Google's and may be long: a name over GKE's 40 characters keeps the
        key's start and ends in a hash of the whole key (``dev-tpu-<start>-1a2b3c``), stable for
        the key; a name that fits is left as it is, so no live pool is renamed (replaced)."""
        name = f"{self.prefix}-tpu-{key}"
        if len(name) <= GKE_LIMIT:
            return name
        digest = hashlib.sha256(str(key).encode()).hexdigest()[:POOL_HASH_CHARACTERS]
        room = GKE_LIMIT - len(f"{self.prefix}-tpu-") - 1 - POOL_HASH_CHARACTERS
        start = str(key)[: max(room, 0)].rstrip("-")
        return f"{self.prefix}-tpu-{start}-{digest}" if start else f"{self.prefix}-tpu-{digest}"

    def tpu_pool_shortened(self, key: str | int) -> bool:
        """The pool's name does not hold its whole key (a label then carries it)."""
        return self.tpu_pool(key) != f"{self.prefix}-tpu-{key}"

    # Cluster-scoped Kueue objects: several stacks may share one cluster's API
    # in future, and distinct names make kubectl output self-explaining.
    @property
    def kueue_topology(self) -> str:
        return f"{self.prefix}-slice-topology"

    @property
    def resource_flavor(self) -> str:
        return f"{self.prefix}-tpu7x"

    @property
    def admission_check(self) -> str:
        return f"{self.prefix}-slice"

    @property
    def cluster_queue(self) -> str:
        return f"{self.prefix}-tpu"

    def priority_class(self, level: str) -> str:
        # By level, not value: Kueue's LWS webhook copies the class name into both pod templates
        # (pkg/controller/jobs/leaderworkerset/leaderworkerset_webhook.go:114 at v0.19.2), so a
        # new name restarted every serving group; a new value is an in-place update, which Kueue's
        # WorkloadPriorityClass reconciler carries to every Workload of the class
        # (pkg/controller/core/workloadpriorityclass_controller.go:94-116).
        return f"{self.prefix}-{level}"

    # Kubernetes service accounts that hold Google Cloud grants. A Workload Identity principal names
    # the project's pool, the namespace and the account, not the cluster (GKE "About Workload
    # Identity Federation for GKE", identity sameness), so two stacks of one project whose accounts
    # shared a name and namespace were one principal: each read the other's buckets, and a destroy
    # of one removed the IAM member the other served with. The prefix keeps them apart.
    @property
    def model_server_account(self) -> str:
        return f"{self.prefix}-vllm-model-server"

    @property
    def benchmark_account(self) -> str:
        return f"{self.prefix}-serving-benchmark"

    @property
    def jetstream_account(self) -> str:
        return f"{self.prefix}-jetstream"

    @property
    def sax_cell_account(self) -> str:
        return f"{self.prefix}-sax-sa"

    @property
    def sax_http_account(self) -> str:
        return f"{self.prefix}-sax-http"

    @property
    def benchmark_prefix(self) -> str:
        """Where the stack's serving benchmark writes in the weights bucket, the only prefix its
        identity may write in: two stacks that serve from one bucket keep their reports apart."""
        return f"{BENCHMARK_PREFIX}{self.prefix}/"

    def limits(self, pool_keys: Sequence[str]) -> list[tuple[str, str, int]]:
        """(what, name, limit) for every derived name, with the longest variants."""
        longest_pool = max((self.tpu_pool(key) for key in pool_keys or ["1"]), key=len)
        return [
            ("network", self.network, COMPUTE_LIMIT),
            ("node subnet", self.node_subnet, COMPUTE_LIMIT),
            ("proxy subnet", self.proxy_subnet, COMPUTE_LIMIT),
            ("pod range", self.pod_range, COMPUTE_LIMIT),
            ("service range", self.service_range, COMPUTE_LIMIT),
            ("firewall", self.firewall, COMPUTE_LIMIT),
            ("workload policy", self.workload_policy, COMPUTE_LIMIT),
            ("cluster", self.cluster, GKE_LIMIT),
            ("system node pool", self.system_pool, GKE_LIMIT),
            ("TPU node pool", longest_pool, GKE_LIMIT),
            ("node service account", self.node_service_account, SERVICE_ACCOUNT_LIMIT),
            ("Saxml service account", self.sax_account, SERVICE_ACCOUNT_LIMIT),
            ("Kueue topology", self.kueue_topology, K8S_NAME_LIMIT),
            ("Kueue resource flavor", self.resource_flavor, K8S_NAME_LIMIT),
            ("Kueue admission check", self.admission_check, K8S_NAME_LIMIT),
            ("Kueue cluster queue", self.cluster_queue, K8S_NAME_LIMIT),
            ("priority class", self.priority_class("medium"), K8S_NAME_LIMIT),
            ("model server service account", self.model_server_account, K8S_NAME_LIMIT),
            ("benchmark service account", self.benchmark_account, K8S_NAME_LIMIT),
            ("JetStream service account", self.jetstream_account, K8S_NAME_LIMIT),
            ("Saxml cell service account", self.sax_cell_account, K8S_NAME_LIMIT),
            ("sax-http service account", self.sax_http_account, K8S_NAME_LIMIT),
        ]

    def gcp_names(self, pool_keys: Sequence[str]) -> list[str]:
        """Names that must be unique per project (and region) across stacks."""
        return [name for what, name, limit in self.limits(pool_keys) if limit != K8S_NAME_LIMIT]
