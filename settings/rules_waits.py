"""Waits and units: a timeout outlasts the work it watches, a value is read in the unit its key names,
and the model servers' lengths hold the program's own smoke requests.

Guards `serving.saxml.publishDeadlineSeconds` (at least what the publish Job watches:
domain/serving_budget.py), `serving.smokeTest.deadlineSeconds` against its own backend's budget
(`SMOKE_BUDGETS`: the field rule is settings/rules_serving.py's `smoke_deadline`, told the backend by the
loader; `check_smoke_fits` holds it when validated without), `serving.vllm.maxModelLen` and JetStream's
`maxPrefillPredictLength` and `maxTargetLength` against the smoke test's requests (pods/smoke_request.py),
and the keys where a unit slip is plausible: seconds given in minutes, tokens given in thousands, a
fraction given as a percent, bytes given as bits. A unit hint is only said for a value the key's own
range already refuses, so no value a deployment uses is refused for looking like a slip; it turns
"Input should be less than 1" into what was meant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from domain.serving_budget import BUDGET
from settings.base import ProblemsError
from settings.refused import RefusedClass
from settings.rules_backends import Backend

if TYPE_CHECKING:
    from settings.model import StackConfig

# --- seconds given in minutes (or hours) ------------------------------------------------------------

PUBLISH_DEADLINE_MAX = 6 * 3600
ADDRESS_TIMEOUT_MIN, ADDRESS_TIMEOUT_MAX = 60, 7200


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def minutes_hint(value: Any, least: int, most: int) -> str:
    """What a seconds value below `least` meant, when read as minutes (or hours) it falls in range."""
    if not _number(value) or value <= 0:
        return ""
    for unit, scale in (("minutes", 60), ("hours", 3600)):
        if least <= value * scale <= most:
            return f"; {value} looks like {unit}: the key counts seconds, so {value} {unit} is {int(value * scale)} s"
    return ""


def publish_deadline(value: Any) -> Any:
    # workloads/saxml.py: the publish Job starts once the model-server JobSet exists and polls until
    # every replica is active, so it must outlast a server's image pull and start.
    least = BUDGET.saxml_publish_min_seconds
    if _number(value) and value < least:
        raise ValueError(
            f"{value} s ends before a model server can be active: allowed are {least} to {PUBLISH_DEADLINE_MAX} s "
            f"(image pull {BUDGET.admission_and_pull_seconds} s + margin {BUDGET.startup_margin_seconds} s; "
            f"domain/serving_budget.py){minutes_hint(value, least, PUBLISH_DEADLINE_MAX)}"
        )
    return value


def address_timeout(value: Any) -> Any:
    # The Gateway's pulumi.com/timeoutSeconds (k8s/inference_gateway.py): Pulumi's await annotation
    # counts seconds. The range's floor stays the schema's; below it, say the unit.
    if _number(value) and value < ADDRESS_TIMEOUT_MIN:
        raise ValueError(
            f"{value} s is too short for GKE to program the Gateway: allowed are {ADDRESS_TIMEOUT_MIN} to "
            f"{ADDRESS_TIMEOUT_MAX} s{minutes_hint(value, ADDRESS_TIMEOUT_MIN, ADDRESS_TIMEOUT_MAX)}"
        )
    return value


# --- tokens given in thousands --------------------------------------------------------------------

TOKENS_MIN = 256  # the floor of maxModelLen, maxNumBatchedTokens and contextLength (settings/vllm.py)
TOKENS_MAX = 1_048_576


def tokens(value: Any) -> Any:
    # vLLM's --max-model-len and --max-num-batched-tokens count tokens. Its command line also reads a
    # suffix ("32k", human_readable_int, in vllm/engine/arg_utils.py or vllm/utils/argparse_utils.py by
    # release, with k and K or Ki meaning 1000 or 1024 by release), but this key is a number and
    # workloads/vllm_command.py passes it as digits. The floor, 256, is below any context a served model
    # has, so the hint speaks only for a value already refused.
    if _number(value) and value < TOKENS_MIN:
        thousands = int(value * 1024)
        hint = (
            f"; {value} looks like thousands of tokens: the key counts tokens, so {value}K is {thousands}"
            if value > 0 and TOKENS_MIN <= thousands <= TOKENS_MAX
            else ""
        )
        raise ValueError(f"{value} tokens is below {TOKENS_MIN}: allowed are {TOKENS_MIN} to {TOKENS_MAX} tokens{hint}")
    return value


# --- a fraction given as a percent, bytes given as bits -------------------------------------------


def fraction(value: Any) -> Any:
    # A share of HBM kept for the KV cache, a fraction in [0, 1): 30 is 30 %, i.e. 0.3. The model's
    # own range already refuses 1 and above; the hint says what was meant.
    if _number(value) and value >= 1:
        hint = (
            f"; {value} looks like a percent: the key is a fraction, so {value}% is {value / 100:g}"
            if value < 100
            else ""
        )
        raise ValueError(f"{value} is not a fraction of HBM: allowed are 0 to below 1 (0.3 keeps 30%){hint}")
    return value


BYTES_PER_PARAMETER_MAX = 8


def bytes_per_parameter(value: Any) -> Any:
    # Bytes a weight takes: 1 for FP8/int8, 2 for bf16, 4 for fp32. Above the range's 8, a bit width
    # (16, 32, 64) is the likely slip; 8 itself stays allowed, as the range has it.
    if _number(value) and value > BYTES_PER_PARAMETER_MAX:
        hint = (
            f"; {value} looks like bits: the key counts bytes, so {value} bits is {value / 8:g}" if value <= 64 else ""
        )
        raise ValueError(
            f"{value} bytes a parameter is more than any weight format: allowed are above 0 to "
            f"{BYTES_PER_PARAMETER_MAX} bytes (1 for FP8 or int8, 2 for bf16){hint}"
        )
    return value


# --- maxModelLen against the smoke test's own requests --------------------------------------------

# pods/smoke_request.py sends, with the stack's vllm-pd smoke test on:
# - a completion and a chat of its prompt "How are you today?" with max_tokens 200 (SMOKE_MAX_TOKENS'
#   default; the Job sets neither), the chat wrapped in the model's chat template;
# - a completion of long_prompt(): the prompt grown by a filler sentence to at least PREFILL_PROMPT_BYTES
#   (2048) bytes, at most 2093 with its 12-digit nonce (tests/test_rules_waits.py computes it), with
#   max_tokens 8 (run_long_prompt_checks).
# A prompt counts at most one token a byte (a byte-level BPE token, as Qwen's and Llama 3's tokenizers
# have, or a SentencePiece piece, holds one byte or more), plus a few special tokens. vLLM refuses a
# request whose prompt tokens and max_tokens exceed max_model_len: vllm/renderers/params.py,
# `TokenizeParams._token_len_check`, raises VLLMValidationError (HTTP 400) once the prompt's tokens pass
# `max_input_tokens` = `max_total_tokens` (max_model_len) - `max_output_tokens` (the request's
# max_tokens). Read at vLLM commits 1aa021e8 and 017638d7 (the same function in both); the v0.26.0 tag's
# own commit is not in the stored index. So the smoke Job fails, and `pulumi up` after the servers came up.
SMOKE_LONG_PROMPT_MAX_BYTES = 2100
SMOKE_LONG_MAX_TOKENS = 8
SMOKE_SHORT_PROMPT_BYTES = len("How are you today?")
SMOKE_SHORT_MAX_TOKENS = 200
SMOKE_SPECIAL_TOKENS = 64  # a chat template's role markers (and a BOS): far above Qwen's dozen
SMOKE_MODEL_LEN_MIN = max(
    SMOKE_LONG_PROMPT_MAX_BYTES + SMOKE_SPECIAL_TOKENS + SMOKE_LONG_MAX_TOKENS,
    SMOKE_SHORT_PROMPT_BYTES + SMOKE_SPECIAL_TOKENS + SMOKE_SHORT_MAX_TOKENS,
)


# --- each backend's smoke test: its own budget, and requests its server can hold -----------------

SMOKE_DEADLINE_MAX = 8 * 3600

# What each backend's smoke Job, started with its servers, waits through before the first answer
# (domain/serving_budget.py): vLLM's LeaderWorkerSets are admitted by Kueue onto a slice that must
# activate; JetStream's servers sit on fixed node pools that exist before its pods.
SMOKE_BUDGETS: dict[Backend, tuple[int, str]] = {
    Backend.VLLM_PD: (
        BUDGET.smoke_deadline_min_seconds,
        f"Kueue admission and image pull {BUDGET.admission_and_pull_seconds} s + slice activation "
        f"{BUDGET.activation_seconds} s + a leader's startup {BUDGET.startup_seconds} s: Ray "
        f"{BUDGET.ray_init_seconds} s, engine {BUDGET.engine_ready_seconds} s, "
        f"margin {BUDGET.startup_margin_seconds} s",
    ),
    Backend.JETSTREAM: (
        BUDGET.jetstream_smoke_deadline_seconds,
        f"image pull {BUDGET.admission_and_pull_seconds} s + a server's startup {BUDGET.jetstream_startup_seconds} s: "
        f"MaxText load {BUDGET.jetstream_load_seconds} s, margin {BUDGET.startup_margin_seconds} s",
    ),
}
# The least any backend's smoke test may wait: what the field alone refuses (it cannot see the backend).
SMOKE_DEADLINE_FLOOR = min(least for least, _ in SMOKE_BUDGETS.values())


def smoke_budget_problem(value: Any, backend: Backend | None) -> str | None:
    """Why `value` seconds end before `backend`'s servers can answer, or None. A backend with no smoke
    test, or None (not known), is held to the least of every backend's budget."""
    if not _number(value):
        return None
    if backend in SMOKE_BUDGETS:
        least, why = SMOKE_BUDGETS[backend]
        allowed = f"allowed are {least} to {SMOKE_DEADLINE_MAX} s for {backend.value} ({why}"
    else:
        least = SMOKE_DEADLINE_FLOOR
        sums = "; ".join(f"{b.value} from {figure} s: {why}" for b, (figure, why) in SMOKE_BUDGETS.items())
        allowed = f"allowed are {least} to {SMOKE_DEADLINE_MAX} s, by backend ({sums}"
    if value >= least:
        return None
    return (
        f"{value} s ends before the servers can answer: {allowed}; domain/serving_budget.py)"
        f"{minutes_hint(value, least, SMOKE_DEADLINE_MAX)}"
    )


