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
    # What the checkpoint's arrays are shaped by (configs/models/<name>.yml): restoring a checkpoint
    # of another model into these shapes fails when every server starts.
    emb_dim: int  # base_emb_dim
    query_heads: int  # base_num_query_heads
    mlp_dim: int  # base_mlp_dim
    vocab: int  # vocab_size: the embedding table's rows, the highest token id plus one it takes
    gated: bool  # two mlp_activations (a gate and a linear), else one
    tied: bool  # logits_via_embedding: the output projection is the embedding table
    experts: int = 1  # num_experts
    positions: int = 0  # trainable_position_size (GPT-3's learned position embeddings)

    def kv_bytes_per_token(self) -> int:
        """Key and value, every layer, one token, bfloat16 (quantize_kvcache is off)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * BF16_BYTES

    def parameters(self) -> int:
        """The weights' count from the dimensions: the embedding (and the output projection when not
        tied), and per layer the query, key, value and output projections and the MLP (a gate, an
        up and a down projection when gated; each expert's own). Norms, biases and the router are
        left out: under a thousandth of any model here."""
        attention = self.emb_dim * self.head_dim * (self.query_heads + 2 * self.kv_heads)
        attention += self.query_heads * self.head_dim * self.emb_dim
        mlp = self.emb_dim * self.mlp_dim * (3 if self.gated else 2) * self.experts
        embedding = self.vocab * self.emb_dim * (1 if self.tied else 2) + self.positions * self.emb_dim
        return self.layers * (attention + mlp) + embedding


# MaxText tag jetstream-v0.2.2, MaxText/configs/models/*.yml, whose fields the base.yml defaults
# complete (gated silu/linear MLP, untied logits, one expert). "default" (base.yml's own dimensions)
# passes validate_model_name too, but no published checkpoint has its shape: it is left out.
_JETSTREAM_V0_2_2 = {
    "gemma-2b": MaxTextModel(18, 1, 256, 2048, 8, 16384, 256128, gated=True, tied=True),
    "gemma-7b": MaxTextModel(28, 16, 256, 3072, 16, 24576, 256128, gated=True, tied=True),
    "gpt3-175b": MaxTextModel(96, 96, 128, 12288, 96, 49152, 50304, gated=False, tied=True, positions=16384),
    "gpt3-22b": MaxTextModel(48, 24, 256, 6144, 24, 24576, 32768, gated=False, tied=True, positions=16384),
    "gpt3-6b": MaxTextModel(48, 12, 256, 3072, 12, 12288, 32768, gated=False, tied=True, positions=16384),
    "gpt3-52k": MaxTextModel(1, 2, 8, 16, 2, 64, 1024, gated=False, tied=True, positions=2048),
    "llama2-7b": MaxTextModel(32, 32, 128, 4096, 32, 11008, 32000, gated=True, tied=False),
    "llama2-13b": MaxTextModel(40, 40, 128, 5120, 40, 13824, 32000, gated=True, tied=False),
    "llama2-70b": MaxTextModel(80, 8, 128, 8192, 64, 28672, 32000, gated=True, tied=False),
    "mistral-7b": MaxTextModel(32, 8, 128, 4096, 32, 14336, 32000, gated=True, tied=False),
    "mixtral-8x7b": MaxTextModel(32, 8, 128, 4096, 32, 14336, 32000, gated=True, tied=False, experts=8),
}

# The SentencePiece models the image carries in MaxText's assets/ (tag jetstream-v0.2.2), by their
# piece count: the ids a tokenizer emits run up to its count, and the model's embedding has `vocab`
# rows, padded up to a multiple of 128 (gemma's 256,000 pieces in 256,128 rows). tokenizer.llama2
# (32,000) and tokenizer (32,768, the C4 vocabulary MaxText trains GPT-3 6B and 22B on) were counted
# from the files at the tag; tokenizer.gemma is Gemma's 256,000-piece vocabulary (Gemma technical
# report, section 2). MaxText's own tests pair tokenizer.gemma with gemma-*, tokenizer.llama2 (its
# base.yml default) with llama2-*, mistral-7b and mixtral-8x7b (end_to_end/tpu/*/).
BUNDLED_TOKENIZERS = {"assets/tokenizer": 32768, "assets/tokenizer.llama2": 32000, "assets/tokenizer.gemma": 256000}
VOCAB_PADDING = 128


def bundled_tokenizer(path: str) -> str | None:
    """The image's own tokenizer a path names (`assets/...`, or an absolute path ending so), else None."""
    for name in BUNDLED_TOKENIZERS:
        if path == name or path.endswith("/" + name):
            return name
    return None


def tokenizer_fits(model: MaxTextModel, pieces: int) -> bool:
    """A tokenizer whose ids fill the model's embedding: none beyond its rows, and no more unused
    rows than the padding (a smaller vocabulary is another model's: its ids mean other words)."""
    return model.vocab - VOCAB_PADDING <= pieces <= model.vocab


BY_IMAGE_TAG: dict[str, dict[str, MaxTextModel]] = {"v0.2.2": _JETSTREAM_V0_2_2}


def models_for(image: str) -> dict[str, MaxTextModel] | None:
    """The models of a maxengine-server image, or None when its tag is not in the table."""
    tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
    return BY_IMAGE_TAG.get(tag)


def kv_cache_bytes(model: MaxTextModel, *, per_device_batch_size: int, devices: int, max_target_length: int) -> int:
    """What MaxEngine's decode state holds for the whole batch at start-up."""
    return per_device_batch_size * devices * max_target_length * model.kv_bytes_per_token()
