"""Smoke-test an OpenAI-compatible LLM endpoint (vLLM behind an internal GKE Gateway), or JetStream's
HTTP front (``--api jetstream``, below).

Shipped inside a ConfigMap and run as a Kubernetes Job on a stock
``python:3.12-slim`` image, so this file must stay self-contained: standard
library only, and one sibling file, ``slice_watch.py``, loaded from the same
directory only when SMOKE_SLICE_CHECK is set. A failing run fails the Job, and
with it ``pulumi up``.

With SMOKE_SLICE_CHECK (disaggregated serving on dynamic slices), the waits
between attempts also read the serving LeaderWorkerSets' Kueue Workloads every
few seconds: a TPU slice that failed to come up (its admission check answered
Retry or Rejected) stops the test at once, naming the Workload and quoting what
Kueue recorded (slice_watch.py says what it reads and why).

Two requests, one after the other, each retried until it works or the shared
deadline passes:

  POST <base>/v1/completions       {"model", "prompt", "max_tokens"}
  POST <base>/v1/chat/completions  {"model", "messages": [user prompt], "max_tokens"}

Success means HTTP 200 with a JSON body of the expected shape:

  * completions: ``choices[0].text`` is a string;
  * chat: ``choices[0].message.content`` is a string, or it is null while
    ``choices[0].message.reasoning_content`` (or ``.reasoning``) is a string.
    Reasoning models served with vLLM's ``--reasoning-parser`` put their
    thinking there and may spend all of ``max_tokens`` thinking, which still
    proves the model generates.

Retried (the stack is still coming up, or a hiccup): connection errors,
timeouts, 5xx, 429, 408, 404 without a vLLM "model does not exist" body
(the Gateway route is not programmed yet), a 200 that is not JSON or not of
the expected shape. Not retried, because waiting cannot fix them: other 4xx
(e.g. 400 for a bad request) and a 404 whose JSON body says the model does not
exist (vLLM's answer to a wrong ``--model``), and 3xx (redirects are not
followed: urllib would turn the POST into a GET; fix ``--base-url`` instead).

Logs go to stderr, one line per attempt; stdout gets exactly one JSON line:
{"ok", "base_url", "model", "error", "results": [{"endpoint", "ok",
"attempts", "status", "seconds", "error", "sample"}]}. The ``kv_transfer``
entry (below) has two more keys, "before" and "after", each an object of the
decode leaders' figures read around its last attempt's completion (null where
not read), keyed
``vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}``,
``vllm:prompt_tokens_by_source_total{source="local_compute"}``,
``vllm:tpu_kv_transfer_time_ms_count`` and ``vllm:tpu_num_failed_transfers_total``;
a figure is null when some decode leader lacks its series (the failed-transfer
counter then counts 0).

With ``--prefill-metrics-url`` (disaggregated serving), a third check proves that a prefill pod
did the prefill: it sums ``vllm:prompt_tokens_total`` over every address of the URL's host (a
headless Service of the prefill leaders), sends one more completion with a long prompt no cache
has seen, and requires the sum to rise. Without it, decode can answer alone and unreachable
prefill pods would still pass; it does not show that the KV cache reached decode (that is
``--decode-metrics-url``'s check, below). The prompt is long on purpose: llm-d's
decider sends a prompt to prefill from 16 uncached tokens, and the endpoint picker estimates 4
bytes a token (llm-d-router v0.9.0, pkg/epp/.../tokenizer/estimate.go), so a short greeting is
decoded without any prefill.

With ``--decode-metrics-url`` (a headless Service of the decode leaders' vLLM metrics), the same
long-prompt completion must also have brought its KV cache to decode. Summed over every address of
that host and every label set (``model_name``, ``engine``):

  * required to rise: vLLM's ``vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}``,
    the prompt tokens decode's scheduler took from the KV connector instead of computing them. When
    llm-d's routing sidecar falls back to decode-only (prefill answered 5xx) or no KV moves, decode
    computes the prompt itself: ``source="local_compute"`` rises instead, and the error shows it;
  * required to stay flat (absent counts as 0): tpu-inference's ``vllm:tpu_num_failed_transfers_total``.
    The pinned connector, TPUConnectorHMA, never increments it; it guards the non-HMA TPUConnector;
  * only reported: ``vllm:tpu_kv_transfer_time_ms_count``. TPUConnectorHMA never observes that
    histogram either, so with it the count stays 0 however many pulls succeed.

A rising prompt-token counter on prefill does not prove the transfer: prefill can compute the prompt
and decode compute it again, as when the sidecar falls back to decode-only. The result entry is
named ``kv_transfer``. A flat external count is retried (new completion) until the deadline, after
polling the decode metrics for up to DECODE_SETTLE_SECONDS in case the stats arrive late (the poll
ends early once decode's counters show the prompt computed locally); a failed-transfer counter that
rose, or an external-transfer series missing after the completion (that is not vLLM v0.26.0's
/metrics), fails at once. What the check cannot see: a TPUConnectorHMA pull that times out is only
logged (decode's scheduler had already counted its tokens as external, and the request goes on), and
tpu-inference reports no load errors to vLLM (no get_block_ids_with_load_errors). Either flag alone
runs its own check; both share each completion.

With ``--api jetstream`` (JetStream's ``jetstream-http`` front instead of vLLM), one request
replaces the two above, retried the same way:

  POST <base>/generate  {"prompt", "max_tokens"}

and success means HTTP 200 with a JSON body whose ``response`` is a string. That is the pinned
image's API: ``jetstream-http:v0.2.3`` is built from GoogleCloudPlatform/ai-on-gke
tutorials-and-examples/inference-servers/jetstream/http-server (Dockerfile: uvicorn
``http_server:app`` on port 8000; http_server.py: ``GenerateRequest`` with ``prompt`` and
``max_tokens``, ``POST /generate`` answering ``{"response": <text>}``, any failure of the gRPC call
to the engine on 127.0.0.1:9000 an HTTP 500 ``{"detail": ...}``), and GKE's JetStream + Pathways
tutorial sends exactly that request (``curl ... /generate --data '{"prompt": ..., "max_tokens":
200}'``, answer ``{"response": ...}``). JetStream's own experimental server
(jetstream/entrypoints/http/api_server.py: ``POST /v1/generate``, port 8080) is not what that image
runs. The model is not part of the request (``--model`` is optional and only reported), a 500 is
retried (the engine behind the front is still loading), and the long-prompt checks do not apply.

Exit codes: 0 every check passed, 1 a check failed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import importlib.util
import json
import math
import os
import random
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn, TextIO

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

COMPLETIONS_PATH = "/v1/completions"
CHAT_PATH = "/v1/chat/completions"
# The APIs this program speaks: vLLM's OpenAI-compatible one, and JetStream's jetstream-http front.
OPENAI_API = "openai"
JETSTREAM_API = "jetstream"
APIS = (OPENAI_API, JETSTREAM_API)
JETSTREAM_GENERATE_PATH = "/generate"
PREFILL_CHECK = "prefill"
KV_TRANSFER_CHECK = "kv_transfer"
PROMPT_TOKENS_METRIC = "vllm:prompt_tokens_total"
# Names and labels, from upstream:
# - vllm-project/vllm@v0.26.0:vllm/v1/metrics/loggers.py (PrometheusStatLogger, ~680-693) registers Counter
#   "vllm:prompt_tokens_by_source" with labelnames ["model_name", "engine", "source"], one child per engine and
#   source made at start-up, and (~1195-1200) increments each by PromptTokenStats.get_by_source; vllm/v1/metrics/
#   stats.py (PromptTokenStats, ~300-345) has the sources "local_compute", "local_cache_hit" and
#   "external_kv_transfer" (computed + local_cache_hit + external_kv_transfer = total), the last fed by
#   PrefillStats.num_external_cached_tokens, which vllm/v1/core/sched/scheduler.py (~760-815) sets from the
#   connector's get_num_new_matched_tokens when it first schedules the request. On decode that is the prompt
#   loaded from the remote prefill (tpu-inference@v0.26.0:tpu_inference/distributed/tpu_connector_hma.py,
#   TPUConnectorHMAScheduler.get_num_new_matched_tokens: every prompt token not cached locally).
# - vllm-project/tpu-inference@v0.26.0:tpu_inference/distributed/tpu_connector_stats.py (TpuKVConnectorPromMetrics)
#   registers Histogram "vllm:tpu_kv_transfer_time_ms" and Counter "vllm:tpu_num_failed_transfers", handed
#   prometheus_client's classes and the labelnames ["model_name", "engine"] by vllm-project/vllm@v0.26.0:vllm/
#   distributed/kv_transfer/kv_connector/v1/metrics.py (KVConnectorProm). Only the non-HMA
#   TPUConnectorWorker._pull_kv (tpu_connector.py, ~857-870) records them (record_successful_transfer /
#   record_failed_transfer); TPUConnectorHMAWorker._pull_kv (tpu_connector_hma.py:434-487), which this project
#   runs, overrides it and only logs (TransferStats.increment_pull, transfer_stats.py), so under HMA both stay 0.
# prometheus_client writes a counter's sample as <name>_total and a histogram's count as <name>_count.
PROMPT_TOKENS_BY_SOURCE_METRIC = "vllm:prompt_tokens_by_source_total"
EXTERNAL_KV_SOURCE = "external_kv_transfer"
LOCAL_COMPUTE_SOURCE = "local_compute"
EXTERNAL_KV_SERIES = f'{PROMPT_TOKENS_BY_SOURCE_METRIC}{{source="{EXTERNAL_KV_SOURCE}"}}'
LOCAL_COMPUTE_SERIES = f'{PROMPT_TOKENS_BY_SOURCE_METRIC}{{source="{LOCAL_COMPUTE_SOURCE}"}}'
# Required to rise (vllm@v0.26.0 vllm/v1/metrics/loggers.py and stats.py, above): EXTERNAL_KV_SERIES.
# Reported, never judged: TPUConnectorHMA does not observe this histogram (tpu_connector_hma.py:434-487).
KV_TRANSFER_COUNT_METRIC = "vllm:tpu_kv_transfer_time_ms_count"
# Must stay flat (tpu-inference@v0.26.0:tpu_inference/distributed/tpu_connector_stats.py). TPUConnectorHMA never
# increments it (tpu_connector_hma.py:434-487), so it guards the non-HMA TPUConnector only.
KV_FAILED_TRANSFERS_METRIC = "vllm:tpu_num_failed_transfers_total"
# The engine's stats reach the API server's /metrics apart from the answer and can land just after it;
# poll this long (clipped to the deadline) before calling the external-transfer count flat.
DECODE_SETTLE_SECONDS = 5.0
DECODE_POLL_SECONDS = 0.5
# Far above the decider's 16 uncached tokens at 4 bytes a token, well within any context.
PREFILL_PROMPT_BYTES = 2048

# Each wait is stretched by up to this fraction of itself. Upward only, so the
# documented schedule is a lower bound and the schedule stays monotone.
JITTER_FRACTION = 0.1
SAMPLE_CHARS = 200
SNIPPET_CHARS = 200
# How often the waits between attempts ask the slice watch (slice_watch.py).
WATCH_SECONDS = 5.0
# vLLM answers are small; a cap keeps a misbehaving proxy from eating memory.
MAX_BODY_BYTES = 1024 * 1024
# 2.0 ** 1024 raises OverflowError; far beyond any cap anyway.
_MAX_EXPONENT = 1023

# 4xx that mean "not yet" rather than "never": 404 while the Gateway route or
# the backend is not programmed, 408 request timeout, 425 too early, 429 busy.
RETRYABLE_4XX = frozenset({404, 408, 425, 429})


class UsageError(Exception):
    """A bad flag or env value: reported with exit code 2."""


class SliceFailureError(Exception):
    """The slice watch found a slice that failed to come up: the test stops (exit code 1)."""


# --------------------------------------------------------------------------
# Backoff schedule.
# --------------------------------------------------------------------------


def backoff_base(attempt: int, initial: float, cap: float) -> float:
    """Wait after the ``attempt``-th failure (1-based) before jitter: initial * 2**(attempt-1), capped."""
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    return min(cap, initial * 2.0 ** min(attempt - 1, _MAX_EXPONENT))


def backoff_delay(attempt: int, initial: float, cap: float, jitter: float) -> float:
    """:func:`backoff_base` stretched by ``jitter`` (a draw in [0, 1]) times JITTER_FRACTION, capped.

    The result lies in [base, min(cap, base * (1 + JITTER_FRACTION))]. As the
    base doubles each time while jitter adds at most 10 %, the sequence is
    non-decreasing whatever the draws.
    """
    jitter = min(1.0, max(0.0, jitter))
    return min(cap, backoff_base(attempt, initial, cap) * (1.0 + JITTER_FRACTION * jitter))


# --------------------------------------------------------------------------
# Command line.
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Settings:
    base_url: str
    model: str
    deadline_seconds: float
    request_timeout_seconds: float
    initial_backoff_seconds: float
    max_backoff_seconds: float
    prompt: str
    max_tokens: int
    prefill_metrics_url: str | None = None
    decode_metrics_url: str | None = None
    api: str = OPENAI_API


class _Parser(argparse.ArgumentParser):
    """Raise instead of exiting so main() can still print the JSON line."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _env(env: Mapping[str, str], name: str) -> str | None:
    # An empty env var (e.g. an unset Kubernetes value) means "not given".
    value = env.get(name, "")
    return value if value.strip() else None


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="smoke_request.py",
        description="Smoke-test an OpenAI-compatible LLM endpoint: POST /v1/completions and "
        "/v1/chat/completions, retrying with exponential backoff until both answer or the "
        "deadline passes. Each flag falls back to the env var named in its help; the flag wins. "
        "Exit codes: 0 ok, 1 an endpoint failed, 2 bad arguments.",
    )

    def add(flag: str, env_name: str, help_text: str, default: str | None = None) -> None:
        value = _env(env, env_name)
        parser.add_argument(
            flag,
            default=value if value is not None else default,
            help=f"{help_text} (env {env_name}" + (f"; default {default})" if default else ")"),
        )

    add("--base-url", "SMOKE_BASE_URL", "http(s) URL of the server without /v1, e.g. http://10.10.0.100; required")
    add(
        "--api",
        "SMOKE_API",
        f"the server's API: {OPENAI_API} (vLLM: /v1/completions and /v1/chat/completions) or {JETSTREAM_API} "
        "(jetstream-http: POST /generate)",
        OPENAI_API,
    )
    add(
        "--model",
        "SMOKE_MODEL",
        f"served model name, e.g. Qwen/Qwen3.5-397B-A17B-FP8; required for --api {OPENAI_API}, only reported for "
        f"{JETSTREAM_API}",
    )
    # A 397B model can take tens of minutes to load, hence the generous default.
    add("--deadline-seconds", "SMOKE_DEADLINE_SECONDS", "overall time limit for both endpoints", "3600")
    add("--request-timeout-seconds", "SMOKE_REQUEST_TIMEOUT_SECONDS", "timeout of one request", "300")
    add("--initial-backoff-seconds", "SMOKE_INITIAL_BACKOFF_SECONDS", "first wait between attempts", "5")
    add("--max-backoff-seconds", "SMOKE_MAX_BACKOFF_SECONDS", "longest wait between attempts", "60")
    add("--prompt", "SMOKE_PROMPT", "prompt sent to both endpoints", "How are you today?")
    add("--max-tokens", "SMOKE_MAX_TOKENS", "max_tokens of both requests", "200")
    add(
        "--prefill-metrics-url",
        "SMOKE_PREFILL_METRICS_URL",
        "http URL of the prefill leaders' /metrics (a headless Service); when set, also prove a prefill happened",
    )
    add(
        "--decode-metrics-url",
        "SMOKE_DECODE_METRICS_URL",
        "http URL of the decode leaders' vLLM /metrics (a headless Service); when set, also prove the KV cache "
        'moved: vllm:prompt_tokens_by_source_total{source="external_kv_transfer"} rises, '
        "vllm:tpu_num_failed_transfers_total stays flat",
    )
    return parser