# pods/smoke_request.py with --api jetstream sends one request, POST /generate {"prompt": "How are you
# today?", "max_tokens": 200} (the Job sets neither). Against the pinned engine (JetStream v0.2.2,
# MaxText tag jetstream-v0.2.2, domain/maxtext_models.py), nothing refuses a request too long:
# - the prompt, with a BOS, is padded to a prefill bucket, and one longer than maxPrefillPredictLength
#   keeps only its last tokens (JetStream jetstream/engine/token_utils.py `pad_tokens`, "Take the last
#   N tokens if we have too many"): the model answers a prompt it was not sent;
# - generation stops once a slot's generated count passes max_tokens (token_utils.py
#   `process_result_tokens`, `slot_lengths > slot_max_length`, the count being MaxEngine's
#   `generated_tokens`, MaxText/maxengine.py `generate`), so 201 steps, each writing one token into the
#   autoregressive KV cache of maxTargetLength - maxPrefillPredictLength tokens, whose index wraps
#   (MaxText/layers/attentions.py `update_ar_key_value` caller: `jnp.mod(cache_ar_index + 1, ...)`):
#   past it, new tokens overwrite the earliest, the answer is still HTTP 200, and the smoke test passes
#   on a corrupted context instead of proving the server.
JETSTREAM_SMOKE_GENERATED = SMOKE_SHORT_MAX_TOKENS + 1
JETSTREAM_SMOKE_PREFILL = SMOKE_SHORT_PROMPT_BYTES + 1  # at most one token a byte, and the BOS


