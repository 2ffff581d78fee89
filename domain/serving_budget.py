"""How long a disaggregated vLLM deployment, or a JetStream (MaxText) one, may take to come up,
from one set of figures.

Each wait the stack sets is either an upstream program's own timeout or the sum of the waits it
must outlast, so no deadline can end before the work it watches:

- a leader's startup probe outlasts its own script: the Ray head waits for the group's workers,
  then the API server waits for the engine core;
- the smoke test outlasts Kueue's admission, the slice's activation, the image pull and a leader's
  startup; `pulumi up` outlasts the smoke test;
- JetStream's smoke test outlasts the image pull and its server's startup probe, which outlasts the
  MaxText engine's model load (no Kueue, no slice activation: its slices are fixed node pools that
  exist before its pods);
- Saxml's publish Job outlasts its model servers' image pull and start (it starts when their JobSet
  exists and waits until every replica is active);
- a slice check's JAX rendezvous outlasts a peer that pulls its image late, and its own deadline
  outlasts the rendezvous and the checks.

Plain Python: the settings refuse a smoke deadline below `smoke_deadline_min_seconds` and a publish
deadline below `saxml_publish_min_seconds` (settings/rules_serving.py, settings/rules_waits.py), the
workloads write the figures into the objects, and a test reads them back from those objects.
"""

from __future__ import annotations

from dataclasses import dataclass

# vLLM's multi-node-serving.sh takes --ray_init_timeout for both the head and the workers
# (vllm v0.26.0 examples/online_serving/multi-node-serving.sh): how long the head waits for the
# group's workers to join. Half an hour covers a worker pod scheduled, pulled and started late.
RAY_INIT_TIMEOUT_SECONDS = 1800

# How long vLLM's API server waits for the engine core's ready message (vllm v0.26.0 vllm/envs.py,
# VLLM_ENGINE_READY_TIMEOUT_S, default 600). tpu-inference's own multi-host runs of this model
# family set 10800 (tpu-inference v0.26.0 scripts/multihost/nightly_benchmarking.sh) and wait up
# to 180 minutes for the server (.buildkite/benchmark/cases/daily/Qwen3.5_397B_prefill.json,
# SERVER_WAIT_MINS): loading ~370 GiB from GCS and the first compiles take that long.
ENGINE_READY_TIMEOUT_SECONDS = 10800

# The slice controller gives a slice this long to become active before it fails the admission
# check: k8s/slice_controller.py passes it as `--activation-timeout`, the controller's own flag,
# at the value GKE's dynamic-slicing guide gives (../shared/reference/dynamic-slicing.md).
SLICE_ACTIVATION_TIMEOUT_SECONDS = 3600

# How long JetStream's MaxText engine may take to restore its checkpoint from GCS, compile and warm
# up before jetstream-http's /healthcheck answers: the engine figure above. GKE's JetStream + Pathways
# tutorial gives Llama 3.1 405B (int8, v6e 4x4) a startup probe of 600 s delay + 10000 x 1 s
# (GoogleCloudPlatform/kubernetes-engine-samples ai-ml/llm-serving-tpus-jetstream/pathways/
# jetstream-pathways-llama-3-1-405b-4x4.yaml, 06e7ed12) and says the restore alone "might take about
# 10 to 20 minutes" (docs.cloud.google.com/kubernetes-engine/docs/tutorials/serve-multihost-tpu-jetstream):
# 10600 s, which the engine figure covers for a model of that size or less.
JETSTREAM_LOAD_SECONDS = ENGINE_READY_TIMEOUT_SECONDS

# Slack on top of a sum of timeouts: the probe's own period, process start, the image pull of a
# multi-GiB vLLM image on a new node, Kueue's admission pass.
STARTUP_MARGIN_SECONDS = 600
ADMISSION_AND_PULL_SECONDS = 1800

# jax.distributed.initialize's own rendezvous wait when none is given (jax/_src/distributed.py,
# `initialization_timeout: int = 300`): process 0 and every peer wait this long for all the others.
# The 32 pods of a super-slice check are admitted together (one Kueue workload), but each pulls
# the multi-GiB JAX image on its own host, so they start up to one pull apart: the check's wait is
# the pull figure above, not JAX's five minutes, and a late host is not reported as a broken slice.
JAX_INIT_TIMEOUT_DEFAULT_SECONDS = 300
# What the checks themselves take once joined (device counts, a psum, five timed all-reduces of
# 64 MiB per device; pods/slice_check.py): minutes on any slice, so ten are slack, not a forecast.
SLICE_CHECK_RUN_SECONDS = 600


@dataclass(frozen=True)
class ServingBudget:
    ray_init_seconds: int = RAY_INIT_TIMEOUT_SECONDS
    engine_ready_seconds: int = ENGINE_READY_TIMEOUT_SECONDS
    activation_seconds: int = SLICE_ACTIVATION_TIMEOUT_SECONDS
    startup_margin_seconds: int = STARTUP_MARGIN_SECONDS
    admission_and_pull_seconds: int = ADMISSION_AND_PULL_SECONDS
    probe_period_seconds: int = 30
    jetstream_load_seconds: int = JETSTREAM_LOAD_SECONDS
    slice_check_run_seconds: int = SLICE_CHECK_RUN_SECONDS

    @property
    def startup_seconds(self) -> int:
        """What a leader's startup probe allows from container start."""
        return self.ray_init_seconds + self.engine_ready_seconds + self.startup_margin_seconds

    @property
    def startup_failures(self) -> int:
        """The probe's failureThreshold at `probe_period_seconds`, rounded up."""
        return -(-self.startup_seconds // self.probe_period_seconds)

    @property
    def smoke_deadline_min_seconds(self) -> int:
        """The least a smoke Job started with the LeaderWorkerSets may wait for its first answer."""
        return self.admission_and_pull_seconds + self.activation_seconds + self.startup_seconds

    @property
    def jetstream_startup_seconds(self) -> int:
        """What a multi-host JetStream server's startup probe allows: the model load and the margin."""
        return self.jetstream_load_seconds + self.startup_margin_seconds

    @property
    def jetstream_startup_failures(self) -> int:
        """That probe's failureThreshold at `probe_period_seconds`, rounded up."""
        return -(-self.jetstream_startup_seconds // self.probe_period_seconds)

    @property
    def jetstream_smoke_deadline_seconds(self) -> int:
        """How long JetStream's smoke Job, started with its servers, waits for the first answer: the
        image pull (the admission half of that figure is slack here) and the server's startup."""
        return self.admission_and_pull_seconds + self.jetstream_startup_seconds

    @property
    def saxml_publish_min_seconds(self) -> int:
        """The least Saxml's publish Job may wait for its replicas: it starts once the model-server JobSet
        exists, so a replica is active no sooner than its server's image pull and start."""
        return self.admission_and_pull_seconds + self.startup_margin_seconds

    @property
    def slice_check_init_seconds(self) -> int:
        """The slice check's rendezvous wait: one image pull apart is how late a peer may start."""
        return self.admission_and_pull_seconds

    @property
    def slice_check_deadline_seconds(self) -> int:
        """The slice check's own wall-clock limit: the rendezvous, then the checks."""
        return self.slice_check_init_seconds + self.slice_check_run_seconds


BUDGET = ServingBudget()
