"""settings/rules_serving.py: the model path a vLLM server loads, and where weights, checkpoints and
tokenizers may live (readable by the servers, outside what they write and what the program deletes)."""

from __future__ import annotations

import pytest

from tests.conftest import config_with, refusal

COMMIT = "ea5b4f81096f3901c91dea97f81324302495781d"  # Qwen/Qwen3.5-397B-A17B-FP8's, as the dev stack pins it
SNAPSHOT = f"models--Qwen--Qwen3.5-397B-A17B-FP8/snapshots/{COMMIT}"


@pytest.mark.parametrize("path", [SNAPSHOT, f"{SNAPSHOT}/", f"hub/{SNAPSHOT}", f"team/hf/hub/{SNAPSHOT}"])
def test_a_snapshot_of_the_named_model_is_accepted(path: str) -> None:
    assert config_with({"serving": {"model": {"path": path}}}).serving.model.path == path


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        (f"models--Qwen--Qwen3.5-397B-A17B/snapshots/{COMMIT}", "is a snapshot of another repository"),
        ("models--Qwen--Qwen3.5-397B-A17B-FP8/snapshots/main", "names revision 'main', not a full 40-character"),
        ("models--Qwen--Qwen3.5-397B-A17B-FP8/snapshots/ea5b4f8", "names revision 'ea5b4f8'"),
        (f"models--Qwen--Qwen3.5-397B-A17B-FP8/snapshots/{COMMIT.upper()}", "names revision 'EA5B4F81"),
        ("models--Qwen--Qwen3.5-397B-A17B-FP8", "is not a Hugging Face cache snapshot"),
        ("qwen/fp8", "is not a Hugging Face cache snapshot"),
        ("", "is not a Hugging Face cache snapshot"),
    ],
)
def test_a_path_that_is_no_snapshot_of_the_named_model_is_refused(path: str, reason: str) -> None:
    message = refusal({"serving": {"model": {"path": path}}})
    assert f"tpu-slicing:serving.model.path {path!r} {reason}" in message
    assert "allowed: models--Qwen--Qwen3.5-397B-A17B-FP8/snapshots/<40-hex commit>" in message


def test_the_snapshot_rule_is_vllms_only() -> None:
    # JetStream reads a MaxText checkpoint at model.path; no Hugging Face layout applies.
    config = config_with(stack="jetstream-v5e")
    assert config.serving.model.path == "llama2-70b/unscanned/checkpoints/0/items"


def test_weights_under_the_compilation_cache_are_refused() -> None:
    message = refusal({"serving": {"model": {"path": f"xla_cache/{SNAPSHOT}"}}})
    assert f"serving.model.path 'xla_cache/{SNAPSHOT}' is inside xla_cache/, a prefix the model servers" in message
    assert "allowed: a path outside xla_cache/ and pathways-scratch/" in message


@pytest.mark.parametrize("path", ["pathways-scratch/llama2-70b/items", "pathways-scratch", "xla_cache/llama2"])
def test_a_jetstream_checkpoint_under_a_written_prefix_is_refused(path: str) -> None:
    message = refusal({"serving": {"model": {"path": path}}}, stack="jetstream-v5e")
    assert f"serving.model.path {path!r} is inside" in message


def test_a_prefix_that_only_starts_alike_is_not_a_written_prefix() -> None:
    path = "xla_cache_backup/llama2-70b/items"
    config = config_with({"serving": {"model": {"path": path}}}, "jetstream-v5e")
    assert config.serving.model.path == path


def test_the_saxml_admin_bucket_holds_no_weights() -> None:
    message = refusal({"serving": {"model": {"weightsBucket": "example-tpu-project-saxml-v5e-sax"}}}, "saxml-v5e")
    assert "serving.model.weightsBucket 'example-tpu-project-saxml-v5e-sax' is the Saxml admin bucket" in message
    assert "force_destroy" in message and "allowed: a bucket the program does not create" in message


def test_a_saxml_checkpoint_under_a_written_prefix_is_refused() -> None:
    saxml = {
        "modelPath": "saxml.server.pax.lm.params.lm_cloud.LLaMA70BFP16TPUv5e32",
        "checkpoint": "gs://example-weights/pathways-scratch/llama70b",
    }
    message = refusal({"serving": {"model": {"weightsBucket": "example-weights"}, "saxml": saxml}}, "saxml-v5e")
    assert "serving.saxml.checkpoint 'gs://example-weights/pathways-scratch/llama70b' is inside pathways-scratch/" in (
        message
    )


def test_a_tokenizer_in_another_bucket_is_refused() -> None:
    jet = {"tokenizerPath": "gs://example-tokenizers/tokenizer.llama2"}
    message = refusal({"serving": {"jetstream": jet}}, "jetstream-v5e")
    assert "serving.jetstream.tokenizerPath 'gs://example-tokenizers/tokenizer.llama2' is in bucket" in message
    assert "granted read access to serving.model.weightsBucket 'example-jetstream-checkpoints' only" in message


def test_a_tokenizer_under_a_written_prefix_is_refused() -> None:
    jet = {"tokenizerPath": "gs://example-jetstream-checkpoints/xla_cache/tokenizer.llama2"}
    message = refusal({"serving": {"jetstream": jet}}, "jetstream-v5e")
    assert "serving.jetstream.tokenizerPath" in message and "is inside xla_cache/" in message


@pytest.mark.parametrize(
    "tokenizer", ["assets/tokenizer.llama2", "gs://example-jetstream-checkpoints/tokenizers/tokenizer.llama2"]
)
def test_a_tokenizer_in_the_image_or_the_weights_bucket_is_accepted(tokenizer: str) -> None:
    config = config_with({"serving": {"jetstream": {"tokenizerPath": tokenizer}}}, "jetstream-v5e")
    assert config.serving.jetstream.tokenizer_path == tokenizer


def test_storage_problems_are_named_at_once() -> None:
    overrides = {
        "serving": {
            "model": {"path": "pathways-scratch/items"},
            "jetstream": {"tokenizerPath": "gs://example-tokenizers/t.model"},
        }
    }
    message = refusal(overrides, "jetstream-v5e")
    assert "serving.model.path 'pathways-scratch/items' is inside" in message
    assert "serving.jetstream.tokenizerPath 'gs://example-tokenizers/t.model' is in bucket" in message
