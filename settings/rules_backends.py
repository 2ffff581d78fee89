"""The serving backends: which TPU platform each runs on and which keys it reads, and what the Saxml
and JetStream engines need of their multi-host slice.

Guards `serving.backend` against the rest of the stack (the cube platform's `tpu`, `kueue`, `checks`
and reservation block, or the slice platform's `serving.slice`), the slice's shape on its machine
type, and the model on one slice: its HBM, the Saxml servable's mesh and checkpoint, MaxText's model
name, tensor parallelism and the KV cache MaxEngine allocates at start-up. vLLM's own start-up checks
are settings/vllm.py's; the serving block every backend shares is settings/rules_serving.py's.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import TYPE_CHECKING

from pydantic.alias_generators import to_camel

from domain import maxtext_models, saxml_servables, topology
from settings import rules_maxtext, storage_names
from settings.refused import RefusedClass

if TYPE_CHECKING:
    from settings.model import JetstreamConfig, SliceConfig, StackConfig


class Backend(StrEnum):
    VLLM_PD = "vllm-pd"
    SAXML = "saxml"
    JETSTREAM = "jetstream"
    NONE = "none"


# Serving keys of the other platform, which a backend never reads (__main__.py): set in a stack
# file they would be ignored without a word. The backend-specific blocks (saxml, jetstream) stay
# allowed on either of the two slice backends, so a stack switches between them by one key.
_SLICE_KEYS = frozenset({"slices", "slice", "http"})
_CUBE_SERVING_KEYS = frozenset({"prefill", "decode", "vllm", "gateway", "smoke_test"})
IGNORED_KEYS: dict[Backend, frozenset[str]] = {
    Backend.VLLM_PD: _SLICE_KEYS | {"saxml", "jetstream"},
    # Nothing is served: the checks run in serving.namespace (backends/dynamic_slicing.py); the model block
    # stays allowed so that a stack pauses serving by one key.
    Backend.NONE: _SLICE_KEYS | _CUBE_SERVING_KEYS | {"saxml", "jetstream"},
    Backend.SAXML: _CUBE_SERVING_KEYS,
    # JetStream has its own smoke Job (backends/jetstream.py): serving.smokeTest turns it off or re-runs it.
    Backend.JETSTREAM: _CUBE_SERVING_KEYS - {"smoke_test"},
}


def check_backend_platform(config: StackConfig) -> None:
    serving = config.serving
    unused = sorted(to_camel(name) for name in serving.model_fields_set & IGNORED_KEYS[serving.backend])
    if unused:
        platform = "TPU7x cubes" if serving.dynamic_slicing else "multi-host slices"
        raise ValueError(
            f"serving.{unused[0]} does nothing with serving.backend {serving.backend.value!r} (it runs on "
            f"{platform}), so it would be ignored without a word; remove it"
        )
    if serving.dynamic_slicing:
        if config.reservation is None or config.reservation.block is None:
            raise ValueError(
                "reservation.name and reservation.block are required: TPU7x dynamic slicing binds each cube "
                "to a reservation block (serving.backend saxml or jetstream may run on demand)"
            )
        return
    backend = serving.backend.value
    if "tpu" in config.model_fields_set:
        raise ValueError(f"tpu applies to the TPU7x cube platform; serving.backend {backend!r} uses serving.slice")
    if "kueue" in config.model_fields_set:
        # __main__.py installs Kueue for the cube platform only (needed_controllers).
        raise ValueError(
            f"kueue does nothing with serving.backend {backend!r} (Kueue queues only the TPU7x cubes), so it "
            "would be ignored without a word; remove it"
        )
    if config.checks.subslicing.enabled or config.checks.superslicing.enabled:
        raise ValueError(
            f"checks.* prove TPU7x dynamic slicing and cannot run with serving.backend {backend!r}; disable them"
        )
    if config.reservation is not None and config.reservation.sub_blocks:
        raise ValueError("reservation.subBlocks apply to TPU7x cubes only")
    if config.reservation is not None and config.reservation.block_cubes is not None:
        # Read only with cubes: tpu.cubes against the block (rules_capacity.py), the fleet's block
        # checks (rules_fleet.py) and the block's bill (plan/cost.py).
        raise ValueError(
            f"reservation.blockCubes counts TPU7x cubes and does nothing with serving.backend {backend!r} (its "
            "slices are node pools of serving.slice), so it would be ignored without a word; remove it"
        )
    if config.reservation is not None and config.reservation.block is not None:
        raise ValueError(
            f"reservation.block {config.reservation.block!r} applies to TPU7x cubes only: a "
            f"{serving.slice.generation.name} slice binds to the whole reservation; remove it"
        )
    generation = serving.slice.generation
    if serving.backend is Backend.SAXML and generation.saxml_chip is None:
        raise ValueError(
            f"serving.slice.machineType {serving.slice.machine_type}: Saxml has no chip name for {generation.name} "
            "(its model servers know tpuv5e); use a v5e slice or serving.backend jetstream"
        )
    multi_host = serving.slice.vms > 1
    if serving.backend is Backend.JETSTREAM and multi_host and generation.pathways_type is None:
        raise ValueError(
            f"serving.slice {serving.slice.topology} on {generation.name} spans several VMs, and Pathways "
            "(JetStream's multi-host path) has no instance type for it; use a single-host topology"
        )
    if serving.backend is Backend.SAXML and len(config.names.sax_account) < 6:
        raise ValueError(
            f"namePrefix {config.name_prefix!r} is too short: the Saxml service account id "
            f"{config.names.sax_account!r} needs 6 to 30 characters"
        )


# --- Saxml and JetStream: one multi-host slice per node pool


def slice_shape(slice_: SliceConfig) -> None:
    """SliceConfig: a topology its generation allows, on the machine type that builds it."""
    try:
        generation = topology.generation_of(slice_.machine_type)
        if generation.cube is not None:
            raise topology.TopologyError(
                f"{slice_.machine_type} ({generation.name}) serves through dynamic slicing: "
                "use serving.backend vllm-pd (or none) with the tpu block"
            )
        shape = generation.allowed_shape(slice_.topology)
        hosts = generation.host_machines(shape)
    except topology.TopologyError as err:
        raise ValueError(str(err)) from None
    if slice_.machine_type not in (host.name for host in hosts):
        plain = " or ".join(host.name for host in hosts)
        quoted = " or ".join(repr(host.name) for host in hosts)
        raise ValueError(
            f"topology {slice_.topology} runs on {plain} VMs, not {slice_.machine_type}: "
            f"set machineType {quoted} or pick a topology of {slice_.machine_type}"
        )


def checkpoint(value: str) -> str:
    # "None" is Saxml's literal for a test model with random weights; else a gs:// object prefix.
    if value == "None":
        return value
    bucket, _, path = value.removeprefix("gs://").partition("/")
    problem = None if value.startswith("gs://") else "no gs:// scheme"
    problem = problem or storage_names.bucket_problem(bucket) or storage_names.object_path_problem(path)
    if problem:
        raise ValueError(
            f"{value!r} has {problem}; allowed: None (random weights) or gs://<bucket>/<path>, "
            f"the bucket {storage_names.BUCKET_ALLOWED.removeprefix('allowed: ')}, the path "
            f"{storage_names.OBJECT_ALLOWED.removeprefix('allowed: ')}"
        )
    return value


def jetstream_lengths(jet: JetstreamConfig) -> None:
    if jet.max_prefill_predict_length >= jet.max_target_length:
        raise ValueError("maxPrefillPredictLength must be below maxTargetLength")


def check_slice_model(config: StackConfig) -> None:
    """Saxml and JetStream: the model on one slice (its HBM, the servable's mesh, MaxText's cache)."""
    serving = config.serving
    if serving.dynamic_slicing:
        return
    generation = serving.slice.generation
    model = serving.model
    needed = model.weights_bytes / (1.0 - model.kv_cache_headroom)
    hbm = generation.hbm_bytes(serving.slice.shape)
    if needed > hbm:
        smallest = generation.smallest_shape_holding(int(needed))
        allowed = (
            f"the smallest {generation.name} topology that fits is {smallest}"
            if smallest
            else (f"no {generation.name} slice is large enough")
        )
        raise ValueError(
            f"serving.slice.topology {serving.slice.topology} holds {hbm / topology.GIB:.0f} GiB HBM, but model "
            f"{model.name!r} needs {model.weights_bytes / topology.GIB:.0f} GiB of weights plus "
            f"{model.kv_cache_headroom:.0%} headroom = {needed / topology.GIB:.0f} GiB; {allowed}"
        )
    if serving.backend is Backend.SAXML:  # after the size: a model that cannot fit is the first thing to say
        check_servable(config, generation)
    if serving.backend is Backend.JETSTREAM:
        check_maxtext(config, generation)


def jetstream_tensor_parallelism(config: StackConfig) -> int:
    """MaxText's ici_tensor_parallelism for the JetStream engine (ici_autoregressive_parallelism=-1
    takes the slice's other devices). Given, it is checked by `check_maxtext`. Unset: 1 on one host,
    as the single-host samples; on a Pathways slice the largest count dividing both the slice's
    devices and the model's KV heads, as GKE's JetStream + Pathways tutorial shards Llama 3.1 405B
    (8 KV heads) over a 16-chip v6e slice with ici_tensor_parallelism=8 and autoregressive 2; all
    the devices when the engine image is outside domain/maxtext_models.py's table."""
    jet, slice_ = config.serving.jetstream, config.serving.slice
    if jet.tensor_parallelism is not None:
        return jet.tensor_parallelism
    if slice_.vms == 1:
        return 1
    devices = slice_.generation.devices(slice_.shape)
    model = (maxtext_models.models_for(config.versions.jetstream_maxengine_image) or {}).get(jet.maxtext_model)
    return math.gcd(devices, model.kv_heads) if model is not None else devices