def _positive_float(value: str, name: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise UsageError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number) or number <= 0:
        raise UsageError(f"{name} must be > 0, got {value!r}")
    return number


def _positive_int(value: str, name: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise UsageError(f"{name} must be an integer, got {value!r}") from None
    if number < 1:
        raise UsageError(f"{name} must be >= 1, got {number}")
    return number


def validate_base_url(text: str) -> str:
    """Return the base URL without trailing slashes, or raise UsageError."""
    url = text.strip().rstrip("/")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--base-url/SMOKE_BASE_URL must be an http:// or https:// URL with a host, got {text!r}")
    try:
        parts.port  # noqa: B018 - urllib only validates the port on access
    except ValueError as exc:
        raise UsageError(f"--base-url/SMOKE_BASE_URL has a bad port: {exc}") from None
    if parts.query or parts.fragment or any(c.isspace() for c in url):
        raise UsageError(f"--base-url/SMOKE_BASE_URL must not contain a query, fragment or spaces, got {text!r}")
    if parts.username or parts.password:
        # The URL is echoed in logs and the summary; credentials do not belong there.
        raise UsageError("--base-url/SMOKE_BASE_URL must not contain credentials")
    if parts.path.endswith("/v1"):
        # Otherwise every request would go to /v1/v1/... and 404 (retried) until the deadline.
        raise UsageError(
            f"--base-url/SMOKE_BASE_URL must not end in /v1 (the /v1/... paths are appended), got {text!r}"
        )
    return url


def parse_settings(argv: Sequence[str] | None, env: Mapping[str, str]) -> Settings:
    """Parse flags (falling back to env vars) into validated :class:`Settings`."""
    ns = build_parser(env).parse_args(argv)
    if ns.base_url is None:
        raise UsageError("--base-url/SMOKE_BASE_URL is required")
    api = str(ns.api).strip()
    if api not in APIS:
        raise UsageError(f"--api/SMOKE_API must be one of {', '.join(APIS)}, got {ns.api!r}")
    if api == OPENAI_API and (ns.model is None or not ns.model.strip()):
        raise UsageError("--model/SMOKE_MODEL is required")
    if api == JETSTREAM_API and (ns.prefill_metrics_url is not None or ns.decode_metrics_url is not None):
        raise UsageError(
            f"--prefill-metrics-url and --decode-metrics-url check vLLM's disaggregated serving; not with --api {api}"
        )
    if not ns.prompt:
        raise UsageError("--prompt/SMOKE_PROMPT must not be empty")
    initial = _positive_float(ns.initial_backoff_seconds, "--initial-backoff-seconds/SMOKE_INITIAL_BACKOFF_SECONDS")
    cap = _positive_float(ns.max_backoff_seconds, "--max-backoff-seconds/SMOKE_MAX_BACKOFF_SECONDS")
    if cap < initial:
        raise UsageError(f"--max-backoff-seconds ({cap:g}) must be >= --initial-backoff-seconds ({initial:g})")
    return Settings(
        base_url=validate_base_url(ns.base_url),
        model=(ns.model or "").strip(),
        deadline_seconds=_positive_float(ns.deadline_seconds, "--deadline-seconds/SMOKE_DEADLINE_SECONDS"),
        request_timeout_seconds=_positive_float(
            ns.request_timeout_seconds, "--request-timeout-seconds/SMOKE_REQUEST_TIMEOUT_SECONDS"
        ),
        initial_backoff_seconds=initial,
        max_backoff_seconds=cap,
        prompt=ns.prompt,
        max_tokens=_positive_int(ns.max_tokens, "--max-tokens/SMOKE_MAX_TOKENS"),
        prefill_metrics_url=(
            validate_metrics_url(ns.prefill_metrics_url) if ns.prefill_metrics_url is not None else None
        ),
        decode_metrics_url=(
            validate_metrics_url(ns.decode_metrics_url, "--decode-metrics-url/SMOKE_DECODE_METRICS_URL")
            if ns.decode_metrics_url is not None
            else None
        ),
        api=api,
    )


def validate_metrics_url(text: str, name: str = "--prefill-metrics-url/SMOKE_PREFILL_METRICS_URL") -> str:
    url = urllib.parse.urlsplit(text.strip())
    try:
        port = url.port
    except ValueError:
        port = None
    if url.scheme != "http" or not url.hostname or not port:
        raise UsageError(f"{name} must be http://host:port/path, got {text!r}")
    return text.strip()


# --------------------------------------------------------------------------
# HTTP.
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Response:
    """One attempt's outcome: an HTTP status and body, or a transport error."""

    status: int | None
    body: bytes = b""
    error: str | None = None


Post = Callable[[str, bytes, float], Response]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Surface 3xx as an HTTPError: following it would turn the POST into a GET."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


# No proxies: the Gateway is an in-cluster / VPC address, and an inherited
# HTTP(S)_PROXY env var would route the test somewhere else.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


def _describe_transport_error(exc: BaseException, timeout: float) -> str:
    reason: object = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, TimeoutError):
        return f"timed out after {timeout:g}s"
    if isinstance(reason, BaseException):
        return f"{type(reason).__name__}: {reason}"
    return f"connection error: {reason}"


