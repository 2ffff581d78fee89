"""settings/rules_waits.py: a wait outlasts what it watches, a value is read in its key's unit, and
vLLM's context holds the smoke test's own requests."""

from __future__ import annotations

import inspect
import json
from typing import Any

import pytest
from pydantic import ValidationError

from domain.serving_budget import BUDGET
from settings.model import StackConfig
from tests.conftest import config_with, refusal, stack_raw

# --- waits against the work they watch ----------------------------------------------------------


def test_a_publish_deadline_shorter_than_a_model_servers_start_is_refused() -> None:
    # 600 s was accepted (the range began at 60), though the Job waits for servers that pull a
    # multi-GiB image first (domain/serving_budget.py ADMISSION_AND_PULL_SECONDS).
    text = refusal({"serving": {"saxml": {"publishDeadlineSeconds": 600}}}, stack="saxml-v5e")
    assert "tpu-slicing:serving.saxml.publishDeadlineSeconds: 600" in text
    assert "allowed are 2400 to 21600 s (image pull 1800 s + margin 600 s" in text


def test_the_publish_deadline_default_and_floor_outlast_the_budget() -> None:
    assert BUDGET.saxml_publish_min_seconds == BUDGET.admission_and_pull_seconds + BUDGET.startup_margin_seconds
    config = config_with({"serving": {"saxml": {"publishDeadlineSeconds": 2400}}}, "saxml-v5e")
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
    text = refusal({"serving": {"vllm": {"maxModelLen": 2048}}})
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
    assert said in refusal(overrides, stack)


def test_every_slip_is_said_at_once_without_a_traceback() -> None:
    text = refusal(
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
    text = refusal({"serving": {"model": {"kvCacheHeadroom": 250}}})
    assert "serving.model.kvCacheHeadroom: 250 is not a fraction of HBM: allowed are 0 to below 1" in text
    assert "looks like" not in text


# --- each backend's smoke test against its own budget ---------------------------------------------


def test_jetstream_s_smoke_deadline_is_held_to_jetstream_s_own_budget() -> None:
    least = BUDGET.jetstream_smoke_deadline_seconds  # 13,200 s: no Kueue admission, no slice activation
    assert least < BUDGET.smoke_deadline_min_seconds
    config = config_with({"serving": {"smokeTest": {"deadlineSeconds": least}}}, "jetstream-v5e")
    assert config.serving.smoke_test.deadline_seconds == least
    text = refusal({"serving": {"smokeTest": {"deadlineSeconds": least - 200}}}, "jetstream-v5e")
    assert f"serving.smokeTest.deadlineSeconds: {least - 200} s ends before" in text, text
    assert f"allowed are {least} to 28800 s for jetstream (image pull 1800 s + a server's startup" in text, text


def test_vllm_s_smoke_deadline_is_still_held_to_vllm_s_budget() -> None:
    # Above JetStream's budget, below vLLM's: the loader tells the field the backend.
    text = refusal({"serving": {"smokeTest": {"deadlineSeconds": 15000}}})
    assert "serving.smokeTest.deadlineSeconds: 15000 s ends before the servers can answer" in text, text
    assert f"allowed are {BUDGET.smoke_deadline_min_seconds} to 28800 s for vllm-pd" in text, text


def test_without_the_backend_the_field_holds_the_least_budget_and_the_stack_rule_the_backend_s() -> None:
    """StackConfig validated without the loader's context (a test, a tool): the field cannot see the
    backend, so the stack-wide rule (rules_waits.check_smoke_fits) holds vLLM to its own budget."""
    raw, _ = stack_raw("dev")
    data = {k.removeprefix("tpu-slicing:"): json.loads(v) if v[:1] in "{[" else v for k, v in raw.items()}
    data = {k: v for k, v in data.items() if ":" not in k} | {"namePrefix": "dev", "project": raw["gcp:project"]}
    data["serving"]["smokeTest"] = {"deadlineSeconds": 15000}
    with pytest.raises(ValidationError) as caught:
        StackConfig.model_validate(data)
    assert "serving.smokeTest.deadlineSeconds: 15000 s ends before" in str(caught.value)
    assert "allowed are 18600 to 28800 s for vllm-pd" in str(caught.value)
    data["serving"]["smokeTest"] = {"deadlineSeconds": 13000}
    with pytest.raises(ValidationError) as caught:
        StackConfig.model_validate(data)
    assert "allowed are 13200 to 28800 s, by backend (vllm-pd from 18600 s" in str(caught.value)


def test_a_max_target_length_the_jetstream_smoke_request_overflows_is_refused() -> None:
    jet = {"maxPrefillPredictLength": 1024, "maxTargetLength": 1100}
    text = refusal({"serving": {"jetstream": jet}}, "jetstream-v5e")
    assert "serving.jetstream.maxTargetLength 1100 leaves 76 generated tokens" in text, text
    assert "allowed: at least 1225 (maxPrefillPredictLength 1024 + 201)" in text, text
    off = config_with({"serving": {"jetstream": jet, "smokeTest": {"enabled": False}}}, "jetstream-v5e")
    assert off.serving.jetstream.max_target_length == 1100
    fits = {"maxPrefillPredictLength": 1024, "maxTargetLength": 1225}
    assert config_with({"serving": {"jetstream": fits}}, "jetstream-v5e").serving.jetstream.max_target_length == 1225


def test_a_prefill_length_the_jetstream_smoke_prompt_overflows_is_refused() -> None:
    text = refusal({"serving": {"jetstream": {"maxPrefillPredictLength": 16}}}, "jetstream-v5e")
    assert "serving.jetstream.maxPrefillPredictLength 16 tokens may not hold the smoke test's prompt" in text, text