def check_maxtext(config: StackConfig, generation: topology.Generation) -> None:
    """The MaxText model name, its tensor parallelism and the KV cache MaxEngine allocates at start-up
    (domain/maxtext_models.py)."""
    jet, slice_, image = config.serving.jetstream, config.serving.slice, config.versions.jetstream_maxengine_image
    models = maxtext_models.models_for(image)
    if models is None:  # a tag the table does not know: its MaxText revision cannot be read here
        return
    engine = image.rsplit("/", 1)[-1]
    model = models.get(jet.maxtext_model)
    if model is None:
        raise ValueError(
            f"serving.jetstream.maxtextModel {jet.maxtext_model!r} is not a model {engine} knows: MaxText's "
            f"validate_model_name refuses it when every server starts; allowed: {', '.join(sorted(models))}"
        )
    rules_maxtext.check_identity(config, models)
    devices = generation.devices(slice_.shape)
    check_tensor_parallelism(config, model, devices)
    per_sequence = jet.max_target_length * model.kv_bytes_per_token()
    kv = maxtext_models.kv_cache_bytes(
        model,
        per_device_batch_size=jet.per_device_batch_size,
        devices=devices,
        max_target_length=jet.max_target_length,
    )
    weights, hbm = config.serving.model.weights_bytes, generation.hbm_bytes(slice_.shape)
    if weights + kv <= hbm:
        return
    largest = (hbm - weights) // (devices * per_sequence)
    allowed = (
        f"perDeviceBatchSize at most {largest} with maxTargetLength {jet.max_target_length}"
        if largest >= 1
        else "a shorter maxTargetLength or a larger slice"
    )
    gib = topology.GIB
    raise ValueError(
        f"serving.jetstream.perDeviceBatchSize {jet.per_device_batch_size}: MaxEngine allocates the KV cache "
        f"of the whole batch when it starts, {jet.per_device_batch_size} x {devices} devices x "
        f"{jet.max_target_length} tokens x {model.kv_bytes_per_token() // 1024} KiB per token of "
        f"{jet.maxtext_model} = {kv / gib:.0f} GiB, beside {weights / gib:.0f} GiB of weights: more than the "
        f"{hbm / gib:.0f} GiB HBM of serving.slice.topology {slice_.topology}; allowed: {allowed}"
    )


