"""The serving block every backend shares, and vLLM's prefill and decode sub-slices on the TPU7x cubes.

Guards `serving.namespace` (none the cluster or its controllers own), `serving.smokeTest` (a deadline
that outlasts the servers' start-up, a run id fit for Kubernetes names), `serving.model` against the
backend (a weights bucket where one is read, a Saxml checkpoint inside it, the Saxml admin bucket
name `namePrefix` makes), and for vllm-pd the prefill and decode
topologies: one shape for both, packed into the cubes, holding the model's weights and KV-cache
headroom, with vLLM's own start-up checks (settings/vllm.py). What the Saxml and JetStream engines
need is settings/rules_backends.py's; where the model's files may live is settings/rules_storage.py's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import ValidationInfo

from domain import topology
from domain.serving_budget import BUDGET
from settings import serving_model, storage_names
from settings.names import NameRule
from settings.refused import RefusedClass
from settings.rules_backends import Backend
from settings.rules_capacity import as_subslice
from settings.rules_storage import hf_cache_folder
from settings.rules_waits import SMOKE_DEADLINE_MAX, smoke_budget_problem
from settings.serving_model import ModelConfig
from settings.vllm import check_engine, check_tensor_parallel

if TYPE_CHECKING:
    from settings.model import StackConfig

# Namespaces the cluster, GKE or the controllers this program installs already own: a serving
# namespace there fails late (AlreadyExists) while TPU pools bill, or races the owner's chart.
RESERVED_NAMESPACES = frozenset(
    {"default", "kube-system", "kube-public", "kube-node-lease", "kueue-system", "jobset-system", "lws-system"}
    | {"slice-controller-system", "gmp-system", "gmp-public", "gke-managed-system"}
)
RESERVED_NAMESPACE_PREFIXES = ("kube-", "gke-", "gmp-")


def own_namespace(value: str) -> str:
    if value in RESERVED_NAMESPACES or value.startswith(RESERVED_NAMESPACE_PREFIXES):
        raise ValueError(
            f"{value!r} is a namespace the cluster or its controllers own; allowed: any other DNS label "
            f"(not {', '.join(sorted(RESERVED_NAMESPACES))}, nor kube-*, gke-*, gmp-*)"
        )
    return value


RUN_ID = NameRule(r"[a-z0-9-]{1,32}", "1 to 32 lowercase letters, digits and '-'")


def run_id(value: str | None) -> str | None:
    # The alphabet of Kubernetes names, so the smoke Job may carry it in object names and labels.
    if value is not None and not RUN_ID.matches(value):
        raise ValueError(f"{value!r} is not a run id: allowed are {RUN_ID.allowed}")
    return value


def smoke_deadline(value: int, info: ValidationInfo) -> int:
    # The Job starts with the servers, so its deadline must outlast what they wait for: the backend's own
    # budget, which the field knows when the loader puts the backend in the validation context;
    # otherwise the least of any backend's, and settings/rules_waits.py check_smoke_fits holds each
    # backend to its own.
    named = (info.context or {}).get("backend")
    backend = Backend(named) if named in tuple(Backend) else None
    problem = smoke_budget_problem(value, backend)
    if problem:
        raise ValueError(problem)
    return value


def check_serving_model(config: StackConfig) -> None:
    backend = config.serving.backend
    needs_bucket = backend in (Backend.VLLM_PD, Backend.JETSTREAM) or (
        backend is Backend.SAXML and config.serving.saxml.checkpoint != "None"
    )
    if needs_bucket and config.serving.model.weights_bucket is None:
        raise ValueError(
            f"serving.model.weightsBucket is required for serving.backend {backend.value!r} "
            "(the bucket that holds the weights), or set serving.backend to 'none'"
        )
    checkpoint = config.serving.saxml.checkpoint
    if backend is Backend.SAXML and checkpoint != "None":
        # workloads/saxml.py grants the Sax account objectViewer on serving.model.weightsBucket only.
        bucket = checkpoint.removeprefix("gs://").split("/", 1)[0]
        if bucket != config.serving.model.weights_bucket:
            raise ValueError(
                f"serving.saxml.checkpoint {checkpoint!r} is in bucket {bucket!r}, but the model servers are "
                f"granted read access to serving.model.weightsBucket {config.serving.model.weights_bucket!r} "
                "only, so loading it would be refused; allowed: a checkpoint inside serving.model.weightsBucket"
            )
    if backend is Backend.SAXML:
        derived = config.names.sax_bucket(config.project)
        problem = storage_names.bucket_problem(derived)
        if problem:
            raise ValueError(
                f"namePrefix {config.name_prefix!r} makes the Saxml admin bucket name {derived!r} "
                f"(<project>-<namePrefix>-sax), which has {problem}; {storage_names.BUCKET_ALLOWED}"
            )


def check_serving(config: StackConfig) -> None:
    """vllm-pd: the prefill and decode sub-slices (settings/model.py runs it after the slicing checks)."""
    generation, cube_chips, total = config.tpu.generation, config.tpu.chips_per_cube, config.tpu.total_chips
    serving = config.serving
    shapes = {
        role: as_subslice(generation, cfg.topology, f"serving.{role}.topology")
        for role, cfg in (("prefill", serving.prefill), ("decode", serving.decode))
    }
    if shapes["prefill"] != shapes["decode"]:
        raise ValueError(
            f"serving.prefill.topology {serving.prefill.topology} and serving.decode.topology "
            f"{serving.decode.topology} differ: tpu-inference's KV connector pairs decode host i with "
            "prefill host i and pulls each block with the decode side's sharding, asserting equal block "
            "counts (tpu-inference v0.26.0 tpu_inference/distributed/tpu_connector.py), so the KV cannot "
            "move between slices of different shapes or tensor parallelism; allowed: one topology for both"
        )
    chips = [shapes["prefill"].chips] * serving.prefill.replicas + [shapes["decode"].chips] * serving.decode.replicas
    if topology.pack_into_cubes(chips, cube_chips, config.tpu.cubes) is None:
        raise ValueError(
            f"serving.prefill ({serving.prefill.replicas} x {serving.prefill.topology}) and serving.decode "
            f"({serving.decode.replicas} x {serving.decode.topology}) need {sum(chips)} chips in whole "
            f"sub-slices; the stack holds {total} chips in {config.tpu.cubes} cubes of {cube_chips}"
        )
    model = serving.model
    usable = 1.0 - model.kv_cache_headroom
    for role, shape in shapes.items():
        hbm = generation.hbm_bytes(shape)
        if model.weights_bytes > hbm * usable:
            needed = model.weights_bytes / usable
            chips_needed = topology.chips_needed(int(needed), generation)
            smallest = generation.smallest_shape_holding(int(needed))
            raise ValueError(
                f"serving.{role}.topology {shape} holds {hbm / topology.GIB:.0f} GiB HBM, but model "
                f"{model.name!r} needs {model.weights_bytes / topology.GIB:.0f} GiB of weights plus "
                f"{model.kv_cache_headroom:.0%} KV-cache headroom = {needed / topology.GIB:.0f} GiB, i.e. at least "
                f"{chips_needed} {generation.name} chips" + (f" (smallest shape: {smallest})" if smallest else "")
            )
    tp = serving.vllm.tensor_parallel_size
    if tp is not None:
        for role, shape in shapes.items():
            check_tensor_parallel(tp, model, generation, shape, role)
    check_engine(serving.vllm, model, generation, shapes["prefill"])  # one shape for both (above)


_COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _house_model(name: str, **figures: object) -> dict[str, object]:
    """A model outside domain/model_catalog.py at a snapshot of its own (the dev stack states its size)."""
    return {"name": name, "path": f"{hf_cache_folder(name)}/snapshots/{_COMMIT}", **figures}


REFUSED: tuple[RefusedClass, ...] = (
    RefusedClass(
        "serving namespace the cluster owns",
        own_namespace,
        {"serving": {"namespace": "kube-system"}},
        "serving.namespace",
        "any other DNS label",
    ),
    RefusedClass(
        "serving without its weights bucket",
        check_serving_model,
        {"serving": {"model": {"weightsBucket": None}}},
        "serving.model.weightsBucket",
        "required",
    ),
    RefusedClass(
        "model path not inside the bucket",
        serving_model.object_path,
        {"serving": {"model": {"path": "gs://b/models/x"}}},
        "serving.model.path",
        "without a leading '/' or gs://",
    ),
    RefusedClass(
        "model name that is no label value",
        ModelConfig._labelled,
        {"serving": {"model": {"name": "org/-bad-"}}},
        "serving.model.name",
        "Kubernetes label value",
    ),
    RefusedClass(
        "bucket name Cloud Storage refuses",
        serving_model._bucket,
        {"serving": {"model": {"weightsBucket": "my-google-weights"}}},
        "serving.model.weightsBucket",
        storage_names.BUCKET_ALLOWED,
    ),
    RefusedClass(
        "object path no reader resolves",
        serving_model.object_path,
        {"serving": {"model": {"path": "models/../other"}}},
        "serving.model.path",
        storage_names.OBJECT_ALLOWED,
    ),
    RefusedClass(
        "model figure that contradicts the catalog",
        serving_model.catalog_figures,
        {"serving": {"model": {"parametersBillions": 235}}},
        "serving.model.parametersBillions",
        "allowed: 397, or leave it unset",
    ),
    RefusedClass(
        "model whose size neither the stack nor the catalog holds",
        serving_model.catalog_figures,
        {"serving": {"model": {"bytesPerParameter": None}}},
        "serving.model.bytesPerParameter",
        "the bytes each parameter takes by the checkpoint's quantization",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "Saxml checkpoint in a bucket the servers are never granted",
        check_serving_model,
        {
            "serving": {
                "model": {"weightsBucket": "example-weights"},
                "saxml": {
                    "modelPath": "saxml.server.pax.lm.params.lm_cloud.LLaMA70BFP16TPUv5e32",
                    "checkpoint": "gs://other-ckpt/c",
                },
            }
        },
        "serving.saxml.checkpoint",
        "a checkpoint inside serving.model.weightsBucket",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "derived Saxml bucket name Cloud Storage refuses",
        check_serving_model,
        {"namePrefix": "my-google"},
        "namePrefix",
        storage_names.BUCKET_ALLOWED,
        stack="saxml-v5e",
    ),
    RefusedClass(
        "smoke-test deadline shorter than the servers' own startup",
        smoke_deadline,
        {"serving": {"smokeTest": {"deadlineSeconds": 3600}}},
        "serving.smokeTest.deadlineSeconds",
        f"allowed are {BUDGET.smoke_deadline_min_seconds} to {SMOKE_DEADLINE_MAX} s for vllm-pd",
    ),
    RefusedClass(
        "vLLM smoke-test deadline above JetStream's budget, below vLLM's own",
        smoke_deadline,
        {"serving": {"smokeTest": {"deadlineSeconds": 15000}}},
        "serving.smokeTest.deadlineSeconds",
        f"allowed are {BUDGET.smoke_deadline_min_seconds} to {SMOKE_DEADLINE_MAX} s for vllm-pd",
    ),
    RefusedClass(
        "JetStream smoke-test deadline below JetStream's own budget",
        smoke_deadline,
        {"serving": {"smokeTest": {"deadlineSeconds": 13000}}},
        "serving.smokeTest.deadlineSeconds",
        f"allowed are {BUDGET.jetstream_smoke_deadline_seconds} to {SMOKE_DEADLINE_MAX} s for jetstream",
        stack="jetstream-v5e",
    ),
    RefusedClass(
        "smoke-test deadline given in minutes",
        smoke_deadline,
        {"serving": {"smokeTest": {"deadlineSeconds": 310}}},
        "serving.smokeTest.deadlineSeconds",
        "310 minutes is 18600 s",
    ),
    RefusedClass(
        "malformed smoke-test run id",
        run_id,
        {"serving": {"smokeTest": {"runId": "Run_1"}}},
        "serving.smokeTest.runId",
        "1 to 32 lowercase letters, digits and '-'",
    ),
    RefusedClass(
        "prefill and decode slices of different shapes",
        check_serving,
        {"serving": {"decode": {"topology": "2x2x4"}}},
        "serving.decode.topology",
        "allowed: one topology for both",
    ),
    RefusedClass(
        "prefill and decode that do not pack into the cubes",
        check_serving,
        {"serving": {"prefill": {"replicas": 9}, "decode": {"replicas": 8}}},
        "serving.prefill",
        "128 chips",
    ),
    RefusedClass(
        "model larger than a serving sub-slice",
        check_serving,
        {
            "serving": {
                "model": _house_model(
                    "acme/house-model-2t", parametersBillions=2000, attentionHeads=32, contextLength=262_144
                )
            }
        },
        "serving.prefill.topology",
        "smallest shape",
    ),
    RefusedClass(
        "tensor parallelism that does not divide the devices",
        check_tensor_parallel,
        {"serving": {"vllm": {"tensorParallelSize": 5}}},
        "serving.vllm.tensorParallelSize",
        "allowed: 8, 16",
    ),
    RefusedClass(
        "tensor parallelism above the slice's devices",
        check_tensor_parallel,
        {"serving": {"vllm": {"tensorParallelSize": 32}}},
        "serving.vllm.tensorParallelSize",
        "exceeds the 16 devices",
    ),
    RefusedClass(
        "tensor parallelism that overfills a device's HBM",
        check_tensor_parallel,
        {"serving": {"vllm": {"tensorParallelSize": 1}}},
        "serving.vllm.tensorParallelSize",
        "holds 96 GiB HBM; allowed for the 16 devices of a 2x2x2 prefill slice",
    ),
    RefusedClass(
        "tensor parallelism that does not divide the attention heads",
        check_engine,
        {"serving": {"prefill": {"topology": "2x4x4", "replicas": 1}, "decode": {"topology": "2x4x4", "replicas": 1}}},
        "serving.vllm.tensorParallelSize",
        "verify_with_parallel_config); allowed: ",
    ),
    RefusedClass(
        "batched tokens below the sequences of a step",
        check_engine,
        {"serving": {"vllm": {"maxNumSeqs": 1024, "maxNumBatchedTokens": 512}}},
        "serving.vllm.maxNumBatchedTokens",
        "maxNumBatchedTokens >= maxNumSeqs",
    ),
    RefusedClass(
        "maxModelLen above the model's context",
        check_engine,
        {"serving": {"vllm": {"maxModelLen": 524288}}},
        "serving.vllm.maxModelLen",
        "allowed: 256 to 262144",
    ),
    RefusedClass(
        "a model vLLM's checks cannot be run for",
        check_engine,
        {"serving": {"model": _house_model("acme/house-model-70b")}},
        "serving.model.attentionHeads",
        "num_attention_heads and max_position_embeddings",
    ),
)
