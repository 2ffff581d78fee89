"""settings/rules_waits.py: a wait outlasts what it watches, a value is read in its key's unit, and
vLLM's context holds the smoke test's own requests."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from plan import engine
from settings.loader import ConfigError, load
from settings.model import StackConfig
from tests.conftest import config_with, merged


def _load(stack: str, overrides: dict[str, Any]) -> StackConfig:
    raw, secrets = engine.read_stack_config(engine.ROOT / f"Pulumi.{stack}.yaml")
    raw = merged(overrides, raw)
    return load(raw, stack=stack, project=raw.get("gcp:project"), secret_keys=secrets)


def _refusal(overrides: dict[str, Any], stack: str = "dev") -> str:
    with pytest.raises(ConfigError) as caught:
        _load(stack, overrides)
    return str(caught.value)


# --- waits against the work they watch ----------------------------------------------------------


def test_a_publish_deadline_shorter_than_a_model_servers_start_is_refused() -> None:
    # 600 s was accepted (the range began at 60), though the Job waits for servers that pull a
    # multi-GiB image first (domain/serving_budget.py ADMISSION_AND_PULL_SECONDS).
    text = _refusal({"serving": {"saxml": {"publishDeadlineSeconds": 600}}}, stack="saxml-v5e")
    assert "tpu-slicing:serving.saxml.publishDeadlineSeconds: 600" in text
    assert "allowed are 2400 to 21600 s (image pull 1800 s + margin 600 s" in text


def test_the_publish_deadline_default_and_floor_outlast_the_budget() -> None:
    from domain.serving_budget import BUDGET

    assert BUDGET.saxml_publish_min_seconds == BUDGET.admission_and_pull_seconds + BUDGET.startup_margin_seconds
    config = _load("saxml-v5e", {"serving": {"saxml": {"publishDeadlineSeconds": 2400}}})
    assert config.serving.saxml.publish_deadline_seconds == 2400
    assert config_with({}).serving.saxml.publish_deadline_seconds >= BUDGET.saxml_publish_min_seconds


# --- maxModelLen against the smoke test's requests --------------------------------------------


def test_the_smoke_bound_covers_what_the_smoke_program_sends() -> None:
    from pods import smoke_request as smoke
    from settings import rules_waits

    settings = smoke.parse_settings([], {"SMOKE_BASE_URL": "http://gateway", "SMOKE_MODEL": "m"})
    assert (settings.max_tokens, len(settings.prompt.encode())) == (
        rules_waits.SMOKE_SHORT_MAX_TOKENS,
        rules_waits.SMOKE_SHORT_PROMPT_BYTES,
    )
    # The long-prompt completion's max_tokens, a literal in the shipped script (changing the script would
    # re-run every stack's smoke Job): read where it is sent.
    sent = inspect.getsource(smoke.run_long_prompt_checks)
    assert f'"max_tokens": {rules_waits.SMOKE_LONG_MAX_TOKENS}}}' in sent and sent.count('"max_tokens"') == 1
    # The nonce is rand() to 12 places without "0."; 1.0 rounded up keeps its "1." (14 characters).
    longest = max(len(smoke.long_prompt(settings.prompt, n).encode()) for n in ("9" * 12, "1." + "0" * 12, ""))
    assert smoke.PREFILL_PROMPT_BYTES <= longest <= rules_waits.SMOKE_LONG_PROMPT_MAX_BYTES


def test_a_max_model_len_the_smoke_prompt_overflows_is_refused() -> None:
    text = _refusal({"serving": {"vllm": {"maxModelLen": 2048}}})
    assert "tpu-slicing:serving.vllm.maxModelLen 2048 tokens cannot hold the smoke test's long request" in text
    assert "allowed: 2172 to 262144 tokens, or serving.smokeTest.enabled false" in text


def test_a_short_max_model_len_is_allowed_without_the_smoke_test() -> None:
    config = config_with({"serving": {"vllm": {"maxModelLen": 2048}, "smokeTest": {"enabled": False}}})
    assert config.serving.vllm.max_model_len == 2048
    assert config_with({"serving": {"vllm": {"maxModelLen": 2172}}}).serving.vllm.max_model_len == 2172


# --- unit slips ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "stack", "said"),
    [
        (
            {"serving": {"smokeTest": {"deadlineSeconds": 310}}},
            "dev",
            "serving.smokeTest.deadlineSeconds: 310 s ends before the servers can answer: allowed are 18600 to 28800 s",
        ),
        ({"serving": {"smokeTest": {"deadlineSeconds": 310}}}, "dev", "310 looks like minutes"),
        ({"serving": {"smokeTest": {"deadlineSeconds": 6}}}, "dev", "6 looks like hours: the key counts seconds"),
        ({"serving": {"saxml": {"publishDeadlineSeconds": 60}}}, "saxml-v5e", "60 minutes is 3600 s"),
        ({"serving": {"gateway": {"addressTimeoutSeconds": 20}}}, "dev", "allowed are 60 to 7200 s; 20 looks like"),
        ({"serving": {"vllm": {"maxModelLen": 8}}}, "dev", "tokens, so 8K is 8192"),
        ({"serving": {"vllm": {"maxNumBatchedTokens": 16}}}, "dev", "allowed are 256 to 1048576 tokens; 16 looks"),
        ({"serving": {"model": {"kvCacheHeadroom": 30}}}, "dev", "the key is a fraction, so 30% is 0.3"),
        ({"serving": {"model": {"bytesPerParameter": 16}}}, "saxml-v5e", "counts bytes, so 16 bits is 2"),
    ],
)
def test_a_unit_slip_is_refused_with_the_unit(overrides: dict[str, Any], stack: str, said: str) -> None:
    assert said in _refusal(overrides, stack)


def test_every_slip_is_said_at_once_without_a_traceback() -> None:
    text = _refusal(
        {
            "serving": {
                "vllm": {"maxModelLen": 8, "maxNumBatchedTokens": 8},
                "model": {"kvCacheHeadroom": 30},
                "gateway": {"addressTimeoutSeconds": 20},
                "smokeTest": {"deadlineSeconds": 310},
            }
        }
    )
    assert "(5 problem(s))" in text and "Traceback" not in text
    for key in ("maxModelLen", "maxNumBatchedTokens", "kvCacheHeadroom", "addressTimeoutSeconds", "deadlineSeconds"):
        assert key in text


@pytest.mark.parametrize(
    "overrides",
    [
        {"serving": {"model": {"kvCacheHeadroom": 0.5}}},
        {"serving": {"gateway": {"addressTimeoutSeconds": 60}}},
        {"serving": {"vllm": {"maxModelLen": 4096, "maxNumBatchedTokens": 512}}},
        {"serving": {"smokeTest": {"deadlineSeconds": 28800}}},
    ],
)
def test_values_a_deployment_uses_are_not_taken_for_slips(overrides: dict[str, Any]) -> None:
    config_with(overrides)


def test_a_value_below_the_range_with_no_likely_unit_is_refused_without_a_hint() -> None:
    text = _refusal({"serving": {"model": {"kvCacheHeadroom": 250}}})
    assert "serving.model.kvCacheHeadroom: 250 is not a fraction of HBM: allowed are 0 to below 1" in text
    assert "looks like" not in text