def http_post(url: str, body: bytes, timeout: float) -> Response:
    """POST JSON; HTTP errors are responses, network failures become ``error``."""
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "tpu-smoke-test"},
    )
    try:
        with _OPENER.open(request, timeout=timeout) as reply:
            return Response(status=reply.status, body=reply.read(MAX_BODY_BYTES))
    except urllib.error.HTTPError as exc:  # before URLError: it is a subclass
        try:
            error_body = exc.read(MAX_BODY_BYTES)
        except (OSError, http.client.HTTPException):
            error_body = b""
        return Response(status=exc.code, body=error_body)
    except (OSError, http.client.HTTPException) as exc:  # URLError, refused, reset, timeout, bad status line
        return Response(status=None, error=_describe_transport_error(exc, timeout))


# --------------------------------------------------------------------------
# Judging responses.
# --------------------------------------------------------------------------


def resolve_all(host: str, port: int) -> list[str]:
    """Every address of a host: a headless Service resolves to one per ready pod."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


def http_get(url: str, timeout: float) -> Response:
    request = urllib.request.Request(url, method="GET")
    try:
        with _OPENER.open(request, timeout=timeout) as reply:
            return Response(status=reply.status, body=reply.read())
    except urllib.error.HTTPError as exc:
        return Response(status=exc.code, body=exc.read() or b"")
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        return Response(status=None, body=b"", error=_describe_transport_error(exc, timeout))


def _first_choice(doc: Any) -> dict[str, Any] | None:
    if not isinstance(doc, dict):
        return None
    choices = doc.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    return choices[0]


def completion_text(doc: Any) -> str | None:
    """``choices[0].text`` if it is a string, else None (wrong shape)."""
    choice = _first_choice(doc)
    text = choice.get("text") if choice else None
    return text if isinstance(text, str) else None


def chat_text(doc: Any) -> str | None:
    """``choices[0].message.content``, or the reasoning text when content is null; None if wrong shape."""
    choice = _first_choice(doc)
    message = choice.get("message") if choice else None
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    if isinstance(content, str):
        return content
    if content is None:
        # vLLM's reasoning parsers: older releases say reasoning_content, newer ones reasoning.
        for key in ("reasoning_content", "reasoning"):
            if isinstance(message.get(key), str):
                return str(message[key])
    return None


def generate_text(doc: Any) -> str | None:
    """jetstream-http's ``{"response": <text>}``: the text if it is a string, else None (wrong shape)."""
    text = doc.get("response") if isinstance(doc, dict) else None
    return text if isinstance(text, str) else None


