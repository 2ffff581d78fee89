"""What a model's published Hugging Face checkpoint is: its size, and what vLLM reads of its config.

vLLM checks the engine arguments against the heads and context before it loads a byte of weights,
and raises on every leader when they disagree (vllm 0.26.0 `vllm/config/model.py`,
`verify_with_parallel_config` and `_get_and_verify_max_len`); the parameters and the bytes each takes
(the checkpoint's quantization) size the weights every serving slice must hold. A model outside this
catalog states them in the stack (`serving.model.parametersBillions`, `bytesPerParameter`,
`attentionHeads`, `contextLength`), copied from its `config.json` and model card; for a catalogued
model the stack may repeat them, and settings/serving_model.py refuses a figure that contradicts
the catalog. A figure no stored upstream source confirms is left out (None), never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Architecture:
    attention_heads: int  # config.json num_attention_heads: tensor parallelism must divide it
    kv_heads: int  # num_key_value_heads
    context_length: int  # max_position_embeddings: the longest --max-model-len vLLM accepts
    source: str
    parameters_billions: float | None = None  # every quantization of the model has as many


# Keyed by the repository name without a quantization suffix: an FP8 checkpoint keeps its architecture.
CATALOG: dict[str, Architecture] = {
    "Qwen/Qwen3.5-397B-A17B": Architecture(
        attention_heads=32,
        kv_heads=2,
        context_length=262_144,
        # text_config num_attention_heads 32, num_key_value_heads 2, max_position_embeddings 262144 of
        # Qwen/Qwen3.5-397B-A17B-FP8 config.json at revision ea5b4f81096f3901c91dea97f81324302495781d, as
        # copied with its SOURCE.json in aios-tpu-infra/tpu_benchmark_daily models/Qwen3.5-397B-A17B-FP8/.
        source="Qwen/Qwen3.5-397B-A17B-FP8 config.json",
        # "Model Size (in billions): 397" for Qwen/Qwen3.5-397B-A17B (xorbitsai/inference
        # doc/source/models/builtin/llm/qwen3.5.rst); config.json holds no parameter count.
        parameters_billions=397.0,
    ),
}
QUANTISATION_SUFFIXES = ("-FP8", "-Int4", "-Int8", "-AWQ", "-GPTQ")

# Bytes per parameter of one published checkpoint, from its config.json `quantization_config`.
BYTES_PER_PARAMETER: dict[str, float] = {
    # quant_method fp8, weight_block_size [128, 128]: one byte per weight (the same config.json as above);
    # its modules_to_not_convert (embeddings, lm_head, gates, vision tower) stay bfloat16, a small share.
    "Qwen/Qwen3.5-397B-A17B-FP8": 1.0,
}


def architecture(name: str) -> Architecture | None:
    """The catalogued architecture of Hugging Face model `name`, or None."""
    for suffix in QUANTISATION_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return CATALOG.get(name)


def bytes_per_parameter(name: str) -> float | None:
    """What each parameter of checkpoint `name` takes, by its quantization, or None when not catalogued."""
    return BYTES_PER_PARAMETER.get(name)
