"""The model catalog's figures, and what a stack may say of a catalogued model's size and shape."""

from __future__ import annotations

import pytest

from domain import model_catalog
from settings.loader import ConfigError
from tests.conftest import config_with

QWEN_FP8 = "Qwen/Qwen3.5-397B-A17B-FP8"


def test_the_catalog_sizes_the_fp8_checkpoint_from_its_published_config() -> None:
    known = model_catalog.architecture(QWEN_FP8)
    assert known is not None
    # config.json text_config at ea5b4f81...: 32 heads, 2 KV heads, 262144 positions; 397 B parameters.
    assert (known.attention_heads, known.kv_heads, known.context_length) == (32, 2, 262_144)
    assert known.parameters_billions == 397
    assert model_catalog.bytes_per_parameter(QWEN_FP8) == 1.0  # quantization_config quant_method fp8
    # No stored source confirms the bfloat16 checkpoint's dtype: its bytes are left out, not guessed.
    assert model_catalog.bytes_per_parameter("Qwen/Qwen3.5-397B-A17B") is None


def test_a_catalogued_model_takes_its_size_from_the_catalog() -> None:
    model = config_with({"serving": {"model": {"parametersBillions": None, "bytesPerParameter": None}}}).serving.model
    assert (model.parameters_billions, model.bytes_per_parameter) == (None, None)
    assert model.size == (397.0, 1.0)
    assert model.weights_bytes == 397_000_000_000


def test_a_stack_may_repeat_the_catalogs_figures() -> None:
    figures = {"parametersBillions": 397, "bytesPerParameter": 1, "attentionHeads": 32, "contextLength": 262_144}
    assert config_with({"serving": {"model": figures}}).serving.model.size == (397.0, 1.0)


@pytest.mark.parametrize(
    ("key", "value", "catalog"),
    [
        ("parametersBillions", 235, "397"),
        ("bytesPerParameter", 2, "1"),
        ("attentionHeads", 64, "32"),
        ("contextLength", 131_072, "262144"),
    ],
)
def test_a_figure_that_contradicts_the_catalog_is_refused_naming_both(key: str, value: int, catalog: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config_with({"serving": {"model": {key: value}}})
    message = str(caught.value)
    assert f"serving.model.{key} {value} contradicts the catalog's {catalog} for model '{QWEN_FP8}'" in message
    assert f"allowed: {catalog}, or leave it unset" in message


def test_every_contradiction_is_named_at_once() -> None:
    with pytest.raises(ConfigError) as caught:
        config_with({"serving": {"model": {"parametersBillions": 235, "attentionHeads": 64}}})
    message = str(caught.value)
    assert "parametersBillions 235 contradicts" in message and "attentionHeads 64 contradicts" in message


def test_a_model_outside_the_catalog_must_state_its_size() -> None:
    overrides = {"name": "acme/house-model-70b", "parametersBillions": None, "bytesPerParameter": None}
    with pytest.raises(ConfigError) as caught:
        config_with({"serving": {"model": overrides}})
    message = str(caught.value)
    assert "serving.model.parametersBillions and serving.model.bytesPerParameter are required" in message
    assert "'acme/house-model-70b'" in message and "Traceback" not in message


def test_a_quantization_the_catalog_does_not_size_states_its_bytes() -> None:
    # The architecture (and so the parameters) is the model's; the bytes are the checkpoint's.
    model = {"name": "Qwen/Qwen3.5-397B-A17B", "bytesPerParameter": None, "parametersBillions": None}
    with pytest.raises(ConfigError, match=r"serving\.model\.bytesPerParameter is required"):
        config_with({"serving": {"model": model}})
