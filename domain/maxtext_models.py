"""MaxText models the JetStream engine image knows, and the KV cache MaxEngine allocates for them.

MaxEngine validates `model_name` when it parses its configuration and raises on any other name
(MaxText `MaxText/pyconfig.py` `validate_model_name`, lines 85-103 at tag jetstream-v0.2.2), so a
typo fails on every server after the slice is provisioned. At start-up it allocates the decode
state for the whole batch: per layer a key and a value cache of `max_prefill_predict_length` plus
`max_target_length - max_prefill_predict_length` tokens, bfloat16 unless `quantize_kvcache`
(`MaxText/layers/attentions.py` `_get_prefill_cache` and `_get_ar_cache`, lines 445-537), for
`per_device_batch_size` sequences on every device. Layers, KV heads and head size are each model's
`MaxText/configs/models/<name>.yml`.

The table is keyed by the `maxengine-server` image tag: JetStream v0.2.2 builds its engine from
MaxText tag `jetstream-v0.2.2` (JetStream `docs/online-inference-with-maxtext-engine.md` line 24).
An image tag outside the table is not judged: its MaxText revision cannot be read here.
"""

from __future__ import annotations

from dataclasses import dataclass

BF16_BYTES = 2


@dataclass(frozen=True)
class MaxTextModel:
    layers: int  # base_num_decoder_layers
    kv_heads: int  # base_num_kv_heads
    head_dim: int

    def kv_bytes_per_token(self) -> int:
        """Key and value, every layer, one token, bfloat16 (quantize_kvcache is off)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * BF16_BYTES


# MaxText tag jetstream-v0.2.2, MaxText/configs/models/*.yml. "default" (base.yml's own dimensions)
# passes validate_model_name too, but no published checkpoint has its shape: it is left out.
_JETSTREAM_V0_2_2 = {
    "gemma-2b": MaxTextModel(18, 1, 256),
    "gemma-7b": MaxTextModel(28, 16, 256),
    "gpt3-175b": MaxTextModel(96, 96, 128),
    "gpt3-22b": MaxTextModel(48, 24, 256),
    "gpt3-6b": MaxTextModel(48, 12, 256),
    "gpt3-52k": MaxTextModel(1, 2, 8),
    "llama2-7b": MaxTextModel(32, 32, 128),
    "llama2-13b": MaxTextModel(40, 40, 128),
    "llama2-70b": MaxTextModel(80, 8, 128),
    "mistral-7b": MaxTextModel(32, 8, 128),
    "mixtral-8x7b": MaxTextModel(32, 8, 128),
}

BY_IMAGE_TAG: dict[str, dict[str, MaxTextModel]] = {"v0.2.2": _JETSTREAM_V0_2_2}


def models_for(image: str) -> dict[str, MaxTextModel] | None:
    """The models of a maxengine-server image, or None when its tag is not in the table."""
    tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
    return BY_IMAGE_TAG.get(tag)


def kv_cache_bytes(model: MaxTextModel, *, per_device_batch_size: int, devices: int, max_target_length: int) -> int:
    """What MaxEngine's decode state holds for the whole batch at start-up."""
    return per_device_batch_size * devices * max_target_length * model.kv_bytes_per_token()
