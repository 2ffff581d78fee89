"""Publish a Saxml model through the sax-http server and wait until it serves.

Shipped alone inside a ConfigMap and run as a Kubernetes Job on a plain
``python:*-slim`` image, so this file must stay self-contained: standard
library only.

Saxml keeps published models in the admin server's GCS state, outside
Kubernetes, so "publish the model" is an imperative step; this Job makes it a
repeatable part of ``pulumi up``:

  1. ``GET /listcell {"model": KEY}`` (a GET *with a JSON body*);
  2. not published           -> ``POST /publish {"model", "model_path", "checkpoint", "replicas"}``;
     published, same settings -> nothing to publish ("already-published");
     published, only the replica count differs (the stack's slice count changed)
       -> ``PUT /update`` with the same four keys ("updated"): Saxml loads or unloads
       replicas without touching the ones that serve;
     published, other settings -> fail: the operator must unpublish first
     (this Job never unpublishes or republishes a model by itself);
  3. poll ``/listcell`` until ``active_replicas`` reaches the requested
     replicas, or fail when the deadline passes.

The HTTP contract (paths, methods, fields, both server generations' response
shapes) is the one in the project's Saxml reference (``saxml-jetstream.md``),
§2 "HTTP API contract (sax-http, port 8888)" and §7 gotchas 3, 4, 6 and 8;
the § numbers in comments below point there.

Logs go to stderr; stdout carries exactly one JSON line:
``{"ok", "model_key", "action", "requested_replicas", "active_replicas", "seconds", "error"}``.

Exit codes: 0 published and serving, 1 failed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import logging
import math
import os
import re
import signal
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NoReturn, TextIO

LOG = logging.getLogger("saxml_publish")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

DEFAULT_DEADLINE_SECONDS = 3600.0
DEFAULT_POLL_SECONDS = 15.0
DEFAULT_REQUEST_TIMEOUT_SECONDS = 60.0

# First retry delay after a server/connection error; it doubles per attempt,
# capped at the poll interval (so a starting server is not hammered and a
# restarted one is noticed quickly).
_FIRST_BACKOFF_SECONDS = 0.5

# Error bodies can be whole HTML pages (a proxy, a crashing server): keep
# messages readable in logs and in the one-line JSON summary.
_MAX_MESSAGE_CHARS = 500

# §2: "Model IDs are /sax/<cell>/<name>" and the server rejects cells that do
# not start with /sax/.
_MODEL_KEY = re.compile(r"/sax/[^/\s]+/[^/\s]+")
_ASCII_DIGITS = re.compile(r"[0-9]+")

# §2 errors, Gen-1: unknown paths answer {"message": "Invalid Request"}.
_GEN1_INVALID_REQUEST = "Invalid Request"

Action = Literal["published", "already-published", "updated", "failed"]
Phase = Literal["check", "publish", "update", "wait"]


class UsageError(Exception):
    """A bad flag or env value: reported with exit code 2."""


class ResponseShapeError(ValueError):
    """A 2xx response that matches neither known sax-http response shape."""


class TransportError(Exception):
    """No HTTP response at all: connection refused/reset, DNS failure, timeout."""


class TerminatedError(Exception):
    """SIGTERM (Kubernetes stopping the pod): still print the JSON line."""


# --------------------------------------------------------------------------
# Settings: flags with env fallbacks.
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Settings:
    http_url: str
    model_key: str
    model_path: str
    checkpoint: str
    replicas: int
    deadline_seconds: float
    poll_seconds: float
    request_timeout_seconds: float


class _Parser(argparse.ArgumentParser):
    """Raise instead of exiting so main() can still print the JSON line."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _env(env: Mapping[str, str], name: str) -> str | None:
    # An empty env var (e.g. an unset Kubernetes value) means "not given".
    value = env.get(name, "").strip()
    return value or None


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="saxml_publish.py",
        description="Publish a Saxml model through sax-http (idempotently) and wait until "
        "its replicas are active. A flag beats its env var; an empty env var counts as unset.",
    )

    def add(flag: str, env_name: str | None, help_text: str, default: str | None = None) -> None:
        value = _env(env, env_name) if env_name else None
        source = [f"env {env_name}"] if env_name else []
        if default is not None:
            source.append(f"default {default}")
        parser.add_argument(
            flag,
            default=value if value is not None else default,
            help=f"{help_text} ({'; '.join(source)})" if source else help_text,
        )

    add("--http-url", "SAX_HTTP_URL", "sax-http base URL, e.g. http://sax-http.sax.svc:8888; required")
    add("--model-key", "SAX_MODEL_KEY", "model id /sax/<cell>/<name>, e.g. /sax/test/lm175b; required")
    add(
        "--model-path",
        "SAX_MODEL_PATH",
        "servable config, e.g. saxml.server.pax.lm.params.lm_cloud.LmCloudSpmd175B32Test; required",
    )
    add("--checkpoint", "SAX_CHECKPOINT", 'checkpoint: gs://... or the literal "None" for test models; required')
    add("--replicas", "SAX_REPLICAS", "replicas (one per slice), integer >= 1; required")
    add(
        "--deadline-seconds",
        "SAX_PUBLISH_DEADLINE_SECONDS",
        "give up (exit 1) when the model is not serving after this long",
        _format_default(DEFAULT_DEADLINE_SECONDS),
    )
    add("--poll-seconds", None, "interval between /listcell polls", _format_default(DEFAULT_POLL_SECONDS))
    add(
        "--request-timeout-seconds",
        None,
        "timeout of one HTTP request",
        _format_default(DEFAULT_REQUEST_TIMEOUT_SECONDS),
    )
    return parser