def check_tensor_parallelism(config: StackConfig, model: maxtext_models.MaxTextModel, devices: int) -> None:
    """MaxText shards the key and value projections' heads axis and the KV cache's heads over the
    tensor axis (MaxText jetstream-v0.2.2 MaxText/layers/attentions.py, kernel_axes ("embed", "heads",
    "kv") of features (num_kv_heads, head_dim); configs/base.yml logical_axis_rules `heads` and
    `cache_heads` on 'tensor'), and the ici axes multiply to the slice's devices (pyconfig's mesh,
    ici_autoregressive_parallelism=-1 filling the rest): a count above the KV heads, or one that
    divides either unevenly, leaves a KV head split across chips or the mesh short of devices."""
    tp, heads = jetstream_tensor_parallelism(config), model.kv_heads
    if tp <= heads and heads % tp == 0 and devices % tp == 0:
        return
    common = math.gcd(devices, heads)
    allowed = ", ".join(str(d) for d in range(1, common + 1) if common % d == 0)
    name, topology_ = config.serving.jetstream.maxtext_model, config.serving.slice.topology
    if tp > heads:
        reason = f"above the {heads} KV heads of {name} (MaxText shards the KV heads over tensor parallelism)"
    elif heads % tp:
        reason = f"not a divisor of the {heads} KV heads of {name} (MaxText shards them over tensor parallelism)"
    else:
        reason = f"not a divisor of the {devices} devices of serving.slice.topology {topology_}"
    raise ValueError(
        f"serving.jetstream.tensorParallelism {tp} is {reason}; allowed: {allowed} (divisors of both the "
        f"{heads} KV heads and the {devices} devices; ici_autoregressive_parallelism takes the other devices)"
    )


