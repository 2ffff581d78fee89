"""The vLLM engine's settings, and the checks vLLM runs on them at engine start.

vLLM validates its engine arguments against the model's config before it loads a byte of weights
and raises on every leader when they disagree; on TPUs that bill by the hour the pods then restart
until someone reads the log. The rules below are those checks (vllm 0.26.0, `vllm/config/`), run on
the arguments this program passes (workloads/vllm_command.py), including the ones it derives.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, field_validator, model_validator

from domain import autoscaling, topology
from settings import rules_autoscaling, rules_waits
from settings.base import Shape, StrictModel
from settings.serving_model import ModelConfig

Tolerance = Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False), AfterValidator(rules_autoscaling.thousandths)]


class AutoscalingConfig(StrictModel):
    """A HorizontalPodAutoscaler for the role: `min` to `max` groups on one vLLM metric's average per
    group (domain/autoscaling.py); the cross-field rules are settings/rules_autoscaling.py's."""

    min: int = Field(ge=1, le=1000)
    max: int = Field(ge=1, le=1000)
    metric: str
    target: float = Field(allow_inf_nan=False)
    scale_up_stabilization_seconds: int = Field(0, ge=0, le=autoscaling.MAX_STABILIZATION_SECONDS)
    scale_down_stabilization_seconds: Annotated[
        int,
        Field(ge=0, le=autoscaling.MAX_STABILIZATION_SECONDS),
        AfterValidator(rules_autoscaling.scale_down_window),
    ] = autoscaling.MAX_STABILIZATION_SECONDS
    # The HPA's own tolerances (behavior.scaleUp/scaleDown.tolerance; unset: the controller's 0.1,
    # domain/autoscaling.py HPA_TOLERANCE), in thousandths as the target is written.
    scale_up_tolerance: Tolerance | None = None
    scale_down_tolerance: Tolerance | None = None

    @field_validator("metric")
    @classmethod
    def _metric(cls, value: str) -> str:
        return rules_autoscaling.known_metric(value)

    @model_validator(mode="after")
    def _bounds(self) -> AutoscalingConfig:
        rules_autoscaling.min_within_max(self)
        return self


class RoleConfig(StrictModel):
    """One serving role: a fixed number of groups (`replicas`), or `autoscaling` between bounds, when
    `replicas` is the autoscaler's `min` (what the plan counts at the planned load)."""

    replicas: int = Field(4, ge=1, le=1000)
    topology: Shape = "2x2x2"
    autoscaling: AutoscalingConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _replicas_or_autoscaling(cls, data: object) -> object:
        return rules_autoscaling.replicas_or_autoscaling(data)

    @model_validator(mode="after")
    def _starts_at_min(self) -> RoleConfig:
        # The autoscaler's validated min, however the stack file wrote it ("2", 2.0): what the plan
        # counts the role at (the LWS itself carries no number, workloads/vllm_pd.py).
        if self.autoscaling is not None and self.replicas != self.autoscaling.min:
            object.__setattr__(self, "replicas", self.autoscaling.min)
        return self

    @property
    def max_replicas(self) -> int:
        """The most groups the role may run: the autoscaler's `max`, else its fixed count."""
        return self.autoscaling.max if self.autoscaling else self.replicas


class VllmConfig(StrictModel):
    """vLLM engine settings shared by prefill and decode (defaults from the reference)."""

    # Tokens, not thousands of them (settings/rules_waits.py says the unit when a value is below the floor).
    max_model_len: Annotated[int, Field(ge=256, le=1_048_576), BeforeValidator(rules_waits.tokens)] = 9216
    max_num_batched_tokens: Annotated[int, Field(ge=256, le=1_048_576), BeforeValidator(rules_waits.tokens)] = 8192
    max_num_seqs: int = Field(512, ge=1, le=65_536)
    kv_cache_dtype: Literal["auto", "fp8", "bfloat16"] = "fp8"
    enable_expert_parallel: bool = True
    tensor_parallel_size: int | None = Field(None, ge=1, le=4096)
    load_format: Literal["runai_streamer", "auto"] = "runai_streamer"
    log_level: Literal["DEBUG", "INFO", "WARNING"] = "INFO"


def tensor_parallel(vllm: VllmConfig, generation: topology.Generation, shape: topology.Topology) -> int:
    """The --tensor-parallel-size the servers get: the stack's, else every device of the slice."""
    return vllm.tensor_parallel_size or generation.devices(shape)