def _jetstream_smoke_problems(config: StackConfig) -> list[str]:
    jet = config.serving.jetstream
    problems = []
    if jet.max_prefill_predict_length < JETSTREAM_SMOKE_PREFILL:
        problems.append(
            f"serving.jetstream.maxPrefillPredictLength {jet.max_prefill_predict_length} tokens may not hold the "
            f"smoke test's prompt ({SMOKE_SHORT_PROMPT_BYTES} bytes, at most one token each, and a BOS): JetStream "
            "keeps only a longer prompt's last tokens (jetstream/engine/token_utils.py pad_tokens); allowed: at "
            f"least {JETSTREAM_SMOKE_PREFILL}, or serving.smokeTest.enabled false"
        )
    generated = jet.max_target_length - jet.max_prefill_predict_length
    if generated < JETSTREAM_SMOKE_GENERATED:
        least = jet.max_prefill_predict_length + JETSTREAM_SMOKE_GENERATED
        problems.append(
            f"serving.jetstream.maxTargetLength {jet.max_target_length} leaves {generated} generated tokens after "
            f"maxPrefillPredictLength {jet.max_prefill_predict_length}, fewer than the {JETSTREAM_SMOKE_GENERATED} "
            f"the smoke test's request decodes (max_tokens {SMOKE_SHORT_MAX_TOKENS}, pods/smoke_request.py): "
            "MaxText's decode cache wraps and the answer comes from an overwritten context "
            "(MaxText/layers/attentions.py, tag jetstream-v0.2.2); allowed: at least "
            f"{least} (maxPrefillPredictLength {jet.max_prefill_predict_length} + {JETSTREAM_SMOKE_GENERATED}), "
            "or serving.smokeTest.enabled false"
        )
    return problems