@dataclasses.dataclass(frozen=True)
class Endpoint:
    path: str
    payload: dict[str, Any]
    text: Callable[[Any], str | None]
    shape: str  # what a good body looks like, for error messages


def endpoints(settings: Settings) -> list[Endpoint]:
    if settings.api == JETSTREAM_API:
        return [
            Endpoint(
                JETSTREAM_GENERATE_PATH,
                {"prompt": settings.prompt, "max_tokens": settings.max_tokens},
                generate_text,
                '"response" string',
            )
        ]
    return [
        Endpoint(
            COMPLETIONS_PATH,
            {"model": settings.model, "prompt": settings.prompt, "max_tokens": settings.max_tokens},
            completion_text,
            "choices[0].text string",
        ),
        Endpoint(
            CHAT_PATH,
            {
                "model": settings.model,
                "messages": [{"role": "user", "content": settings.prompt}],
                "max_tokens": settings.max_tokens,
            },
            chat_text,
            "choices[0].message.content string",
        ),
    ]


@dataclasses.dataclass(frozen=True)
class Verdict:
    ok: bool
    retry: bool
    detail: str
    sample: str | None = None


def _snippet(body: bytes) -> str:
    text = " ".join(body[: SNIPPET_CHARS * 4].decode("utf-8", "replace").split())
    return text if len(text) <= SNIPPET_CHARS else text[:SNIPPET_CHARS] + "..."


def _parse_json(body: bytes) -> tuple[bool, Any]:
    try:
        return True, json.loads(body)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return False, None


