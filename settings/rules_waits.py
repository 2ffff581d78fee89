"""Waits and units: a timeout outlasts the work it watches, a value is read in the unit its key names,
and vLLM's context holds the program's own smoke requests.

Guards `serving.saxml.publishDeadlineSeconds` (at least what the publish Job watches:
domain/serving_budget.py), `serving.vllm.maxModelLen` against the smoke test's longest request
(pods/smoke_request.py), and the keys where a unit slip is plausible: seconds given in minutes,
tokens given in thousands, a fraction given as a percent, bytes given as bits. A unit hint is only
said for a value the key's own range already refuses, so no value a deployment uses is refused for
looking like a slip; it turns "Input should be less than 1" into what was meant.
`serving.smokeTest.deadlineSeconds`'s budget rule is settings/rules_serving.py's (`smoke_deadline`),
which says the same minutes hint through `minutes_hint` here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from domain.serving_budget import BUDGET
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
# request whose prompt tokens and max_tokens exceed max_model_len (vllm v0.26.0, the OpenAI server's
# input check: "You passed N input tokens and requested M output tokens. However, the model's context
# length is only ..."), so the smoke Job fails and with it `pulumi up`, after the servers came up.
SMOKE_LONG_PROMPT_MAX_BYTES = 2100
SMOKE_LONG_MAX_TOKENS = 8
SMOKE_SHORT_PROMPT_BYTES = len("How are you today?")
SMOKE_SHORT_MAX_TOKENS = 200
SMOKE_SPECIAL_TOKENS = 64  # a chat template's role markers (and a BOS): far above Qwen's dozen
SMOKE_MODEL_LEN_MIN = max(
    SMOKE_LONG_PROMPT_MAX_BYTES + SMOKE_SPECIAL_TOKENS + SMOKE_LONG_MAX_TOKENS,
    SMOKE_SHORT_PROMPT_BYTES + SMOKE_SPECIAL_TOKENS + SMOKE_SHORT_MAX_TOKENS,
)


def check_smoke_fits(config: StackConfig) -> None:
    serving = config.serving
    if serving.backend is not Backend.VLLM_PD or not serving.smoke_test.enabled:
        return
    length = serving.vllm.max_model_len
    if length < SMOKE_MODEL_LEN_MIN:
        arch = serving.model.architecture
        most = arch.context_length if arch is not None else TOKENS_MAX
        raise ValueError(
            f"serving.vllm.maxModelLen {length} tokens cannot hold the smoke test's long request: up to "
            f"{SMOKE_LONG_PROMPT_MAX_BYTES} prompt bytes (at most one token each, plus {SMOKE_SPECIAL_TOKENS} "
            f"special) and {SMOKE_LONG_MAX_TOKENS} completion tokens (pods/smoke_request.py long_prompt); vLLM "
            f"refuses it and the smoke test fails `pulumi up`; allowed: {SMOKE_MODEL_LEN_MIN} to {most} tokens, "
            "or serving.smokeTest.enabled false"
        )


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
        "maxModelLen below the smoke test's own request",
        check_smoke_fits,
        {"serving": {"vllm": {"maxModelLen": 2048}}},
        "serving.vllm.maxModelLen",
        f"allowed: {SMOKE_MODEL_LEN_MIN} to 262144 tokens",
    ),
)