def _vllm_smoke_problems(config: StackConfig) -> list[str]:
    serving = config.serving
    length = serving.vllm.max_model_len
    if length >= SMOKE_MODEL_LEN_MIN:
        return []
    arch = serving.model.architecture
    most = arch.context_length if arch is not None else TOKENS_MAX
    return [
        f"serving.vllm.maxModelLen {length} tokens cannot hold the smoke test's long request: up to "
        f"{SMOKE_LONG_PROMPT_MAX_BYTES} prompt bytes (at most one token each, plus {SMOKE_SPECIAL_TOKENS} "
        f"special) and {SMOKE_LONG_MAX_TOKENS} completion tokens (pods/smoke_request.py long_prompt); vLLM "
        f"refuses it and the smoke test fails `pulumi up`; allowed: {SMOKE_MODEL_LEN_MIN} to {most} tokens, "
        "or serving.smokeTest.enabled false"
    ]


def check_smoke_fits(config: StackConfig) -> None:
    """The smoke test, when on: its deadline outlasts its backend's own start, and its requests fit."""
    serving = config.serving
    if not serving.smoke_test.enabled:
        return
    problems = []
    # The field judged it already when the loader told it the backend; not when validated without it.
    late = smoke_budget_problem(serving.smoke_test.deadline_seconds, serving.backend)
    if late:
        problems.append(f"serving.smokeTest.deadlineSeconds: {late}")
    if serving.backend is Backend.VLLM_PD:
        problems += _vllm_smoke_problems(config)
    elif serving.backend is Backend.JETSTREAM:
        problems += _jetstream_smoke_problems(config)
    if len(problems) == 1:
        raise ValueError(problems[0])
    if problems:
        raise ProblemsError(problems)


REFUSED: tuple[RefusedClass, ...] = (
    RefusedClass(
        "Saxml publish deadline shorter than a model server's start",
        publish_deadline,
        {"serving": {"saxml": {"publishDeadlineSeconds": 600}}},
        "serving.saxml.publishDeadlineSeconds",
        "allowed are 2400 to 21600 s",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "Saxml publish deadline given in minutes",
        publish_deadline,
        {"serving": {"saxml": {"publishDeadlineSeconds": 60}}},
        "serving.saxml.publishDeadlineSeconds",
        "60 minutes is 3600 s",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "gateway address timeout given in minutes",
        address_timeout,
        {"serving": {"gateway": {"addressTimeoutSeconds": 20}}},
        "serving.gateway.addressTimeoutSeconds",
        "20 minutes is 1200 s",
    ),
    RefusedClass(
        "maxModelLen given in thousands of tokens",
        tokens,
        {"serving": {"vllm": {"maxModelLen": 8}}},
        "serving.vllm.maxModelLen",
        "8K is 8192",
    ),
    RefusedClass(
        "maxNumBatchedTokens given in thousands of tokens",
        tokens,
        {"serving": {"vllm": {"maxNumBatchedTokens": 16}}},
        "serving.vllm.maxNumBatchedTokens",
        "16K is 16384",
    ),
    RefusedClass(
        "KV-cache headroom given as a percent",
        fraction,
        {"serving": {"model": {"kvCacheHeadroom": 30}}},
        "serving.model.kvCacheHeadroom",
        "30% is 0.3",
    ),
    RefusedClass(
        "bytes per parameter given in bits",
        bytes_per_parameter,
        {"serving": {"model": {"bytesPerParameter": 16}}},
        "serving.model.bytesPerParameter",
        "16 bits is 2",
        stack="saxml-v5e",
    ),
    RefusedClass(
        "JetStream maxTargetLength below the smoke test's own request",
        check_smoke_fits,
        {"serving": {"jetstream": {"maxPrefillPredictLength": 1024, "maxTargetLength": 1100}}},
        "serving.jetstream.maxTargetLength",
        "allowed: at least 1225",
        stack="jetstream-v5e",
    ),
    RefusedClass(
        "JetStream maxPrefillPredictLength below the smoke test's prompt",
        check_smoke_fits,
        {"serving": {"jetstream": {"maxPrefillPredictLength": 16}}},
        "serving.jetstream.maxPrefillPredictLength",
        f"allowed: at least {JETSTREAM_SMOKE_PREFILL}",
        stack="jetstream-v5e",
    ),
    RefusedClass(
        "maxModelLen below the smoke test's own request",
        check_smoke_fits,
        {"serving": {"vllm": {"maxModelLen": 2048}}},
        "serving.vllm.maxModelLen",
        f"allowed: {SMOKE_MODEL_LEN_MIN} to 262144 tokens",
    ),
)