def _format_default(value: float) -> str:
    return str(int(value)) if value.is_integer() else str(value)


def _required_text(value: str | None, name: str) -> str:
    if value is None or not value.strip():
        raise UsageError(f"{name} is required")
    return value.strip()


def _positive_seconds(value: str, name: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise UsageError(f"{name} must be a number of seconds, got {value!r}") from None
    if not math.isfinite(number) or number <= 0:
        raise UsageError(f"{name} must be > 0, got {value!r}")
    return number


def parse_http_url(text: str) -> str:
    """Validate an ``http(s)://host[:port][/prefix]`` base URL; return it without a trailing slash."""
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"must look like http://host:port, got {text!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"must not have a query or fragment, got {text!r}")
    try:
        _ = parts.port  # raises on a non-numeric or out-of-range port
    except ValueError as exc:
        raise ValueError(f"has a bad port: {exc}") from None
    return text.rstrip("/")


def parse_replicas(text: str) -> int:
    """An integer >= 1 written in ASCII digits (``int()`` alone would accept " +2" or "²")."""
    if not _ASCII_DIGITS.fullmatch(text.strip()):
        raise ValueError(f"must be an integer >= 1, got {text!r}")
    number = int(text)
    if number < 1:
        raise ValueError(f"must be >= 1, got {number}")
    return number


def parse_settings(argv: Sequence[str] | None, env: Mapping[str, str]) -> Settings:
    """Parse flags (falling back to env vars) into validated :class:`Settings`."""
    ns = build_parser(env).parse_args(argv)

    try:
        http_url = parse_http_url(_required_text(ns.http_url, "--http-url/SAX_HTTP_URL"))
    except ValueError as exc:
        raise UsageError(f"--http-url/SAX_HTTP_URL {exc}") from None

    model_key = _required_text(ns.model_key, "--model-key/SAX_MODEL_KEY")
    if not _MODEL_KEY.fullmatch(model_key):
        raise UsageError(f"--model-key/SAX_MODEL_KEY must look like /sax/<cell>/<name>, got {model_key!r}")

    model_path = _required_text(ns.model_path, "--model-path/SAX_MODEL_PATH")
    if any(ch.isspace() for ch in model_path):
        raise UsageError(f"--model-path/SAX_MODEL_PATH must not contain whitespace, got {model_path!r}")

    # No default: "None" means random test weights (§7 gotcha 8); a forgotten
    # checkpoint must not silently publish an untrained model.
    checkpoint = _required_text(ns.checkpoint, "--checkpoint/SAX_CHECKPOINT")

    try:
        replicas = parse_replicas(_required_text(ns.replicas, "--replicas/SAX_REPLICAS"))
    except ValueError as exc:
        raise UsageError(f"--replicas/SAX_REPLICAS {exc}") from None

    return Settings(
        http_url=http_url,
        model_key=model_key,
        model_path=model_path,
        checkpoint=checkpoint,
        replicas=replicas,
        deadline_seconds=_positive_seconds(ns.deadline_seconds, "--deadline-seconds/SAX_PUBLISH_DEADLINE_SECONDS"),
        poll_seconds=_positive_seconds(ns.poll_seconds, "--poll-seconds"),
        request_timeout_seconds=_positive_seconds(ns.request_timeout_seconds, "--request-timeout-seconds"),
    )


# --------------------------------------------------------------------------
# Response parsing: pure functions, one per shape in §2.
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ModelDetail:
    """One ``/listcell`` answer, normalised across server generations."""

    model: str | None
    model_path: str
    checkpoint: str
    max_replicas: int
    active_replicas: int


@dataclasses.dataclass(frozen=True)
class PublishEcho:
    """What a successful ``/publish`` echoed back (used for logging only)."""

    model: str | None
    model_path: str | None
    checkpoint: str | None
    replicas: int | None


def decode_json(body: bytes) -> Any:
    """Decode a JSON body; raise :class:`ResponseShapeError` if it is not JSON."""
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ResponseShapeError(f"response is not JSON: {_snippet(body)}") from None


def _snippet(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace").strip()
    return text if len(text) <= _MAX_MESSAGE_CHARS else text[:_MAX_MESSAGE_CHARS] + "..."


def _count(value: Any, field: str) -> int:
    """A replica count: a non-negative int, or its ASCII-digit string form."""
    # bool is an int subclass: `true` must not read as 1 replica.
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and _ASCII_DIGITS.fullmatch(value.strip()):
        return int(value)
    raise ResponseShapeError(f"field {field!r} must be a non-negative integer, got {value!r}")


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise ResponseShapeError(f"field {field!r} must be a string, got {value!r}")
    return value


def parse_listcell_detail(payload: Any) -> ModelDetail:
    """Parse a successful ``GET /listcell`` body.

    §2 table, ``/listcell`` row: both generations answer
    ``{"model", "model_path", "checkpoint", "max_replicas": int, "active_replicas": int}``
    (Gen-2 = FastAPI, Gen-1 = ``http.server``; "same fields").

    Defensive, per §7 gotcha 3 ("``path`` vs ``model_path`` ... Parse defensively"):
    Gen-1 names the model path ``path`` in its ``/publish`` and ``/update``
    answers, so ``path`` is accepted here too when ``model_path`` is absent.
    Counts may arrive as digit strings (Gen-1 coerces with ``int()``).
    """
    if not isinstance(payload, dict):
        raise ResponseShapeError(f"/listcell answer must be a JSON object, got {type(payload).__name__}")
    path_field = "model_path" if "model_path" in payload else "path"
    missing = [f for f in (path_field, "checkpoint", "max_replicas", "active_replicas") if f not in payload]
    if missing:
        raise ResponseShapeError(f"/listcell answer lacks {', '.join(missing)}: {json.dumps(payload)[:200]}")
    model = payload.get("model")
    return ModelDetail(
        model=model if isinstance(model, str) else None,
        model_path=_text(payload[path_field], path_field),
        checkpoint=_text(payload["checkpoint"], "checkpoint"),
        max_replicas=_count(payload["max_replicas"], "max_replicas"),
        active_replicas=_count(payload["active_replicas"], "active_replicas"),
    )


def parse_publish_echo(payload: Any) -> PublishEcho:
    """Parse a successful ``POST /publish`` body, leniently (it is informational).

    §2 table, ``/publish`` row: Gen-2 echoes ``{"model", "model_path", "checkpoint", "replicas"}``;
    Gen-1 echoes the same but with key ``path`` instead of ``model_path``.
    Fields that are absent or of an unexpected type come back as ``None``.
    """
    if not isinstance(payload, dict):
        return PublishEcho(None, None, None, None)

    def text(*keys: str) -> str | None:
        for key in keys:
            if isinstance(payload.get(key), str):
                return str(payload[key])
        return None

    try:
        replicas: int | None = _count(payload.get("replicas"), "replicas")
    except ResponseShapeError:
        replicas = None
    return PublishEcho(text("model"), text("model_path", "path"), text("checkpoint"), replicas)


def error_message(body: bytes) -> str:
    """The server's error text from an error response of either generation.

    §2 "Errors":
      * Gen-2 (FastAPI): HTTP 500 ``{"detail": "<exception text>"}``; schema errors are
        FastAPI's 422 ``{"detail": [{"loc": [...], "msg": "...", ...}, ...]}``.
      * Gen-1 (``http.server``): HTTP 400 ``{"Error": "<text>"}``, or
        ``{"message": "Invalid Request"}`` for unknown paths.
    Anything else (an HTML page from a proxy, an empty body) is returned as raw, truncated text.
    """
    try:
        payload = decode_json(body)
    except ResponseShapeError:
        return _snippet(body) or "(empty body)"
    if isinstance(payload, dict):
        for key in ("detail", "Error", "error", "message"):
            if key not in payload:
                continue
            value = payload[key]
            if isinstance(value, str):
                return value[:_MAX_MESSAGE_CHARS]
            if isinstance(value, list):
                return _validation_errors(value)
    return _snippet(body)


def _validation_errors(items: list[Any]) -> str:
    """Flatten FastAPI's 422 ``detail`` list into "loc: msg; loc: msg"."""
    parts = []
    for item in items:
        if isinstance(item, dict):
            loc = ".".join(str(p) for p in item.get("loc", []) if p != "body")
            parts.append(f"{loc}: {item.get('msg', '')}" if loc else str(item.get("msg", item)))
        else:
            parts.append(str(item))
    return "; ".join(parts)[:_MAX_MESSAGE_CHARS]


def is_not_published_message(message: str) -> bool:
    """Whether a ``/listcell`` error says the model is not published.

    The reference lists no dedicated status for this: both generations turn the
    client exception into their generic error (Gen-2 500, Gen-1 400; §2 "Errors").
    The Saxml admin's text is "model <id> not found" (upstream ``saxml/admin/mgr.go``;
    gRPC code NOT_FOUND), so match "not found" together with "model": an admin
    that cannot be located must stay a retryable error, not trigger a publish.
    """
    lowered = message.lower()
    return ("not found" in lowered or "not_found" in lowered) and "model" in lowered


def is_already_exists_message(message: str) -> bool:
    """Whether a ``/publish`` error says the model id is taken.

    Not in the reference either (same transport as :func:`is_not_published_message`).
    Upstream admin texts (``saxml/admin/mgr.go``, gRPC code ALREADY_EXISTS):
    "model <id> already exists" and, while an unpublish is still pending,
    "model <id> is being unpublished, please retry later". Both mean "look
    again with /listcell", never "fail".
    """
    lowered = message.lower()
    return any(text in lowered for text in ("already exists", "already_exists", "being unpublished"))


def _is_transient_status(status: int) -> bool:
    # 5xx: Gen-2's generic error (e.g. admin not reachable yet) or a restarting
    # server; 408/429: the standard "try again later" answers of any proxy.
    return status >= 500 or status in (408, 429)


@dataclasses.dataclass(frozen=True)
class ListcellOutcome:
    kind: Literal["published", "not-published", "retry", "fatal"]
    message: str
    detail: ModelDetail | None = None


@dataclasses.dataclass(frozen=True)
class PublishOutcome:
    kind: Literal["accepted", "already-exists", "retry", "fatal"]
    message: str
    echo: PublishEcho | None = None


def _wrong_endpoint(path: str, status: int, message: str) -> str:
    return (
        f"{path} answered HTTP {status} ({message}), i.e. the server does not know this path: "
        "is --http-url the base URL of the sax-http server (port 8888, §2), without an extra path?"
    )


def _is_wrong_endpoint(status: int, message: str) -> bool:
    # Gen-2 (FastAPI) answers unknown paths with 404 {"detail": "Not Found"},
    # Gen-1 with {"message": "Invalid Request"} (§2 "Errors"); neither uses
    # 404/405 for model errors. Checked before the "not found" text match.
    return status in (404, 405) or message == _GEN1_INVALID_REQUEST


def _listcell_success(status: int, body: bytes, model_key: str) -> ListcellOutcome:
    try:
        detail = parse_listcell_detail(decode_json(body))
    except ResponseShapeError as exc:
        return ListcellOutcome("fatal", f"unexpected /listcell answer (HTTP {status}): {exc}")
    if detail.model is not None and detail.model != model_key:
        return ListcellOutcome("fatal", f"/listcell answered for model {detail.model!r}, asked for {model_key!r}")
    return ListcellOutcome("published", describe_detail(detail), detail)


def classify_listcell(status: int, body: bytes, model_key: str) -> ListcellOutcome:
    """Turn one ``GET /listcell`` response into what to do next."""
    if 200 <= status < 300:
        return _listcell_success(status, body, model_key)
    message = error_message(body)
    if _is_wrong_endpoint(status, message):
        return ListcellOutcome("fatal", _wrong_endpoint("GET /listcell", status, message))
    if status >= 400 and is_not_published_message(message):
        return ListcellOutcome("not-published", message)
    # Gen-1 reports *every* client exception as 400 (admin unreachable, cell
    # not created yet, ...). /listcell is a read, so retrying a 400 is safe.
    retry = _is_transient_status(status) or status == 400
    return ListcellOutcome("retry" if retry else "fatal", f"GET /listcell -> HTTP {status}: {message}")


def classify_publish(status: int, body: bytes) -> PublishOutcome:
    """Turn one ``POST /publish`` response into what to do next."""
    if 200 <= status < 300:
        try:
            echo = parse_publish_echo(decode_json(body))
        except ResponseShapeError:
            echo = PublishEcho(None, None, None, None)
        return PublishOutcome("accepted", f"HTTP {status}", echo)

    message = error_message(body)
    if _is_wrong_endpoint(status, message):
        return PublishOutcome("fatal", _wrong_endpoint("POST /publish", status, message))
    if status >= 400 and is_already_exists_message(message):
        return PublishOutcome("already-exists", message)
    if _is_transient_status(status):
        return PublishOutcome("retry", f"POST /publish -> HTTP {status}: {message}")
    # A 4xx is the server refusing this request (Gen-1 400, Gen-2 422): retrying
    # the same body cannot help, so fail now with the server's own words.
    return PublishOutcome("fatal", f"POST /publish rejected with HTTP {status}: {message}")


def describe_detail(detail: ModelDetail) -> str:
    return (
        f"model_path={detail.model_path}, checkpoint={detail.checkpoint}, "
        f"max_replicas={detail.max_replicas}, active_replicas={detail.active_replicas}"
    )


def settings_differences(detail: ModelDetail, settings: Settings) -> list[str]:
    """Published settings that differ from the requested ones, as "field 'have' (requested 'want')"."""
    pairs: list[tuple[str, object, object]] = [
        ("model_path", detail.model_path, settings.model_path),
        ("checkpoint", detail.checkpoint, settings.checkpoint),
        ("replicas", detail.max_replicas, settings.replicas),
    ]
    return [f"{name} {have!r} (requested {want!r})" for name, have, want in pairs if have != want]


def mismatch_message(model_key: str, differences: Sequence[str]) -> str:
    return (
        f"model {model_key} is already published with different settings: {'; '.join(differences)}. "
        "Not republishing it automatically: that would unload the serving model from every slice. "
        f'Unpublish it first (POST /unpublish {{"model": "{model_key}"}}) and re-run, '
        "or change the requested settings to match"
    )


def backoff_delay(attempt: int, poll_seconds: float) -> float:
    """Delay before retry number ``attempt`` (0-based): doubling, capped at the poll interval."""
    return min(poll_seconds, _FIRST_BACKOFF_SECONDS * 2 ** min(attempt, 30))


# --------------------------------------------------------------------------
# HTTP.
# --------------------------------------------------------------------------

# (method, url, JSON payload, timeout seconds) -> (status, body); raises TransportError.
Transport = Callable[[str, str, Mapping[str, Any], float], tuple[int, bytes]]

# No proxies: the server is an in-cluster Service, and proxies are known to drop
# the body of a GET (§7 gotcha 4), which /listcell needs.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_json_request(method: str, url: str, payload: Mapping[str, Any], timeout: float) -> tuple[int, bytes]:
    """Send ``payload`` as a JSON body (also for GET, §7 gotcha 4); return (status, body)."""
    request = urllib.request.Request(
        url,
        data=json.dumps(dict(payload)).encode("utf-8"),
        method=method,
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        # Error statuses carry the server's message in the body (§2 "Errors").
        try:
            body = exc.read()
        except (OSError, http.client.HTTPException):
            body = b""
        return int(exc.code), body
    except urllib.error.URLError as exc:
        raise TransportError(f"{method} {url}: {exc.reason}") from None
    except (OSError, http.client.HTTPException) as exc:
        # Timeouts, resets mid-response, malformed status lines.
        raise TransportError(f"{method} {url}: {type(exc).__name__}: {exc}") from None


# --------------------------------------------------------------------------
# The publish flow.
# --------------------------------------------------------------------------


@dataclasses.dataclass
class Summary:
    """The one JSON line on stdout."""

    ok: bool
    model_key: str | None
    action: Action
    requested_replicas: int | None
    active_replicas: int | None
    seconds: float
    error: str | None


class Publisher:
    """Check, publish if needed, then wait; one instance per run.

    ``clock`` and ``sleep`` are injectable so tests can run hour-long
    deadlines instantly against a real HTTP server.
    """

    def __init__(
        self,
        settings: Settings,
        transport: Transport = http_json_request,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self.transport = transport
        self.clock = clock
        self.sleep = sleep
        self.started = clock()
        self.deadline = self.started + settings.deadline_seconds
        self.published_by_us = False
        self.updated_by_us = False
        self.active: int | None = None
        self.last_state = "no answer from the server yet"
        self.retries = 0

    # -- small helpers -------------------------------------------------------

    def _remaining(self) -> float:
        return self.deadline - self.clock()

    def _request(self, method: str, path: str, payload: Mapping[str, Any]) -> tuple[int, bytes]:
        # Never let one request outlive the overall deadline.
        timeout = max(0.001, min(self.settings.request_timeout_seconds, self._remaining()))
        return self.transport(method, self.settings.http_url + path, payload, timeout)

    def _wait(self, seconds: float) -> None:
        self.sleep(max(0.0, min(seconds, self._remaining())))

    def _backoff(self, reason: str) -> None:
        delay = backoff_delay(self.retries, self.settings.poll_seconds)
        self.retries += 1
        LOG.warning("%s; retrying in %.2fs", reason, delay)
        self.last_state = reason
        self._wait(delay)

    def make_summary(self, ok: bool, error: str | None = None) -> Summary:
        if ok:
            action: Action = "published" if self.published_by_us else "already-published"
            if self.updated_by_us:
                action = "updated"
        else:
            action = "failed"
        return Summary(
            ok=ok,
            model_key=self.settings.model_key,
            action=action,
            requested_replicas=self.settings.replicas,
            active_replicas=self.active,
            seconds=round(self.clock() - self.started, 3),
            error=error,
        )

    def _timeout_error(self) -> str:
        s = self.settings
        active = "unknown" if self.active is None else str(self.active)
        return (
            f"deadline of {_format_default(s.deadline_seconds)}s passed: model {s.model_key} has "
            f"{active} of the requested {s.replicas} replicas active (requested {s.replicas}, active {active}); "
            f"last observed state: {self.last_state}"
        )

    # -- the two calls -------------------------------------------------------

    def listcell(self) -> ListcellOutcome:
        try:
            status, body = self._request("GET", "/listcell", {"model": self.settings.model_key})
        except TransportError as exc:
            return ListcellOutcome("retry", str(exc))
        return classify_listcell(status, body, self.settings.model_key)

    def publish(self, method: str = "POST", path: str = "/publish") -> PublishOutcome:
        s = self.settings
        # Exactly these four keys: Gen-1 rejects any other key set (§2 table); `PUT /update`
        # takes the same body (§2 table, /update row).
        payload = {"model": s.model_key, "model_path": s.model_path, "checkpoint": s.checkpoint, "replicas": s.replicas}
        try:
            status, body = self._request(method, path, payload)
        except TransportError as exc:
            return PublishOutcome("retry", str(exc))
        return classify_publish(status, body)

    # -- the flow ------------------------------------------------------------
    #
    # Phases: "check" (is it published?), "publish" (POST it), "wait" (poll
    # until active). Each step returns the next phase, or the final Summary.

    def run(self) -> Summary:
        phase: Phase = "check"
        while True:
            if self._remaining() <= 0:
                return self.make_summary(False, self._timeout_error())
            if phase == "publish":
                step = self._publish_step()
            elif phase == "update":
                step = self._update_step()
            else:
                step = self._listcell_step(phase)
            if isinstance(step, Summary):
                return step
            phase = step

    def _publish_step(self) -> Phase | Summary:
        s = self.settings
        LOG.info("publishing %s (%s, checkpoint %s, %d replicas)", s.model_key, s.model_path, s.checkpoint, s.replicas)
        published = self.publish()
        if published.kind == "accepted":
            LOG.info("publish accepted (%s): %s", published.message, published.echo)
            self.published_by_us = True
            self.retries = 0
            return "wait"
        if published.kind == "fatal":
            return self.make_summary(False, published.message)
        # "already-exists": someone (or an earlier attempt of ours whose answer
        # was lost) got there first, or an unpublish is still pending. "retry":
        # the publish may or may not have been applied. Either way /listcell
        # decides what happens next, never a blind re-POST.
        self._backoff(f"POST /publish: {published.message}")
        return "check"

    def _update_step(self) -> Phase | Summary:
        s = self.settings
        LOG.info("updating %s to %d replicas", s.model_key, s.replicas)
        updated = self.publish("PUT", "/update")
        if updated.kind == "accepted":
            LOG.info("update accepted (%s): %s", updated.message, updated.echo)
            self.updated_by_us = True
            self.retries = 0
            return "wait"
        if updated.kind == "fatal":
            return self.make_summary(False, updated.message.replace("POST /publish", "PUT /update"))
        # Maybe applied: /listcell decides, never a blind re-PUT.
        self._backoff(f"PUT /update: {updated.message}")
        return "check"

    def _listcell_step(self, phase: Phase) -> Phase | Summary:
        s = self.settings
        listed = self.listcell()
        if listed.kind == "retry":
            self._backoff(listed.message)
            return phase
        if listed.kind == "fatal":
            return self.make_summary(False, listed.message)
        if listed.kind == "not-published":
            if phase == "check":
                LOG.info("%s is not published yet (%s)", s.model_key, listed.message)
                return "publish"
            # Republishing here would fight whoever unpublished it.
            return self.make_summary(
                False,
                f"model {s.model_key} disappeared while waiting for its replicas "
                f"(was it unpublished?): {listed.message}; last observed state: {self.last_state}",
            )
        return self._published_step(phase, listed)

    def _published_step(self, phase: Phase, listed: ListcellOutcome) -> Phase | Summary:
        s = self.settings
        detail = listed.detail
        if detail is None:  # "published" outcomes always carry the detail
            raise AssertionError("published outcome without detail")
        self.retries = 0
        self.active = detail.active_replicas
        self.last_state = listed.message
        differences = settings_differences(detail, s)
        if phase == "check" and differences and all(d.startswith("replicas ") for d in differences):
            # Only the slice count changed: change the replicas in place.
            LOG.info("%s is published with other replicas: %s", s.model_key, "; ".join(differences))
            return "update"
        if differences:
            # Also re-checked on every poll: a concurrent /update or republish
            # must not be reported as our success.
            return self.make_summary(False, mismatch_message(s.model_key, differences))
        if phase == "check":
            LOG.info("%s is already published with the requested settings", s.model_key)
        # §2: poll until active_replicas == replicas. ">=" is the same for a
        # server that honours max_replicas (checked equal just above) and cannot
        # wait forever on a server that reports more.
        if detail.active_replicas >= s.replicas:
            LOG.info("%s is serving: %s", s.model_key, listed.message)
            return self.make_summary(True)
        LOG.info("waiting for %s: %d of %d replicas active", s.model_key, detail.active_replicas, s.replicas)
        self._wait(s.poll_seconds)
        return "wait"


# --------------------------------------------------------------------------
# Entry point.
# --------------------------------------------------------------------------


def write_json_line(summary: Summary, out: TextIO) -> None:
    out.write(json.dumps(dataclasses.asdict(summary)) + "\n")
    out.flush()


def _raise_terminated(signum: int, _frame: object) -> None:
    raise TerminatedError(f"terminated by signal {signal.Signals(signum).name}")


def main(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    transport: Transport = http_json_request,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    out: TextIO | None = None,
) -> int:
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s saxml_publish %(levelname)s %(message)s",
    )
    out = sys.stdout if out is None else out
    env = os.environ if env is None else env
    try:
        settings = parse_settings(sys.argv[1:] if argv is None else list(argv), env)
    except UsageError as exc:
        LOG.error("bad arguments: %s (see --help)", exc)
        write_json_line(Summary(False, None, "failed", None, None, 0.0, f"bad arguments: {exc}"), out)
        return EXIT_USAGE

    publisher = Publisher(settings, transport=transport, clock=clock, sleep=sleep)
    try:
        summary = publisher.run()
    except Exception as exc:
        # Whatever happens (SIGTERM included), the Job still reports one JSON line.
        if not isinstance(exc, TerminatedError):
            LOG.exception("unexpected error")
        summary = publisher.make_summary(False, f"{type(exc).__name__}: {exc}")
    if summary.ok:
        LOG.info("done: %s %s", summary.action, settings.model_key)
    else:
        LOG.error("failed: %s", summary.error)
    write_json_line(summary, out)
    return EXIT_OK if summary.ok else EXIT_FAILED


if __name__ == "__main__":
    # Kubernetes stops a pod (activeDeadlineSeconds, deletion) with SIGTERM.
    signal.signal(signal.SIGTERM, _raise_terminated)
    sys.exit(main())