def check_servable(config: StackConfig, generation: topology.Generation) -> None:
    saxml, slice_ = config.serving.saxml, config.serving.slice
    servable = saxml_servables.SERVABLES.get(saxml.model_path)
    if servable is None:
        return
    devices = generation.devices(slice_.shape)
    if servable.devices != devices:
        fitting = sorted(p for p, s in saxml_servables.SERVABLES.items() if s.devices == devices)
        raise ValueError(
            f"serving.saxml.modelPath {saxml.model_path.removeprefix(saxml_servables.PREFIX)} shards over "
            f"{servable.devices} devices (its ICI_MESH_SHAPE), but serving.slice.topology {slice_.topology} has "
            f"{devices}: the model servers would fail to load it; allowed: "
            + (", ".join(p.removeprefix(saxml_servables.PREFIX) for p in fitting) or "a servable of that size")
            + f", or a {generation.name} topology of {servable.devices} chips"
        )
    if servable.test_mode and saxml.checkpoint != "None":
        raise ValueError(
            f"serving.saxml.checkpoint {saxml.checkpoint!r} would be ignored: "
            f"{saxml.model_path.rsplit('.', 1)[-1]} is a test-mode servable that serves random weights; "
            "allowed: checkpoint None for it, or a servable that loads a checkpoint"
        )


REFUSED: tuple[RefusedClass, ...] = (
    # --- the backend's platform
    RefusedClass(
        "TPU7x without a reservation block",
        check_backend_platform,
        {"reservation": None},
        "reservation.block",
        "required",
        pack="tpu-pool-specific-reservation",
    ),
    RefusedClass(
        "reservation block on a slice backend",
        check_backend_platform,
        {"reservation": {"name": "v5e-reservation", "block": "block-0"}},
        "reservation.block",
        "remove it",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "a block's cube count on a slice backend",
        check_backend_platform,
        {"reservation": {"name": "v5e-reservation", "blockCubes": 4}},
        "reservation.blockCubes",
        "remove it",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "cube serving keys with nothing served",
        check_backend_platform,
        {"serving": {"vllm": {"maxNumSeqs": 8}}},
        "serving.vllm",
        "remove it",
        stack="dev-b",
    ),
    RefusedClass(
        "keys the backend never reads",
        check_backend_platform,
        {"serving": {"slices": 3}},
        "serving.slices",
        "remove it",
    ),
    RefusedClass(
        "kueue on a slice backend",
        check_backend_platform,
        {"kueue": {"priorities": {"low": 10}}},
        "kueue",
        "remove it",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "Saxml on a generation it has no chip name for",
        check_backend_platform,
        {"zone": "us-east5-b", "serving": {"slice": {"machineType": "ct6e-standard-4t", "topology": "4x4"}}},
        "serving.slice.machineType",
        "use a v5e slice",
        stack="saxml-v5e",
    ),
    # --- the model on one slice
    RefusedClass(
        "slice shape on a machine type that cannot build it",
        slice_shape,
        {"serving": {"slice": {"machineType": "ct5lp-hightpu-8t", "topology": "4x8"}}},
        "serving.slice",
        "set machineType 'ct5lp-hightpu-4t'",
        stack="jetstream-v5e",
    ),
    RefusedClass(
        "model larger than a serving slice",
        check_slice_model,
        {"serving": {"model": {"parametersBillions": 300}}},
        "serving.slice.topology",
        "the smallest v5e topology that fits",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "Saxml servable whose mesh is not the slice's devices",
        check_servable,
        {"serving": {"saxml": {"modelPath": "saxml.server.pax.lm.params.lm_cloud.LmCloudSpmd175B64Test"}}},
        "serving.saxml.modelPath",
        "allowed: LmCloudSpmd175B32Test",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "test-mode Saxml servable given a checkpoint",
        check_servable,
        {"serving": {"model": {"weightsBucket": "example-weights"}, "saxml": {"checkpoint": "gs://example-weights/c"}}},
        "serving.saxml.checkpoint",
        "checkpoint None for it",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "MaxText model name the engine image does not know",
        check_maxtext,
        {"serving": {"jetstream": {"maxtextModel": "llama-2-70b"}}},
        "serving.jetstream.maxtextModel",
        "llama2-70b, llama2-7b",
        stack="jetstream-v5e",
    ),
    RefusedClass(
        "MaxText tensor parallelism above the model's KV heads",
        check_tensor_parallelism,
        {"serving": {"jetstream": {"tensorParallelism": 32}}},
        "serving.jetstream.tensorParallelism",
        "allowed: 1, 2, 4, 8",
        stack="jetstream-v5e",
    ),
    RefusedClass(
        "MaxText KV cache larger than the slice's HBM at start-up",
        check_maxtext,
        {"serving": {"jetstream": {"perDeviceBatchSize": 64}}},
        "serving.jetstream.perDeviceBatchSize",
        "perDeviceBatchSize at most 19",
        stack="jetstream-v5e",
    ),
)
