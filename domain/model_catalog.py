"""What vLLM reads from a model's Hugging Face config at engine start: attention heads and context.

vLLM checks the engine arguments against these before it loads a byte of weights, and raises on
every leader when they disagree (vllm 0.26.0 `vllm/config/model.py`, `verify_with_parallel_config`
and `_get_and_verify_max_len`). A model outside this catalog states them in the stack
(`serving.model.attentionHeads`, `serving.model.contextLength`), copied from its `config.json`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Architecture:
    attention_heads: int  # config.json num_attention_heads: tensor parallelism must divide it
    kv_heads: int  # num_key_value_heads
    context_length: int  # max_position_embeddings: the longest --max-model-len vLLM accepts
    source: str


# Keyed by the repository name without a quantisation suffix: an FP8 checkpoint keeps its architecture.
CATALOG: dict[str, Architecture] = {
    "Qwen/Qwen3.5-397B-A17B": Architecture(
        attention_heads=32,
        kv_heads=2,
        context_length=262_144,
        # Heads and query groups: THUDM/slime scripts/models/qwen3.5-397B-A17B.sh (--num-attention-heads
        # 32, --num-query-groups 2); context: the model card's 262,144 tokens (xorbitsai/inference
        # doc/source/models/builtin/llm/qwen3.5.rst). The README lists them as unverified on a TPU.
        source="Qwen/Qwen3.5-397B-A17B config.json",
    ),
}
QUANTISATION_SUFFIXES = ("-FP8", "-Int4", "-Int8", "-AWQ", "-GPTQ")


def architecture(name: str) -> Architecture | None:
    """The catalogued architecture of Hugging Face model `name`, or None."""
    for suffix in QUANTISATION_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return CATALOG.get(name)
