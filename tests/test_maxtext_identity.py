"""The checkpoint and tokenizer JetStream serves against serving.jetstream.maxtextModel
(settings/rules_maxtext.py, domain/maxtext_models.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from domain import maxtext_models
from settings import rules_maxtext
from settings.loader import ConfigError
from tests.conftest import config_with

IMAGE = "us-docker.pkg.dev/cloud-tpu-images/inference/maxengine-server:v0.2.2"
MODELS = maxtext_models.models_for(IMAGE)
assert MODELS is not None

# The safetensors totals the models' Hugging Face pages publish (meta-llama/Llama-2-*-hf,
# mistralai/Mistral-7B-v0.1, mistralai/Mixtral-8x7B-v0.1, google/gemma-*): a fact of the world the
# dimensions must give, not the table's own arithmetic.
PUBLISHED = {
    "llama2-7b": 6_738_415_616,
    "llama2-13b": 13_015_864_320,
    "llama2-70b": 68_976_648_192,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
    "gemma-7b": 8_538_074_112,
    "gemma-2b": 2_506_172_416,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_the_dimensions_give_the_published_parameter_count(name: str) -> None:
    assert MODELS is not None
    assert MODELS[name].parameters() == pytest.approx(PUBLISHED[name], rel=1e-4)  # norms are left out


def test_the_images_tokenizers_fit_the_models_maxtexts_own_tests_pair_them_with() -> None:
    assert MODELS is not None
    fits = {
        name: sorted(p for p, n in maxtext_models.BUNDLED_TOKENIZERS.items() if maxtext_models.tokenizer_fits(m, n))
        for name, m in MODELS.items()
    }
    llama = ["assets/tokenizer.llama2"]
    assert fits == {
        "gemma-2b": ["assets/tokenizer.gemma"],
        "gemma-7b": ["assets/tokenizer.gemma"],
        "gpt3-175b": [],  # 50,304 ids: its tokenizer is not in the image
        "gpt3-22b": ["assets/tokenizer"],
        "gpt3-6b": ["assets/tokenizer"],
        "gpt3-52k": [],
        "llama2-7b": llama,
        "llama2-13b": llama,
        "llama2-70b": llama,
        "mistral-7b": llama,
        "mixtral-8x7b": llama,
    }


def _problem(serving: dict[str, Any]) -> str | None:
    try:
        config_with({"serving": serving}, stack="jetstream-v5e")
    except ConfigError as refused:
        return str(refused)
    return None


@hypothesis_settings(max_examples=25, deadline=None)
@given(st.floats(1, 100, allow_nan=False).map(lambda b: round(b, 1)))
def test_a_stated_size_is_refused_exactly_when_it_is_not_the_models(billions: float) -> None:
    computed = MODELS["llama2-70b"].parameters() / 1e9 if MODELS else 0.0
    within = computed / rules_maxtext.SIZE_TOLERANCE <= billions <= computed * rules_maxtext.SIZE_TOLERANCE
    problem = _problem({"model": {"name": "llama2-70b-chat", "parametersBillions": billions}})
    assert (problem is not None and "serving.model.parametersBillions" in problem) is not within, problem
    if not within:
        assert problem is not None and "about 69.0" in problem and f"parametersBillions {billions:g}" in problem


@pytest.mark.parametrize("tokenizer", sorted(maxtext_models.BUNDLED_TOKENIZERS))
@pytest.mark.parametrize("name", ["llama2-7b", "llama2-13b", "mistral-7b", "gemma-7b", "gemma-2b", "gpt3-6b"])
def test_an_images_tokenizer_is_refused_exactly_when_its_vocabulary_is_not_the_models(
    name: str, tokenizer: str
) -> None:
    """On the jetstream-v5e stack, each model named alike in both keys with its own size."""
    assert MODELS is not None
    model = MODELS[name]
    served = {"name": name, "parametersBillions": round(model.parameters() / 1e9, 2)}
    problem = _problem({"model": served, "jetstream": {"maxtextModel": name, "tokenizerPath": tokenizer}})
    fits = maxtext_models.tokenizer_fits(model, maxtext_models.BUNDLED_TOKENIZERS[tokenizer])
    named = problem is not None and "serving.jetstream.tokenizerPath" in problem
    assert named is not fits, problem
    # Absolute paths into the image are the same files.
    assert maxtext_models.bundled_tokenizer(f"/maxtext/{tokenizer}") == tokenizer


def test_a_tokenizer_from_a_bucket_is_not_judged_and_a_model_named_as_another_is() -> None:
    assert _problem({"jetstream": {"tokenizerPath": "gs://example-jetstream-checkpoints/tok/tokenizer.model"}}) is None
    problem = _problem({"model": {"name": "meta-llama/llama2-13b"}})
    assert problem is not None and "serving.model.name 'meta-llama/llama2-13b' is MaxText's llama2-13b" in problem
