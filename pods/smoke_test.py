"""Smoke-test an OpenAI-compatible LLM endpoint (vLLM behind an internal GKE Gateway).

Shipped alone inside a ConfigMap and run as a Kubernetes Job on a stock
``python:3.12-slim`` image, so this file must stay self-contained: standard
library only. A failing run fails the Job, and with it ``pulumi up``.

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
"attempts", "status", "seconds", "error", "sample"}]}.

With ``--prefill-metrics-url`` (disaggregated serving), a third check proves that a prefill pod
did the prefill: it sums ``vllm:prompt_tokens_total`` over every address of the URL's host (a
headless Service of the prefill leaders), sends one more completion with a long prompt no cache
has seen, and requires the sum to rise. Without it, decode can answer alone and a broken KV
transfer or unreachable prefill pods would still pass. The prompt is long on purpose: llm-d's
decider sends a prompt to prefill from 16 uncached tokens, and the endpoint picker estimates 4
bytes a token (llm-d-router v0.9.0, pkg/epp/.../tokenizer/estimate.go), so a short greeting is
decoded without any prefill.

Exit codes: 0 every check passed, 1 a check failed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
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
from typing import Any, NoReturn, TextIO

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

COMPLETIONS_PATH = "/v1/completions"
CHAT_PATH = "/v1/chat/completions"
PREFILL_CHECK = "prefill"
PROMPT_TOKENS_METRIC = "vllm:prompt_tokens_total"
# Far above the decider's 16 uncached tokens at 4 bytes a token, well within any context.
PREFILL_PROMPT_BYTES = 2048

# Each wait is stretched by up to this fraction of itself. Upward only, so the
# documented schedule is a lower bound and the schedule stays monotone.
JITTER_FRACTION = 0.1
SAMPLE_CHARS = 200
SNIPPET_CHARS = 200
# vLLM answers are small; a cap keeps a misbehaving proxy from eating memory.
MAX_BODY_BYTES = 1024 * 1024
# 2.0 ** 1024 raises OverflowError; far beyond any cap anyway.
_MAX_EXPONENT = 1023

# 4xx that mean "not yet" rather than "never": 404 while the Gateway route or
# the backend is not programmed, 408 request timeout, 425 too early, 429 busy.
RETRYABLE_4XX = frozenset({404, 408, 425, 429})


class UsageError(Exception):
    """A bad flag or env value: reported with exit code 2."""


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
        prog="smoke_test.py",
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
    add("--model", "SMOKE_MODEL", "served model name, e.g. Qwen/Qwen3.5-397B-A17B-FP8; required")
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
    if ns.model is None or not ns.model.strip():
        raise UsageError("--model/SMOKE_MODEL is required")
    if not ns.prompt:
        raise UsageError("--prompt/SMOKE_PROMPT must not be empty")
    initial = _positive_float(ns.initial_backoff_seconds, "--initial-backoff-seconds/SMOKE_INITIAL_BACKOFF_SECONDS")
    cap = _positive_float(ns.max_backoff_seconds, "--max-backoff-seconds/SMOKE_MAX_BACKOFF_SECONDS")
    if cap < initial:
        raise UsageError(f"--max-backoff-seconds ({cap:g}) must be >= --initial-backoff-seconds ({initial:g})")
    return Settings(
        base_url=validate_base_url(ns.base_url),
        model=ns.model.strip(),
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
    )


def validate_metrics_url(text: str) -> str:
    url = urllib.parse.urlsplit(text.strip())
    if url.scheme != "http" or not url.hostname or not url.port:
        raise UsageError(f"--prefill-metrics-url/SMOKE_PREFILL_METRICS_URL must be http://host:port/path, got {text!r}")
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


@dataclasses.dataclass(frozen=True)
class Endpoint:
    path: str
    payload: dict[str, Any]
    text: Callable[[Any], str | None]
    shape: str  # what a good body looks like, for error messages


def endpoints(settings: Settings) -> list[Endpoint]:
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
        rt.sleep(wait)
    if result.attempts == 0:
        result.error = f"deadline of {settings.deadline_seconds:g}s passed before the first attempt"
        rt.log(f"{endpoint.path}: {result.error}")
    result.seconds = round(rt.now() - started, 3)
    return result


def run_smoke_test(settings: Settings, rt: Runtime) -> list[EndpointResult]:
    """Both endpoints in order, sharing one deadline, then the prefill check when asked for.

    Completions goes first and absorbs the model's load time; chat then
    normally answers at once. A failed completions does not skip chat: its
    result still tells a wrong model name (fast failure) from a dead server.
    """
    deadline_at = rt.now() + settings.deadline_seconds
    results = [run_endpoint(endpoint, settings, deadline_at, rt) for endpoint in endpoints(settings)]
    if settings.prefill_metrics_url is not None:
        results.append(run_prefill_check(settings, deadline_at, rt))
    return results


# --------------------------------------------------------------------------
# Prefill check.
# --------------------------------------------------------------------------


def prompt_tokens(text: str) -> float | None:
    """The sum of every `vllm:prompt_tokens_total` sample in Prometheus text, or None if absent."""
    total, seen = 0.0, False
    for line in text.splitlines():
        if line.startswith(PROMPT_TOKENS_METRIC + "{") or line.startswith(PROMPT_TOKENS_METRIC + " "):
            try:
                total += float(line.rsplit(" ", 1)[1])
                seen = True
            except ValueError:
                return None
    return total if seen else None


def prefill_prompt_tokens(url: str, timeout: float, rt: Runtime) -> tuple[float | None, str]:
    """Prompt tokens processed so far by every prefill pod, or None and why not."""
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "", parts.port or 80
    try:
        addresses = rt.resolve(host, port)
    except OSError as exc:
        return None, f"cannot resolve {host}: {exc}"
    if not addresses:
        return None, f"{host} has no addresses (no ready prefill pod)"
    total = 0.0
    for address in addresses:
        shown = f"[{address}]" if ":" in address else address
        response = rt.get(parts._replace(netloc=f"{shown}:{port}").geturl(), timeout)
        if response.status != 200:
            return None, f"{address}: {response.error or f'HTTP {response.status}'}"
        tokens = prompt_tokens(response.body.decode(errors="replace"))
        if tokens is None:
            return None, f"{address}: no {PROMPT_TOKENS_METRIC} in its metrics"
        total += tokens
    return total, f"{len(addresses)} prefill pod(s)"


def long_prompt(prompt: str, nonce: str) -> str:
    """The prompt made long and new: no prefix cache has seen it, so prefill must compute it."""
    filler = f" Reference {nonce}: count the words of this sentence before you answer."
    text = f"{prompt} (request {nonce})"
    while len(text.encode()) < PREFILL_PROMPT_BYTES:
        text += filler
    return text


def run_prefill_check(settings: Settings, deadline_at: float, rt: Runtime) -> EndpointResult:
    """A completion sent between two readings of the prefill pods' prompt-token counters."""
    assert settings.prefill_metrics_url is not None
    result = EndpointResult(endpoint=PREFILL_CHECK)
    started = rt.now()
    while (remaining := deadline_at - rt.now()) > 0:
        result.attempts += 1
        timeout = min(settings.request_timeout_seconds, remaining)
        before, detail = prefill_prompt_tokens(settings.prefill_metrics_url, timeout, rt)
        if before is not None:
            nonce = f"{rt.rand():.12f}".removeprefix("0.")
            payload = {"model": settings.model, "prompt": long_prompt(settings.prompt, nonce), "max_tokens": 8}
            endpoint = Endpoint(COMPLETIONS_PATH, payload, completion_text, "choices[0].text string")
            response = rt.post(settings.base_url + COMPLETIONS_PATH, json.dumps(payload).encode(), timeout)
            verdict = judge(response, endpoint)
            after, detail = prefill_prompt_tokens(settings.prefill_metrics_url, timeout, rt)
            result.status = response.status
            if verdict.ok and after is not None and after > before:
                result.ok, result.error = True, None
                result.sample = f"{PROMPT_TOKENS_METRIC} on {detail}: {before:g} -> {after:g}"
                rt.log(f"prefill attempt {result.attempts}: ok, {result.sample}")
                break
            if not verdict.ok:
                detail = f"completion failed: {verdict.detail}"
            elif after is not None:
                detail = f"no prefill pod processed the prompt ({PROMPT_TOKENS_METRIC} stayed at {before:g})"
        result.error = f"{detail} (deadline of {settings.deadline_seconds:g}s passed)"
        wait = _next_wait(result.attempts, settings, deadline_at, rt)
        if wait is None:
            rt.log(f"prefill attempt {result.attempts}: {detail}; giving up")
            break
        rt.log(f"prefill attempt {result.attempts}: {detail}; next attempt in {wait:.1f}s")
        rt.sleep(wait)
    result.seconds = round(rt.now() - started, 3)
    return result


# --------------------------------------------------------------------------
# Entry point.
# --------------------------------------------------------------------------


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
    except UsageError as exc:
        rt.log(f"bad arguments: {exc} (see --help)")
        write_json_line(summary(None, [], f"bad arguments: {exc}"), out)
        return EXIT_USAGE

    rt.log(
        f"testing {settings.base_url} model {settings.model!r}, deadline {settings.deadline_seconds:g}s, "
        f"request timeout {settings.request_timeout_seconds:g}s"
    )
    results = run_smoke_test(settings, rt)
    failed = [r.endpoint for r in results if not r.ok]
    error = f"failed: {', '.join(failed)}" if failed else None
    rt.log("smoke test passed" if not failed else f"smoke test {error}")
    write_json_line(summary(settings, results, error), out)
    return EXIT_FAILED if failed else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