def is_unknown_model_error(body: bytes) -> bool:
    """vLLM's 404 for a wrong model name: {"message": "The model `x` does not exist.", ...}.

    Newer releases nest it under "error". A Gateway 404 (route not programmed
    yet) has no such JSON body, so it stays retryable.
    """
    parsed, doc = _parse_json(body)
    if not parsed or not isinstance(doc, dict):
        return False
    error = doc.get("error")
    message = (error if isinstance(error, dict) else doc).get("message")
    return isinstance(message, str) and "model" in message.lower() and "does not exist" in message.lower()


def is_retryable_status(status: int) -> bool:
    """Whether waiting could turn this (non-200) status into a 200."""
    if 300 <= status < 400:
        return False  # redirects are not followed; the base URL is wrong
    if 400 <= status < 500:
        return status in RETRYABLE_4XX
    return True  # 5xx: backend loading, no healthy upstream, overloaded


def judge(response: Response, endpoint: Endpoint) -> Verdict:
    """Decide whether one attempt succeeded, and if not whether to retry."""
    if response.status is None:
        return Verdict(ok=False, retry=True, detail=response.error or "no response")
    status = response.status
    if status != 200:
        detail = f"HTTP {status}: {_snippet(response.body)}"
        if status == 404 and is_unknown_model_error(response.body):
            return Verdict(ok=False, retry=False, detail=detail)
        return Verdict(ok=False, retry=is_retryable_status(status), detail=detail)
    parsed, doc = _parse_json(response.body)
    if not parsed:
        return Verdict(ok=False, retry=True, detail=f"HTTP 200 but body is not JSON: {_snippet(response.body)}")
    text = endpoint.text(doc)
    if text is None:
        return Verdict(ok=False, retry=True, detail=f"HTTP 200 but no {endpoint.shape}: {_snippet(response.body)}")
    return Verdict(ok=True, retry=False, detail="HTTP 200", sample=text[:SAMPLE_CHARS])


# --------------------------------------------------------------------------
# Retry loop.
# --------------------------------------------------------------------------