def tensor_parallel_sizes(model: ModelConfig, generation: topology.Generation, shape: topology.Topology) -> list[int]:
    """The tensor-parallel sizes that split `model` over a `shape` slice so that every device holds its share.

    vLLM on TPU shards the weights over `--tensor-parallel-size` devices as JAX counts them (tpu7x: two
    per chip, one per TensorCore; domain/topology.py CATALOG, TPU7x docs), which is why the reference runs
    a 2x2x2 slice (8 chips) at 16 (../shared/reference/dynamic-slicing.md §11.2). With expert parallelism
    the experts spread over the same devices (EP = TP x DP, DP 1 here), so each device holds weights / TP,
    plus the KV-cache headroom the slice-wide check keeps. TP must divide the slice's devices.
    """
    devices = generation.devices(shape)
    per_device = generation.hbm_gib_per_chip * topology.GIB / generation.devices_per_chip
    usable = per_device * (1.0 - model.kv_cache_headroom)
    return [n for n in range(1, devices + 1) if devices % n == 0 and model.weights_bytes / n <= usable]


def check_tensor_parallel(
    tp: int, model: ModelConfig, generation: topology.Generation, shape: topology.Topology, role: str
) -> None:
    """Refuse a `serving.vllm.tensorParallelSize` that exceeds, does not divide, or overfills the devices."""
    devices = generation.devices(shape)
    allowed = tensor_parallel_sizes(model, generation, shape)
    shown = ", ".join(str(n) for n in allowed) or "none (the slice is too small)"
    where = f"the {devices} devices of a {shape} {role} slice (serving.{role}.topology)"
    if tp > devices or devices % tp:
        raise ValueError(
            f"serving.vllm.tensorParallelSize {tp} does not divide {where}; allowed: {shown}"
            if tp <= devices
            else f"serving.vllm.tensorParallelSize {tp} exceeds {where}; allowed: {shown}"
        )
    if tp not in allowed:
        per_device = generation.hbm_gib_per_chip / generation.devices_per_chip
        share = model.weights_bytes / tp / topology.GIB
        with_headroom = share / (1 - model.kv_cache_headroom)
        raise ValueError(
            f"serving.vllm.tensorParallelSize {tp} puts {share:.0f} GiB of model {model.name!r} on each of {tp} "
            f"devices (plus {model.kv_cache_headroom:.0%} KV-cache headroom: {with_headroom:.0f} GiB), but one "
            f"{generation.name} device ({generation.devices_per_chip} per chip, as JAX counts them) "
            f"holds {per_device:.0f} GiB HBM; allowed for {where}: {shown}"
        )


def check_engine(
    vllm: VllmConfig, model: ModelConfig, generation: topology.Generation, shape: topology.Topology
) -> None:
    """Refuse the engine arguments vLLM 0.26.0 raises on at start-up, before any weights load."""
    # SchedulerConfig.verify_max_model_len (vllm/config/scheduler.py L286-291) raises whatever
    # chunked prefill is set to: a step must hold at least one token of every sequence it schedules.
    if vllm.max_num_batched_tokens < vllm.max_num_seqs:
        raise ValueError(
            f"serving.vllm.maxNumBatchedTokens {vllm.max_num_batched_tokens} is below serving.vllm.maxNumSeqs "
            f"{vllm.max_num_seqs}: vLLM refuses to start (scheduler.py verify_max_model_len); allowed: "
            f"maxNumBatchedTokens >= maxNumSeqs, e.g. {vllm.max_num_seqs} or more"
        )
    arch = model.architecture
    if arch is None:
        raise ValueError(
            f"serving.model.attentionHeads and serving.model.contextLength are needed for model {model.name!r}, "
            "which domain/model_catalog.py does not know: vLLM checks tensor parallelism and maxModelLen "
            "against them at start-up; allowed: the num_attention_heads and max_position_embeddings of the "
            "model's config.json"
        )
    # ModelConfig.verify_with_parallel_config (vllm/config/model.py L1228-1235).
    tp = tensor_parallel(vllm, generation, shape)
    if arch.attention_heads % tp:
        given = (
            f"serving.vllm.tensorParallelSize {tp}"
            if vllm.tensor_parallel_size
            else f"serving.vllm.tensorParallelSize (unset, so the program passes {tp}: the {shape} slice's devices)"
        )
        fits = [n for n in tensor_parallel_sizes(model, generation, shape) if arch.attention_heads % n == 0]
        shown = ", ".join(map(str, fits)) or "none (use a smaller serving topology or another model)"
        raise ValueError(
            f"{given} does not divide model {model.name!r}'s {arch.attention_heads} attention heads "
            f"({arch.source}): vLLM refuses to start (config/model.py verify_with_parallel_config); allowed: {shown}"
        )
    # _get_and_verify_max_len (vllm/config/model.py L2152-2292): a longer max_model_len than the
    # model's derived maximum raises unless VLLM_ALLOW_LONG_MAX_MODEL_LEN is set, which this program never sets.
    if vllm.max_model_len > arch.context_length:
        raise ValueError(
            f"serving.vllm.maxModelLen {vllm.max_model_len} exceeds model {model.name!r}'s context of "
            f"{arch.context_length} tokens ({arch.source}): vLLM refuses to start (config/model.py "
            f"_get_and_verify_max_len); allowed: 256 to {arch.context_length}"
        )
