"""Tests for pods/smoke_request.py.

A real HTTP server on 127.0.0.1 (ephemeral port, in a thread) plays vLLM with
scripted replies. The CLI runs in-process through main() with a fake clock,
so backoff waits cost nothing, and once as a real subprocess with real time.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import os
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pods import smoke_request as smoke

SCRIPT = Path(__file__).resolve().parents[1] / "pods" / "smoke_request.py"
MODEL = "Qwen/Qwen3.5-397B-A17B-FP8"
PROMPT = "How are you today?"
COMPLETIONS_OK = {"choices": [{"index": 0, "text": " I am fine, thank you.", "finish_reason": "stop"}]}
CHAT_OK = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Doing well!"}}]}
VLLM_UNKNOWN_MODEL = {
    "object": "error",
    "message": "The model `nope` does not exist.",
    "type": "NotFoundError",
    "param": None,
    "code": 404,
}

# Env vars the program reads; cleared so the developer's shell cannot leak in.
_PROGRAM_ENV = tuple(
    f"SMOKE_{name}"
    for name in (
        "BASE_URL",
        "MODEL",
        "DEADLINE_SECONDS",
        "REQUEST_TIMEOUT_SECONDS",
        "INITIAL_BACKOFF_SECONDS",
        "MAX_BACKOFF_SECONDS",
        "PROMPT",
        "MAX_TOKENS",
        "PREFILL_METRICS_URL",
        "DECODE_METRICS_URL",
        "API",
    )
)


# ---------------------------------------------------------------------------
# Scriptable local server
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes | dict[str, Any] = b""
    content_type: str = "application/json"
    delay: float = 0.0  # seconds before answering, to provoke client timeouts
    headers: tuple[tuple[str, str], ...] = ()

    def encoded(self) -> bytes:
        return json.dumps(self.body).encode() if isinstance(self.body, dict) else self.body


@dataclasses.dataclass(frozen=True)
class Received:
    path: str
    content_type: str | None
    body: Any


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        scripted = cast(_HTTPServer, self.server).scripted
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw
        reply = scripted.record(Received(self.path, self.headers.get("Content-Type"), body))
        if reply.delay:
            time.sleep(reply.delay)
        payload = reply.encoded()
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in reply.headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            pass  # the client gave up (timeout test); nothing to report

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    scripted: ScriptedServer

    def server_bind(self) -> None:
        # HTTPServer.server_bind does a reverse DNS lookup (getfqdn), which can
        # hang in a sandbox; the name is never used here.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "127.0.0.1", self.server_address[1]


class ScriptedServer:
    """Replies per path from a script; the last reply of a script repeats forever.

    The socket is bound at once (so the port is reserved) but only listens
    after start(): until then connections are refused.
    """

    def __init__(self) -> None:
        self.scripts: dict[str, list[Reply]] = {
            smoke.COMPLETIONS_PATH: [Reply(body=COMPLETIONS_OK)],
            smoke.CHAT_PATH: [Reply(body=CHAT_OK)],
        }
        self.received: list[Received] = []
        self._lock = threading.Lock()
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler, bind_and_activate=False)
        self._httpd.scripted = self
        self._httpd.server_bind()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def script(self, path: str, *replies: Reply) -> None:
        self.scripts[path] = list(replies)

    def record(self, request: Received) -> Reply:
        with self._lock:
            self.received.append(request)
            queue = self.scripts.get(request.path) or [Reply(404, b"no route", "text/plain")]
            return queue.pop(0) if len(queue) > 1 else queue[0]

    def paths(self) -> list[str]:
        with self._lock:
            return [r.path for r in self.received]

    def start(self) -> None:
        if self._thread is None:
            self._httpd.server_activate()
            # A short poll interval keeps shutdown() (once per test) from costing 0.5 s.
            self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.01,), daemon=True)
            self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
        self._httpd.server_close()


@pytest.fixture()
def idle_server() -> Iterator[ScriptedServer]:
    """Bound but not yet listening."""
    server = ScriptedServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture()
def server(idle_server: ScriptedServer) -> ScriptedServer:
    idle_server.start()
    return idle_server


# ---------------------------------------------------------------------------
# In-process runs with a fake clock
# ---------------------------------------------------------------------------


class FakeClock:
    """Monotonic time that only moves when the program sleeps."""

    def __init__(self, on_sleep: Callable[[int], None] | None = None) -> None:
        self.t = 1000.0
        self.sleeps: list[float] = []
        self.on_sleep = on_sleep

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.t += seconds
        if self.on_sleep is not None:
            self.on_sleep(len(self.sleeps))


@dataclasses.dataclass
class Run:
    code: int
    summary: dict[str, Any]
    logs: list[str]
    clock: FakeClock

    def result(self, path: str) -> dict[str, Any]:
        (found,) = [r for r in self.summary["results"] if r["endpoint"] == path]
        return cast(dict[str, Any], found)


def run_main(
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    clock: FakeClock | None = None,
    post: smoke.Post = smoke.http_post,
) -> Run:
    clock = clock or FakeClock()
    logs: list[str] = []
    out = io.StringIO()
    # rand=0: no jitter, so the waits are exactly the documented schedule.
    runtime = smoke.Runtime(post=post, now=clock.now, sleep=clock.sleep, rand=lambda: 0.0, log=logs.append)
    code = smoke.main(argv, env=env or {}, runtime=runtime, out=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, lines  # exactly one JSON line on stdout
    return Run(code, json.loads(lines[0]), logs, clock)


def args(url: str, *extra: str) -> list[str]:
    return ["--base-url", url, "--model", MODEL, *extra]


def attempt_logs(run: Run, path: str) -> list[str]:
    return [line for line in run.logs if line.startswith(f"{path} attempt ")]


def test_success_on_first_try(server: ScriptedServer) -> None:
    run = run_main(args(server.url + "/", "--max-tokens", "17"))  # trailing slash is dropped

    assert run.code == 0
    assert run.clock.sleeps == []
    assert server.received == [
        Received(
            "/v1/completions",
            "application/json",
            {"model": MODEL, "prompt": PROMPT, "max_tokens": 17},
        ),
        Received(
            "/v1/chat/completions",
            "application/json",
            {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 17},
        ),
    ]
    assert run.summary == {
        "ok": True,
        "base_url": server.url,
        "model": MODEL,
        "error": None,
        "results": [
            {
                "endpoint": "/v1/completions",
                "ok": True,
                "attempts": 1,
                "status": 200,
                "seconds": 0.0,
                "error": None,
                "sample": " I am fine, thank you.",
            },
            {
                "endpoint": "/v1/chat/completions",
                "ok": True,
                "attempts": 1,
                "status": 200,
                "seconds": 0.0,
                "error": None,
                "sample": "Doing well!",
            },
        ],
    }
    assert len(attempt_logs(run, "/v1/completions")) == len(attempt_logs(run, "/v1/chat/completions")) == 1


def test_503_twice_then_200_is_retried_with_backoff(server: ScriptedServer) -> None:
    server.script(
        smoke.COMPLETIONS_PATH,
        Reply(503, b"no healthy upstream", "text/plain"),
        Reply(503, b"no healthy upstream", "text/plain"),
        Reply(body=COMPLETIONS_OK),
    )
    run = run_main(args(server.url))

    assert run.code == 0 and run.summary["ok"] is True
    completions = run.result("/v1/completions")
    assert (completions["attempts"], completions["status"], completions["ok"]) == (3, 200, True)
    assert completions["seconds"] == 15.0  # 5 s then 10 s of (fake) backoff
    assert run.clock.sleeps == [5.0, 10.0]
    assert server.paths() == ["/v1/completions"] * 3 + ["/v1/chat/completions"]
    lines = attempt_logs(run, "/v1/completions")
    assert len(lines) == 3
    assert "attempt 1: HTTP 503: no healthy upstream; next attempt in 5.0s" in lines[0]
    assert "attempt 2: HTTP 503" in lines[1] and "next attempt in 10.0s" in lines[1]


def test_connection_refused_until_the_server_listens(idle_server: ScriptedServer) -> None:
    # Nothing listens on the (reserved) port until the second backoff wait.
    def on_sleep(count: int) -> None:
        if count == 2:
            idle_server.start()

    run = run_main(args(idle_server.url), clock=FakeClock(on_sleep))

    assert run.code == 0
    assert run.result("/v1/completions")["attempts"] == 3
    lines = attempt_logs(run, "/v1/completions")
    assert all("refused" in line.lower() for line in lines[:2]), lines
    assert idle_server.paths() == ["/v1/completions", "/v1/chat/completions"]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (Reply(200, b"<html>Service starting</html>", "text/html"), "not JSON"),
        (Reply(200, {"object": "list", "data": []}), "no choices[0].text string"),
        (Reply(200, {"choices": []}), "no choices[0].text string"),
        (Reply(200, {"choices": [{"text": None}]}), "no choices[0].text string"),
    ],
)
def test_200_with_unusable_body_is_retried(server: ScriptedServer, bad: Reply, message: str) -> None:
    server.script(smoke.COMPLETIONS_PATH, bad, Reply(body=COMPLETIONS_OK))
    run = run_main(args(server.url))

    assert run.code == 0
    assert run.result("/v1/completions")["attempts"] == 2
    assert message in attempt_logs(run, "/v1/completions")[0]


@pytest.mark.parametrize(
    "reply",
    [
        Reply(404, b"fault filter abort", "text/plain"),  # Gateway route not programmed yet
        Reply(429, {"error": "busy"}),
        Reply(500, b"", "text/plain"),
        Reply(502, b"<html>Bad Gateway</html>", "text/html"),
    ],
)
def test_not_yet_statuses_are_retried(server: ScriptedServer, reply: Reply) -> None:
    server.script(smoke.CHAT_PATH, reply, Reply(body=CHAT_OK))
    run = run_main(args(server.url))

    assert run.code == 0
    assert run.result("/v1/chat/completions")["attempts"] == 2


def test_request_timeout_is_retried(server: ScriptedServer) -> None:
    server.script(smoke.COMPLETIONS_PATH, Reply(body=COMPLETIONS_OK, delay=0.6), Reply(body=COMPLETIONS_OK))
    run = run_main(args(server.url, "--request-timeout-seconds", "0.2"))

    assert run.code == 0
    completions = run.result("/v1/completions")
    assert completions["attempts"] == 2
    assert "timed out after 0.2s" in attempt_logs(run, "/v1/completions")[0]


def test_server_that_never_succeeds_fails_at_the_deadline(server: ScriptedServer) -> None:
    server.script(smoke.CHAT_PATH, Reply(503, b"upstream connect error", "text/plain"))
    run = run_main(args(server.url, "--deadline-seconds", "100", "--max-backoff-seconds", "20"))

    assert run.code == 1
    assert run.summary["ok"] is False
    assert run.summary["error"] == "failed: /v1/chat/completions"
    assert run.result("/v1/completions")["ok"] is True
    chat = run.result("/v1/chat/completions")
    assert chat["ok"] is False and chat["status"] == 503 and chat["sample"] is None
    assert "HTTP 503: upstream connect error" in chat["error"] and "deadline of 100s passed" in chat["error"]
    # Waits 5, 10, 20, 20, 20 (= 75 s); a further 20 s wait would end at 95 s
    # and be fine, the next one would not: 7 attempts, never beyond the deadline.
    assert run.clock.sleeps == [5.0, 10.0, 20.0, 20.0, 20.0, 20.0]
    assert chat["attempts"] == 7
    assert sum(run.clock.sleeps) < 100
    assert "giving up" in attempt_logs(run, "/v1/chat/completions")[-1]


def test_completions_using_up_the_deadline_leaves_chat_unattempted(server: ScriptedServer) -> None:
    server.script(smoke.COMPLETIONS_PATH, Reply(503, b"", "text/plain"))
    clock = FakeClock()

    def slow_tail(url: str, body: bytes, timeout: float) -> smoke.Response:
        # The third completions attempt hangs for its whole timeout: (fake) time runs into the deadline.
        if len(clock.sleeps) == 2:
            clock.t += timeout
        return smoke.http_post(url, body, timeout)

    run = run_main(args(server.url, "--deadline-seconds", "30"), clock=clock, post=slow_tail)

    assert run.code == 1
    assert run.summary["error"] == "failed: /v1/completions, /v1/chat/completions"
    assert run.result("/v1/completions")["attempts"] == 3
    chat = run.result("/v1/chat/completions")
    assert (chat["attempts"], chat["status"], chat["ok"]) == (0, None, False)
    assert "before the first attempt" in chat["error"]
    assert server.paths() == ["/v1/completions"] * 3


def test_request_timeout_is_clipped_to_the_deadline() -> None:
    timeouts: list[float] = []

    def refused(url: str, body: bytes, timeout: float) -> smoke.Response:
        timeouts.append(timeout)
        return smoke.Response(status=None, error="ConnectionRefusedError: refused")

    run = run_main(
        args("http://10.10.0.100", "--deadline-seconds", "12", "--request-timeout-seconds", "300"), post=refused
    )
    assert run.code == 1
    # Completions at t=0 (12 s left) and t=5 (7 s left), then a 10 s wait would pass the deadline;
    # chat at t=5 (7 s left) and t=10 (2 s left).
    assert timeouts == [12.0, 7.0, 7.0, 2.0]


def test_400_fails_immediately_without_retries(server: ScriptedServer) -> None:
    error = {"object": "error", "message": "max_tokens is too large", "type": "BadRequestError", "code": 400}
    server.script(smoke.COMPLETIONS_PATH, Reply(400, error), Reply(body=COMPLETIONS_OK))
    run = run_main(args(server.url))

    assert run.code == 1
    completions = run.result("/v1/completions")
    assert (completions["attempts"], completions["status"], completions["ok"]) == (1, 400, False)
    assert "max_tokens is too large" in completions["error"] and "not retried" in completions["error"]
    assert run.clock.sleeps == []
    # Chat is still tried: its result helps tell a bad request from a dead server.
    assert run.result("/v1/chat/completions")["ok"] is True
    assert server.paths() == ["/v1/completions", "/v1/chat/completions"]


def test_a_failed_endpoint_skips_the_long_prompt_checks(server: ScriptedServer) -> None:
    """A wrong model fails both endpoints for good: the prefill and KV-transfer checks that would
    follow can only fail too, so they are not run until the deadline (tests/test_faults.py found a
    failing smoke Job holding `pulumi up` for its whole deadline)."""
    server.script(smoke.COMPLETIONS_PATH, Reply(404, VLLM_UNKNOWN_MODEL))
    server.script(smoke.CHAT_PATH, Reply(404, VLLM_UNKNOWN_MODEL))
    metrics = f"{server.url}/metrics"
    run = run_main(args(server.url, "--prefill-metrics-url", metrics, "--decode-metrics-url", metrics))

    assert run.code == 1
    assert [r["endpoint"] for r in run.summary["results"]] == ["/v1/completions", "/v1/chat/completions"]
    assert run.clock.sleeps == []
    assert server.paths() == ["/v1/completions", "/v1/chat/completions"]
    assert any("long-prompt checks not run" in line for line in run.logs), run.logs


@pytest.mark.parametrize("body", [VLLM_UNKNOWN_MODEL, {"error": VLLM_UNKNOWN_MODEL}])
def test_404_for_an_unknown_model_fails_immediately(server: ScriptedServer, body: dict[str, Any]) -> None:
    server.script(smoke.COMPLETIONS_PATH, Reply(404, body))
    server.script(smoke.CHAT_PATH, Reply(404, body))
    run = run_main(args(server.url))

    assert run.code == 1
    assert [r["attempts"] for r in run.summary["results"]] == [1, 1]
    assert run.clock.sleeps == []


def test_redirect_is_not_followed(server: ScriptedServer) -> None:
    server.script(smoke.COMPLETIONS_PATH, Reply(301, b"", "text/plain", headers=(("Location", "https://x/"),)))
    run = run_main(args(server.url))

    assert run.code == 1
    assert run.result("/v1/completions")["attempts"] == 1
    assert run.result("/v1/completions")["status"] == 301
    assert server.paths() == ["/v1/completions", "/v1/chat/completions"]


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
def test_chat_answer_still_thinking_counts_as_success(server: ScriptedServer, key: str) -> None:
    thinking = {"choices": [{"message": {"role": "assistant", "content": None, key: "Let me think" * 50}}]}
    server.script(smoke.CHAT_PATH, Reply(body=thinking))
    run = run_main(args(server.url))

    assert run.code == 0
    assert run.result("/v1/chat/completions")["sample"] == ("Let me think" * 50)[:200]


def test_env_fallback_and_flag_precedence(server: ScriptedServer) -> None:
    env = {
        "SMOKE_BASE_URL": server.url,
        "SMOKE_MODEL": "from-env",
        "SMOKE_DEADLINE_SECONDS": "",  # empty means unset: default 3600
        "SMOKE_MAX_TOKENS": "9",
    }
    settings = smoke.parse_settings([], env)
    assert (settings.base_url, settings.model, settings.deadline_seconds, settings.max_tokens) == (
        server.url,
        "from-env",
        3600.0,
        9,
    )
    assert (settings.request_timeout_seconds, settings.initial_backoff_seconds, settings.max_backoff_seconds) == (
        300.0,
        5.0,
        60.0,
    )
    assert settings.prompt == PROMPT

    run = run_main(["--model", MODEL, "--max-tokens", "3"], env=env)
    assert run.code == 0
    assert run.summary["model"] == MODEL
    assert server.received[0].body == {"model": MODEL, "prompt": PROMPT, "max_tokens": 3}


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--model", MODEL], {}, "--base-url/SMOKE_BASE_URL is required"),
        (["--base-url", "http://10.10.0.100"], {"SMOKE_MODEL": " "}, "--model/SMOKE_MODEL is required"),
        (args("ftp://10.10.0.100"), {}, "http:// or https://"),
        (args("10.10.0.100"), {}, "http:// or https://"),
        (args("http://"), {}, "with a host"),
        (args("http://10.10.0.100:99999"), {}, "bad port"),
        (args("http://10.10.0.100/v1"), {}, "must not end in /v1"),
        (args("http://10.10.0.100?x=1"), {}, "query"),
        (args("http://user:pw@10.10.0.100"), {}, "credentials"),
        (args("http://10.10.0.100", "--deadline-seconds", "0"), {}, "must be > 0"),
        (args("http://10.10.0.100"), {"SMOKE_DEADLINE_SECONDS": "-5"}, "must be > 0"),
        (args("http://10.10.0.100", "--deadline-seconds", "nan"), {}, "must be > 0"),
        (args("http://10.10.0.100", "--request-timeout-seconds", "soon"), {}, "must be a number"),
        (args("http://10.10.0.100", "--max-backoff-seconds", "1"), {}, "must be >= --initial-backoff"),
        (args("http://10.10.0.100", "--max-tokens", "0"), {}, "must be >= 1"),
        (args("http://10.10.0.100", "--max-tokens", "1.5"), {}, "must be an integer"),
        (args("http://10.10.0.100", "--prompt", ""), {}, "must not be empty"),
        (args("http://10.10.0.100", "--no-such-flag"), {}, "unrecognized arguments"),
    ],
)
def test_bad_arguments_exit_2(argv: list[str], env: dict[str, str], message: str) -> None:
    def no_network(url: str, body: bytes, timeout: float) -> smoke.Response:
        raise AssertionError("bad arguments must not reach the network")

    run = run_main(argv, env=env, post=no_network)
    assert run.code == 2
    assert run.summary == {"ok": False, "base_url": None, "model": None, "error": run.summary["error"], "results": []}
    assert message in run.summary["error"]


def _decode_metrics(external: list[float], local: list[float]) -> Callable[[str, float], smoke.Response]:
    """A decode leader's /metrics (vLLM v0.26.0 with TPUConnectorHMA) read in turn.

    At the i-th read its external_kv_transfer prompt tokens are external[i] and its local_compute ones
    local[i] (the last of each repeats); the TPU connector's series stay at 0, as HMA leaves them.
    """
    reads = [iter(external), iter(local)]
    figures = [external[0], local[0]]
    by_source = smoke.PROMPT_TOKENS_BY_SOURCE_METRIC

    def get(url: str, timeout: float) -> smoke.Response:
        assert url == "http://127.0.0.9:8000/metrics" and timeout > 0
        figures[:] = [next(read, last) for read, last in zip(reads, figures, strict=True)]
        text = (
            f'{by_source}{{engine="0",model_name="m",source="local_compute"}} {figures[1]}\n'
            f'{by_source}{{engine="0",model_name="m",source="local_cache_hit"}} 0.0\n'
            f'{by_source}{{engine="0",model_name="m",source="external_kv_transfer"}} {figures[0]}\n'
            f'{smoke.KV_TRANSFER_COUNT_METRIC}{{engine="0",model_name="m"}} 0.0\n'
            f'{smoke.KV_FAILED_TRANSFERS_METRIC}{{engine="0",model_name="m"}} 0.0\n'
        )
        return smoke.Response(status=200, body=text.encode())

    return get


@pytest.mark.parametrize(
    ("external", "local", "sleeps", "error"),
    [
        # Read before, read after, then polled every DECODE_POLL_SECONDS until the prompt's tokens show up.
        ([120.0, 120.0, 120.0, 632.0], [40.0], [0.5, 0.5], None),
        # Never show up: polled for DECODE_SETTLE_SECONDS, then flat; the next attempt would pass the deadline.
        ([120.0], [40.0], [0.5] * 9, "local_compute 40 -> 40: decode counted no new prompt)"),
        # Decode computed the prompt itself (the sidecar's decode-only fallback): its stats are in, no poll.
        ([120.0], [40.0, 552.0], [], "decode computed the prompt itself: local_compute 40 -> 552)"),
    ],
)
def test_decode_metrics_are_polled_until_the_prompt_shows_up(
    server: ScriptedServer, external: list[float], local: list[float], sleeps: list[float], error: str | None
) -> None:
    clock = FakeClock()
    logs: list[str] = []
    out = io.StringIO()
    runtime = smoke.Runtime(
        get=_decode_metrics(external, local),
        resolve=lambda host, port: ["127.0.0.9"],
        now=clock.now,
        sleep=clock.sleep,
        rand=lambda: 0.0,
        log=logs.append,
    )
    argv = args(server.url, "--deadline-seconds", "6", "--decode-metrics-url", "http://decode.test:8000/metrics")
    argv += ["--initial-backoff-seconds", "10", "--max-backoff-seconds", "10"]  # one attempt only
    code = smoke.main(argv, env={}, runtime=runtime, out=out)

    assert clock.sleeps == sleeps
    kv = json.loads(out.getvalue())["results"][-1]
    ok = error is None
    assert (code == 0, kv["ok"], kv["attempts"]) == (ok, ok, 1), kv
    if error is not None:
        assert kv["error"].startswith(
            f"no KV transferred to the decode leaders ({smoke.EXTERNAL_KV_SERIES} 120 -> 120; {error}"
        ), kv
        assert logs[-2].endswith("; giving up")
    assert server.paths()[-1] == smoke.COMPLETIONS_PATH  # the long prompt
    assert len(server.received[-1].body["prompt"].encode()) >= smoke.PREFILL_PROMPT_BYTES


# ---------------------------------------------------------------------------
# Pure helpers
# ---------------------------------------------------------------------------


def test_backoff_schedule_without_jitter() -> None:
    assert [smoke.backoff_delay(n, 5, 60, 0.0) for n in range(1, 8)] == [5, 10, 20, 40, 60, 60, 60]
    assert smoke.backoff_delay(1, 5, 60, 1.0) == pytest.approx(5.5)
    assert smoke.backoff_delay(10_000, 5, 60, 1.0) == 60
    with pytest.raises(ValueError):
        smoke.backoff_base(0, 5, 60)


@given(
    initial=st.floats(min_value=1e-3, max_value=100),
    cap_factor=st.floats(min_value=1, max_value=1000),
    draws=st.lists(st.floats(min_value=0, max_value=1), min_size=1, max_size=60),
)
def test_backoff_is_monotone_and_capped(initial: float, cap_factor: float, draws: list[float]) -> None:
    cap = initial * cap_factor
    delays = [smoke.backoff_delay(n, initial, cap, u) for n, u in enumerate(draws, start=1)]
    for n, delay in enumerate(delays, start=1):
        base = smoke.backoff_base(n, initial, cap)
        # Jitter bounds: never shorter than the base, at most JITTER_FRACTION longer, never over the cap.
        assert base <= delay <= min(cap, base * (1 + smoke.JITTER_FRACTION))
        assert initial <= delay <= cap
    assert all(a <= b for a, b in itertools.pairwise(delays))
    assert smoke.backoff_base(2000, initial, cap) == cap


@pytest.mark.parametrize(
    ("doc", "completion", "chat"),
    [
        ({"choices": [{"text": "hi", "message": {"content": "yo"}}]}, "hi", "yo"),
        ({"choices": [{"text": ""}]}, "", None),
        ({"choices": [{"message": {"content": None}}]}, None, None),
        ({"choices": [{"message": {"content": ["parts"]}}]}, None, None),
        ({"choices": ["text"]}, None, None),
        ({"choices": {"0": {}}}, None, None),
        ([], None, None),
        (None, None, None),
    ],
)
def test_text_extraction(doc: Any, completion: str | None, chat: str | None) -> None:
    assert smoke.completion_text(doc) == completion
    assert smoke.chat_text(doc) == chat


@pytest.mark.parametrize(
    ("status", "retry"),
    [(301, False), (400, False), (401, False), (403, False), (404, True), (408, True), (429, True), (503, True)],
)
def test_is_retryable_status(status: int, retry: bool) -> None:
    assert smoke.is_retryable_status(status) is retry


# ---------------------------------------------------------------------------
# Real subprocess, real clock
# ---------------------------------------------------------------------------


def _subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _PROGRAM_ENV}
    return {**env, **extra}


def test_subprocess_retries_then_succeeds(server: ScriptedServer) -> None:
    server.script(smoke.COMPLETIONS_PATH, Reply(503, b"loading", "text/plain"), Reply(body=COMPLETIONS_OK))
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--initial-backoff-seconds", "0.05", "--max-backoff-seconds", "0.1"],
        # Configured through env vars only, as the Job does.
        env=_subprocess_env(SMOKE_BASE_URL=server.url, SMOKE_MODEL=MODEL, SMOKE_DEADLINE_SECONDS="20"),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1
    summary = json.loads(lines[0])
    assert summary["ok"] is True and summary["base_url"] == server.url and summary["model"] == MODEL
    assert [(r["endpoint"], r["attempts"], r["status"]) for r in summary["results"]] == [
        ("/v1/completions", 2, 200),
        ("/v1/chat/completions", 1, 200),
    ]
    assert summary["results"][0]["seconds"] >= 0.05
    assert "/v1/completions attempt 1: HTTP 503: loading; next attempt in" in proc.stderr
    assert server.received[-1].body["messages"] == [{"role": "user", "content": PROMPT}]


def test_subprocess_bad_arguments_exit_2() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--base-url", "http://10.10.0.100", "--model", MODEL, "--deadline-seconds", "0"],
        env=_subprocess_env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["ok"] is False
    assert "bad arguments" in proc.stderr


# ---------------------------------------------------------------------------
# --api jetstream: jetstream-http's POST /generate (GoogleCloudPlatform/ai-on-gke
# tutorials-and-examples/inference-servers/jetstream/http-server/http_server.py)
# ---------------------------------------------------------------------------

GENERATE_OK = {"response": " I am a language model."}


def jetstream_args(url: str, *extra: str) -> list[str]:
    return ["--base-url", url, "--api", "jetstream", *extra]


def test_jetstream_one_completion_through_generate(server: ScriptedServer) -> None:
    server.script(smoke.JETSTREAM_GENERATE_PATH, Reply(body=GENERATE_OK))
    run = run_main(jetstream_args(server.url, "--max-tokens", "17"))

    assert run.code == 0 and run.summary["ok"] is True
    # The request jetstream-http's GenerateRequest reads: no model, no OpenAI paths.
    assert server.received == [Received("/generate", "application/json", {"prompt": PROMPT, "max_tokens": 17})]
    assert run.summary["results"] == [
        {
            "endpoint": "/generate",
            "ok": True,
            "attempts": 1,
            "status": 200,
            "seconds": 0.0,
            "error": None,
            "sample": " I am a language model.",
        }
    ]


def test_jetstream_env_selects_the_api(server: ScriptedServer) -> None:
    server.script(smoke.JETSTREAM_GENERATE_PATH, Reply(body=GENERATE_OK))
    run = run_main([], env={"SMOKE_BASE_URL": server.url, "SMOKE_API": "jetstream", "SMOKE_MODEL": "llama2-70b"})
    assert run.code == 0 and run.summary["model"] == "llama2-70b"  # only reported
    assert server.paths() == ["/generate"]


def test_jetstream_server_error_fails_with_its_detail_at_the_deadline(server: ScriptedServer) -> None:
    """jetstream-http answers 500 with FastAPI's {"detail": ...} when its gRPC call to the engine
    fails: retried (the engine may still be loading), then exit 1 naming the status and the detail."""
    detail = {"detail": "<AioRpcError: StatusCode.UNAVAILABLE, failed to connect to 127.0.0.1:9000>"}
    server.script(smoke.JETSTREAM_GENERATE_PATH, Reply(500, detail))
    run = run_main(jetstream_args(server.url, "--deadline-seconds", "30"))

    assert run.code == smoke.EXIT_FAILED
    assert run.summary["ok"] is False and run.summary["error"] == "failed: /generate"
    result = run.result("/generate")
    assert result["status"] == 500 and result["attempts"] > 1
    assert "HTTP 500" in result["error"] and "StatusCode.UNAVAILABLE" in result["error"]
    assert "deadline of 30s passed" in result["error"]
    assert sum(run.clock.sleeps) < 30  # never waits past the deadline
    assert run.logs[-1] == "smoke test failed: /generate"  # the container log's last line


def test_jetstream_connection_refused_is_retried_within_the_deadline(idle_server: ScriptedServer) -> None:
    idle_server.script(smoke.JETSTREAM_GENERATE_PATH, Reply(body=GENERATE_OK))

    def on_sleep(count: int) -> None:
        if count == 2:
            idle_server.start()

    run = run_main(jetstream_args(idle_server.url, "--deadline-seconds", "60"), clock=FakeClock(on_sleep))

    assert run.code == 0
    assert run.result("/generate")["attempts"] == 3
    lines = attempt_logs(run, "/generate")
    assert all("refused" in line.lower() for line in lines[:2]), lines
    assert run.clock.sleeps == [5.0, 10.0]


def test_jetstream_connection_refused_until_the_deadline_fails(idle_server: ScriptedServer) -> None:
    run = run_main(jetstream_args(idle_server.url, "--deadline-seconds", "20"))
    assert run.code == smoke.EXIT_FAILED
    result = run.result("/generate")
    assert result["status"] is None and "refused" in result["error"].lower()
    assert "deadline of 20s passed" in result["error"]


@pytest.mark.parametrize(
    ("body", "message"),
    [({"text": "x"}, 'no "response" string'), ({"response": None}, 'no "response" string')],
)
def test_jetstream_200_without_a_response_string_is_retried(
    server: ScriptedServer, body: dict[str, Any], message: str
) -> None:
    server.script(smoke.JETSTREAM_GENERATE_PATH, Reply(body=body), Reply(body=GENERATE_OK))
    run = run_main(jetstream_args(server.url))
    assert run.code == 0 and run.result("/generate")["attempts"] == 2
    assert message in attempt_logs(run, "/generate")[0]


def test_jetstream_422_is_not_retried(server: ScriptedServer) -> None:
    server.script(smoke.JETSTREAM_GENERATE_PATH, Reply(422, {"detail": [{"msg": "value is not a valid integer"}]}))
    run = run_main(jetstream_args(server.url))
    assert run.code == smoke.EXIT_FAILED and run.result("/generate")["attempts"] == 1
    assert "not retried" in run.result("/generate")["error"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--base-url", "http://x", "--api", "grpc"], "--api/SMOKE_API must be one of openai, jetstream"),
        (
            ["--base-url", "http://x", "--api", "jetstream", "--prefill-metrics-url", "http://p:8000/metrics"],
            "not with --api jetstream",
        ),
        (["--base-url", "http://x"], "--model/SMOKE_MODEL is required"),  # still required for openai
    ],
)
def test_jetstream_bad_arguments_exit_2(argv: list[str], message: str) -> None:
    run = run_main(argv)
    assert run.code == smoke.EXIT_USAGE
    assert message in run.summary["error"]


def test_jetstream_subprocess_against_a_local_server(server: ScriptedServer) -> None:
    """The file as the pod runs it: its own interpreter, env only."""
    server.script(smoke.JETSTREAM_GENERATE_PATH, Reply(503, b"starting", "text/plain"), Reply(body=GENERATE_OK))
    env = {k: v for k, v in os.environ.items() if k not in _PROGRAM_ENV}
    env |= {
        "SMOKE_BASE_URL": server.url,
        "SMOKE_API": "jetstream",
        "SMOKE_DEADLINE_SECONDS": "30",
        "SMOKE_INITIAL_BACKOFF_SECONDS": "0.05",
        "SMOKE_MAX_BACKOFF_SECONDS": "0.1",
    }
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], check=False, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["results"][0]["endpoint"] == "/generate"
    assert server.paths() == ["/generate", "/generate"]