def log_stderr(message: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    print(f"{stamp} smoke_test {message}", file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class Runtime:
    """Everything with side effects or time in it, injectable so tests run fast."""

    post: Post = http_post
    get: Callable[[str, float], Response] = http_get
    resolve: Callable[[str, int], list[str]] = resolve_all
    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    rand: Callable[[], float] = random.random
    log: Callable[[str], None] = log_stderr
    # Asked between attempts: None to go on, or why the test must stop (slice_watch.SliceWatch).
    watch: Callable[[], str | None] | None = None


def pause(seconds: float, rt: Runtime) -> None:
    """Sleep ``seconds`` before the next attempt; with a watch, ask it first and then every
    WATCH_SECONDS, raising SliceFailureError as soon as it answers."""
    if rt.watch is None:
        rt.sleep(seconds)
        return
    end = rt.now() + seconds
    while True:
        reason = rt.watch()
        if reason:
            raise SliceFailureError(reason)
        left = end - rt.now()
        if left <= 0:
            return
        rt.sleep(min(left, WATCH_SECONDS))


@dataclasses.dataclass
class EndpointResult:
    endpoint: str
    ok: bool = False
    attempts: int = 0
    status: int | None = None  # of the last attempt; None if it got no HTTP response
    seconds: float = 0.0
    error: str | None = None
    sample: str | None = None


def _next_wait(attempt: int, settings: Settings, deadline_at: float, rt: Runtime) -> float | None:
    """Backoff before the next attempt, or None if that attempt would start after the deadline."""
    wait = backoff_delay(attempt, settings.initial_backoff_seconds, settings.max_backoff_seconds, rt.rand())
    return wait if wait < deadline_at - rt.now() else None


def run_endpoint(endpoint: Endpoint, settings: Settings, deadline_at: float, rt: Runtime) -> EndpointResult:
    """Attempt ``endpoint`` until it succeeds, fails for good, or the deadline passes."""
    result = EndpointResult(endpoint=endpoint.path)
    started = rt.now()
    url = settings.base_url + endpoint.path
    body = json.dumps(endpoint.payload).encode()
    while (remaining := deadline_at - rt.now()) > 0:
        result.attempts += 1
        # Never let one request outlive the deadline.
        response = rt.post(url, body, min(settings.request_timeout_seconds, remaining))
        verdict = judge(response, endpoint)
        result.status = response.status
        prefix = f"{endpoint.path} attempt {result.attempts}: {verdict.detail}"
        if verdict.ok:
            result.ok, result.error, result.sample = True, None, verdict.sample
            rt.log(f"{prefix}; ok, sample {(verdict.sample or '')[:60]!r}")
            break
        if not verdict.retry:
            result.error = f"{verdict.detail} (not retried: retrying cannot fix this)"
            rt.log(f"{prefix}; not retrying, retrying cannot fix this")
            break
        wait = _next_wait(result.attempts, settings, deadline_at, rt)
        result.error = f"{verdict.detail} (deadline of {settings.deadline_seconds:g}s passed)"
        if wait is None:
            rt.log(f"{prefix}; giving up, the next attempt would start after the deadline")
            break
        rt.log(f"{prefix}; next attempt in {wait:.1f}s ({deadline_at - rt.now():.0f}s left)")
        pause(wait, rt)
    if result.attempts == 0:
        result.error = f"deadline of {settings.deadline_seconds:g}s passed before the first attempt"
        rt.log(f"{endpoint.path}: {result.error}")
    result.seconds = round(rt.now() - started, 3)
    return result


def run_smoke_test(settings: Settings, rt: Runtime) -> list[EndpointResult]:
    """Both endpoints in order, sharing one deadline, then the long-prompt checks when asked for.

    Completions goes first and absorbs the model's load time; chat then
    normally answers at once. A failed completions does not skip chat: its
    result still tells a wrong model name (fast failure) from a dead server.
    The long-prompt checks send completions too, so after a failed endpoint
    they could only fail, at the deadline: they are not run.
    """
    deadline_at = rt.now() + settings.deadline_seconds
    results = [run_endpoint(endpoint, settings, deadline_at, rt) for endpoint in endpoints(settings)]
    failed = [r.endpoint for r in results if not r.ok]
    if failed and (settings.prefill_metrics_url or settings.decode_metrics_url):
        rt.log(f"long-prompt checks not run: {', '.join(failed)} failed")
        return results
    results += run_long_prompt_checks(settings, deadline_at, rt)
    return results


# --------------------------------------------------------------------------
# Prometheus text.
# --------------------------------------------------------------------------


_LABEL_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def _label_set(text: str) -> tuple[dict[str, str], int]:
    """The labels of the set ``text`` starts with (``{name="value",...}``) and the index just past its ``}``.

    Values may hold ``}``, ``,`` and the escapes ``\\\\``, ``\\"`` and ``\\n``. Raises ValueError for a set
    that is not closed or not of that form.
    """
    labels: dict[str, str] = {}
    index = 1  # past the "{"
    while True:
        while text[index : index + 1].isspace() or text[index : index + 1] == ",":
            index += 1
        if text[index : index + 1] == "}":
            return labels, index + 1
        equals = text.find("=", index)
        if equals < 0 or text[equals + 1 : equals + 2] != '"':
            raise ValueError(f"malformed or unterminated label set in {text[:SNIPPET_CHARS]!r}")
        name, index = text[index:equals].strip(), equals + 2
        value: list[str] = []
        while True:
            if index >= len(text):
                raise ValueError(f"unterminated label set in {text[:SNIPPET_CHARS]!r}")
            char = text[index]
            if char == "\\":
                value.append(_LABEL_ESCAPES.get(text[index + 1 : index + 2], text[index : index + 2]))
                index += 2
            elif char == '"':
                index += 1
                break
            else:
                value.append(char)
                index += 1
        labels[name] = "".join(value)


def sample_sum(text: str, name: str, where: Mapping[str, str] | None = None) -> float | None:
    """The sum of every sample of ``name`` in Prometheus text, over all label sets; None if it has none.

    With ``where``, only the samples whose labels include those name/value pairs count. Raises
    ValueError for a sample that has no number for a value or a label set that cannot be read.
    """
    total, seen = 0.0, False
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        rest = line[len(name) :]
        labels: dict[str, str] = {}
        if rest.startswith("{"):
            labels, end = _label_set(rest)
            rest = rest[end:]
        elif not rest[:1].isspace():
            continue  # another metric whose name starts with this one
        if where is not None and any(labels.get(key) != value for key, value in where.items()):
            continue
        fields = rest.split()  # value, then an optional timestamp
        try:
            total += float(fields[0])
        except (IndexError, ValueError):
            raise ValueError(f"{name} sample without a number: {line[:SNIPPET_CHARS]!r}") from None
        seen = True
    return total if seen else None


def prompt_tokens(text: str) -> float | None:
    """The sum of every `vllm:prompt_tokens_total` sample in Prometheus text, or None if absent."""
    try:
        return sample_sum(text, PROMPT_TOKENS_METRIC)
    except ValueError:
        return None


def scrape_all(url: str, timeout: float, rt: Runtime, role: str) -> tuple[list[tuple[str, str]] | None, str]:
    """Each address of the URL's host (a headless Service: one per ready pod) with its metrics text.

    None and why not if the host does not resolve, has no address, or one address does not answer 200.
    """
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "", parts.port or 80
    try:
        addresses = rt.resolve(host, port)
    except OSError as exc:
        return None, f"cannot resolve {host}: {exc}"
    if not addresses:
        return None, f"{host} has no addresses (no ready {role} pod)"
    pages: list[tuple[str, str]] = []
    for address in addresses:
        shown = f"[{address}]" if ":" in address else address
        response = rt.get(parts._replace(netloc=f"{shown}:{port}").geturl(), timeout)
        if response.status != 200:
            return None, f"{address}: {response.error or f'HTTP {response.status}'}"
        pages.append((address, response.body.decode(errors="replace")))
    return pages, f"{len(addresses)} {role} pod(s)"


def prefill_prompt_tokens(url: str, timeout: float, rt: Runtime) -> tuple[float | None, str]:
    """Prompt tokens processed so far by every prefill pod, or None and why not."""
    pages, detail = scrape_all(url, timeout, rt, "prefill")
    if pages is None:
        return None, detail
    total = 0.0
    for address, text in pages:
        tokens = prompt_tokens(text)
        if tokens is None:
            return None, f"{address}: no {PROMPT_TOKENS_METRIC} in its metrics"
        total += tokens
    return total, detail


@dataclasses.dataclass(frozen=True)
class KvTransferReading:
    """The decode leaders' figures, each summed over pods and label sets."""

    pods: int
    external: float  # EXTERNAL_KV_SERIES over the pods that have it
    local_compute: float | None  # LOCAL_COMPUTE_SERIES; None when some pod lacks it
    transfers: float | None  # KV_TRANSFER_COUNT_METRIC; None when some pod lacks it (reported, never judged)
    failures: float  # KV_FAILED_TRANSFERS_METRIC; a pod without it counts 0
    missing: tuple[str, ...] = ()  # pods without EXTERNAL_KV_SERIES

    def figures(self) -> dict[str, float | None]:
        return {
            EXTERNAL_KV_SERIES: None if self.missing else self.external,
            LOCAL_COMPUTE_SERIES: self.local_compute,
            KV_TRANSFER_COUNT_METRIC: self.transfers,
            KV_FAILED_TRANSFERS_METRIC: self.failures,
        }


def decode_kv_transfers(url: str, timeout: float, rt: Runtime) -> tuple[KvTransferReading | None, str]:
    """Prompt tokens by source, KV pulls and failed pulls counted so far by every decode leader, or None and why not."""
    pages, detail = scrape_all(url, timeout, rt, "decode")
    if pages is None:
        return None, detail
    external = failures = 0.0
    local: float | None = 0.0
    transfers: float | None = 0.0
    missing: list[str] = []
    for address, text in pages:
        try:
            ext = sample_sum(text, PROMPT_TOKENS_BY_SOURCE_METRIC, {"source": EXTERNAL_KV_SOURCE})
            computed = sample_sum(text, PROMPT_TOKENS_BY_SOURCE_METRIC, {"source": LOCAL_COMPUTE_SOURCE})
            count = sample_sum(text, KV_TRANSFER_COUNT_METRIC)
            failed = sample_sum(text, KV_FAILED_TRANSFERS_METRIC)
        except ValueError as exc:
            return None, f"{address}: {exc}"
        if ext is None:
            missing.append(address)
        else:
            external += ext
        local = None if local is None or computed is None else local + computed
        transfers = None if transfers is None or count is None else transfers + count
        failures += failed or 0.0
    return KvTransferReading(len(pages), external, local, transfers, failures, tuple(missing)), detail


# --------------------------------------------------------------------------
# Long-prompt checks: prefill and KV transfer.
# --------------------------------------------------------------------------


@dataclasses.dataclass
class KvTransferResult(EndpointResult):
    """The kv_transfer entry: an EndpointResult with the figures read around the last completion."""

    before: dict[str, float | None] | None = None
    after: dict[str, float | None] | None = None


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One check's verdict on one long-prompt completion."""

    ok: bool
    detail: str  # the figures when ok, else what went wrong
    final: str | None = None  # why retrying cannot help, for a failure that is not retried


class _Check:
    """One thing proven around the shared long-prompt completion: metrics read before and after."""

    result: EndpointResult

    def read_before(self, timeout: float, rt: Runtime) -> str | None:
        """Read the figures before the completion; the reason when they cannot be read."""
        raise NotImplementedError

    def judge(self, verdict: Verdict, timeout: float, deadline_at: float, rt: Runtime) -> Outcome:
        """Read the figures after the completion (whose verdict is given) and compare."""
        raise NotImplementedError


class _PrefillCheck(_Check):
    def __init__(self, url: str) -> None:
        self.url = url
        self.result = EndpointResult(endpoint=PREFILL_CHECK)
        self.before = 0.0

    def read_before(self, timeout: float, rt: Runtime) -> str | None:
        before, detail = prefill_prompt_tokens(self.url, timeout, rt)
        if before is None:
            return detail
        self.before = before
        return None

    def judge(self, verdict: Verdict, timeout: float, deadline_at: float, rt: Runtime) -> Outcome:
        after, detail = prefill_prompt_tokens(self.url, timeout, rt)
        if verdict.ok and after is not None and after > self.before:
            return Outcome(True, f"{PROMPT_TOKENS_METRIC} on {detail}: {self.before:g} -> {after:g}")
        if not verdict.ok:
            return Outcome(False, f"completion failed: {verdict.detail}")
        if after is not None:
            return Outcome(
                False, f"no prefill pod processed the prompt ({PROMPT_TOKENS_METRIC} stayed at {self.before:g})"
            )
        return Outcome(False, detail)


class _KvTransferCheck(_Check):
    def __init__(self, url: str) -> None:
        self.url = url
        self.kv_result = KvTransferResult(endpoint=KV_TRANSFER_CHECK)
        self.result = self.kv_result
        self.before = KvTransferReading(pods=0, external=0.0, local_compute=None, transfers=None, failures=0.0)

    def read_before(self, timeout: float, rt: Runtime) -> str | None:
        before, detail = decode_kv_transfers(self.url, timeout, rt)
        self.kv_result.before = before.figures() if before is not None else None
        self.kv_result.after = None
        if before is None:
            return detail
        self.before = before
        return None

    def _computed_locally(self, after: KvTransferReading) -> bool:
        before = self.before
        return before.local_compute is not None and (after.local_compute or 0.0) > before.local_compute

    def _pending(self, after: KvTransferReading) -> bool:
        """Nothing counted yet for the prompt: the stats may still be on their way.

        vLLM counts a prompt's tokens by source in one go (one PrefillStats, at its first output), so
        a rise of local_compute means the prompt's stats are in: it was computed on decode.
        """
        before = self.before
        return (
            not after.missing
            and after.failures <= before.failures
            and after.external <= before.external
            and not self._computed_locally(after)
        )

    def judge(self, verdict: Verdict, timeout: float, deadline_at: float, rt: Runtime) -> Outcome:
        after, detail = decode_kv_transfers(self.url, timeout, rt)
        settle_until = min(deadline_at, rt.now() + DECODE_SETTLE_SECONDS)
        while verdict.ok and after is not None and self._pending(after):
            if rt.now() + DECODE_POLL_SECONDS >= settle_until:
                break
            rt.sleep(DECODE_POLL_SECONDS)
            after, detail = decode_kv_transfers(self.url, min(timeout, max(deadline_at - rt.now(), 0.1)), rt)
        self.kv_result.after = after.figures() if after is not None else None
        if after is None:
            return Outcome(False, detail)
        before = self.before
        failed = f"{KV_FAILED_TRANSFERS_METRIC} {before.failures:g} -> {after.failures:g}"
        if after.failures > before.failures:
            # Only the non-HMA TPUConnector counts failed pulls; a rise is a fault whatever else was counted.
            return Outcome(False, f"KV transfers failed ({failed})", "a failed transfer is a fault, not a delay")
        if after.missing:
            return Outcome(
                False,
                f"{EXTERNAL_KV_SERIES} is absent from the metrics of decode pod(s) {', '.join(after.missing)} "
                "(vLLM v0.26.0 writes it for every engine from start-up: is that decode vLLM's /metrics?)",
                "the metric does not appear by waiting",
            )
        if not verdict.ok:
            return Outcome(False, f"completion failed: {verdict.detail}")
        external = f"{EXTERNAL_KV_SERIES} {before.external:g} -> {after.external:g}"
        if after.external <= before.external:
            local = ""
            if before.local_compute is not None and after.local_compute is not None:
                figures = f"{LOCAL_COMPUTE_SOURCE} {before.local_compute:g} -> {after.local_compute:g}"
                local = (
                    f"; decode computed the prompt itself: {figures}"
                    if self._computed_locally(after)
                    else f"; {figures}: decode counted no new prompt"
                )
            return Outcome(False, f"no KV transferred to the decode leaders ({external}{local})")
        # Not judged: TPUConnectorHMA never observes the transfer-time histogram (tpu_connector_hma.py:434-487).
        count = f"{_figure(before.transfers)} -> {_figure(after.transfers)}"
        return Outcome(
            True,
            f"{EXTERNAL_KV_SERIES} on {detail}: {before.external:g} -> {after.external:g}, {failed}; "
            f"{KV_TRANSFER_COUNT_METRIC} {count} (not judged: TPUConnectorHMA does not record it)",
        )


def _figure(value: float | None) -> str:
    return "absent" if value is None else f"{value:g}"


def long_prompt(prompt: str, nonce: str) -> str:
    """The prompt made long and new: no prefix cache has seen it, so prefill must compute it."""
    filler = f" Reference {nonce}: count the words of this sentence before you answer."
    text = f"{prompt} (request {nonce})"
    while len(text.encode()) < PREFILL_PROMPT_BYTES:
        text += filler
    return text


def run_long_prompt_checks(settings: Settings, deadline_at: float, rt: Runtime) -> list[EndpointResult]:
    """Completions with a long new prompt, each between two readings of every asked-for check's metrics.

    The prefill check (``--prefill-metrics-url``) and the KV-transfer check (``--decode-metrics-url``)
    share each completion. Attempts repeat until every check passes in the same attempt, one fails for
    good (a failed or unmeasurable KV transfer), or the deadline passes; each result tells its check's
    last attempt.
    """
    checks: list[_Check] = []
    if settings.prefill_metrics_url is not None:
        checks.append(_PrefillCheck(settings.prefill_metrics_url))
    if settings.decode_metrics_url is not None:
        checks.append(_KvTransferCheck(settings.decode_metrics_url))
    if not checks:
        return []
    started = rt.now()
    attempts = 0
    while (remaining := deadline_at - rt.now()) > 0:
        attempts += 1
        timeout = min(settings.request_timeout_seconds, remaining)
        unread = [check.read_before(timeout, rt) for check in checks]
        if any(reason is not None for reason in unread):
            blocked = ", ".join(c.result.endpoint for c, reason in zip(checks, unread, strict=True) if reason)
            outcomes = [
                Outcome(False, reason or f"completion not sent: the {blocked} metrics could not be read")
                for reason in unread
            ]
        else:
            nonce = f"{rt.rand():.12f}".removeprefix("0.")
            payload = {"model": settings.model, "prompt": long_prompt(settings.prompt, nonce), "max_tokens": 8}
            endpoint = Endpoint(COMPLETIONS_PATH, payload, completion_text, "choices[0].text string")
            response = rt.post(settings.base_url + COMPLETIONS_PATH, json.dumps(payload).encode(), timeout)
            verdict = judge(response, endpoint)
            outcomes = []
            for check in checks:
                check.result.status = response.status
                outcomes.append(check.judge(verdict, timeout, deadline_at, rt))
        for check, outcome in zip(checks, outcomes, strict=True):
            check.result.attempts = attempts
            check.result.ok = outcome.ok
            check.result.error = None
            check.result.sample = outcome.detail if outcome.ok else None
            if outcome.ok:
                rt.log(f"{check.result.endpoint} attempt {attempts}: ok, {outcome.detail}")
        failed = [(c, o) for c, o in zip(checks, outcomes, strict=True) if not o.ok]
        if not failed:
            break
        final = [o for _c, o in failed if o.final]
        if final:
            for check, outcome in failed:
                why = outcome.final or f"{KV_TRANSFER_CHECK} failed for good on the same completion"
                check.result.error = f"{outcome.detail} (not retried: {why})"
                rt.log(f"{check.result.endpoint} attempt {attempts}: {outcome.detail}; not retrying: {why}")
            break
        wait = _next_wait(attempts, settings, deadline_at, rt)
        for check, outcome in failed:
            check.result.error = f"{outcome.detail} (deadline of {settings.deadline_seconds:g}s passed)"
            next_step = "giving up" if wait is None else f"next attempt in {wait:.1f}s"
            rt.log(f"{check.result.endpoint} attempt {attempts}: {outcome.detail}; {next_step}")
        if wait is None:
            break
        pause(wait, rt)
    for check in checks:
        if attempts == 0:
            check.result.error = f"deadline of {settings.deadline_seconds:g}s passed before the first attempt"
        check.result.seconds = round(rt.now() - started, 3)
    return [check.result for check in checks]


# --------------------------------------------------------------------------
# Entry point.
# --------------------------------------------------------------------------


def _sibling(name: str) -> ModuleType:
    """A module shipped beside this file (the ConfigMap's other key), loaded by path: in the pod
    this file runs as a script, not from a package."""
    spec = importlib.util.spec_from_file_location(f"smoke_{name}", Path(__file__).with_name(f"{name}.py"))
    if spec is None or spec.loader is None:
        raise UsageError(f"{name}.py is missing beside {Path(__file__).name}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def slice_watch_from_env(env: Mapping[str, str], rt: Runtime) -> Callable[[], str | None] | None:
    """The slice watch SMOKE_SLICE_CHECK asks for, its baseline read, or None without it."""
    if not _env(env, "SMOKE_SLICE_CHECK"):
        return None
    watching = _sibling("slice_watch")
    try:
        settings = watching.settings_from_env(env)
    except watching.WatchError as exc:
        raise UsageError(str(exc)) from None
    watch = watching.SliceWatch(settings, rt.log)
    watch.start()
    return watch  # type: ignore[no-any-return]


def summary(settings: Settings | None, results: Sequence[EndpointResult], error: str | None) -> dict[str, Any]:
    ok = error is None and bool(results) and all(r.ok for r in results)
    return {
        "ok": ok,
        "base_url": settings.base_url if settings else None,
        "model": settings.model if settings else None,
        "error": error,
        "results": [dataclasses.asdict(r) for r in results],
    }


def write_json_line(value: Mapping[str, Any], out: TextIO) -> None:
    out.write(json.dumps(dict(value)) + "\n")
    out.flush()


def main(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    runtime: Runtime | None = None,
    out: TextIO | None = None,
) -> int:
    env = os.environ if env is None else env
    rt = Runtime() if runtime is None else runtime
    # Looked up per call (not at import) so redirected/captured stdout is honoured.
    out = sys.stdout if out is None else out
    try:
        settings = parse_settings(argv, env)
        if rt.watch is None:
            rt = dataclasses.replace(rt, watch=slice_watch_from_env(env, rt))
    except UsageError as exc:
        rt.log(f"bad arguments: {exc} (see --help)")
        write_json_line(summary(None, [], f"bad arguments: {exc}"), out)
        return EXIT_USAGE

    rt.log(
        f"testing {settings.base_url} model {settings.model!r}, deadline {settings.deadline_seconds:g}s, "
        f"request timeout {settings.request_timeout_seconds:g}s"
    )
    try:
        results = run_smoke_test(settings, rt)
    except SliceFailureError as exc:
        stopped = f"stopped: {exc}"
        rt.log(f"smoke test {stopped}")
        write_json_line(summary(settings, [], stopped), out)
        return EXIT_FAILED
    failed = [r.endpoint for r in results if not r.ok]
    error = f"failed: {', '.join(failed)}" if failed else None
    rt.log("smoke test passed" if not failed else f"smoke test {error}")
    write_json_line(summary(settings, results, error), out)
    return EXIT_FAILED if failed else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
