"""Tests for pods/saxml_publish.py.

The parsers are tested as pure functions. The flow runs against a real HTTP
server on 127.0.0.1, the sax-http stand-in (tests/standins/sax_http.py), in
either server generation.

In-process runs use a fake clock whose ``sleep`` only advances time, so long
deadlines cost nothing; a few runs use a real subprocess and real time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pods import saxml_publish as sp
from tests.control_plane import free_port  # outside the kernel's ephemeral range
from tests.standins.sax_http import SaxHttp, handler_for

SCRIPT = Path(__file__).resolve().parents[1] / "pods" / "saxml_publish.py"

KEY = "/sax/test/lm175b"
MODEL_PATH = "saxml.server.pax.lm.params.lm_cloud.LmCloudSpmd175B32Test"
CHECKPOINT = "None"
SUMMARY_KEYS = {"ok", "model_key", "action", "requested_replicas", "active_replicas", "seconds", "error"}

# Env vars the program reads; removed for subprocesses so the shell cannot leak in.
_PROGRAM_ENV = (
    "SAX_HTTP_URL",
    "SAX_MODEL_KEY",
    "SAX_MODEL_PATH",
    "SAX_CHECKPOINT",
    "SAX_REPLICAS",
    "SAX_PUBLISH_DEADLINE_SECONDS",
)


# ---------------------------------------------------------------------------
# A scriptable sax-http server (reference §2).
# ---------------------------------------------------------------------------


class ServerControl:
    """Start/stop a SaxHttp on a given or ephemeral port."""

    def __init__(self) -> None:
        self.servers: list[ThreadingHTTPServer] = []

    def start(self, fake: SaxHttp, port: int = 0) -> SaxHttp:
        server = ThreadingHTTPServer(("127.0.0.1", port), handler_for(fake))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.servers.append(server)
        fake.url = f"http://127.0.0.1:{server.server_address[1]}"
        return fake

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


@pytest.fixture()
def servers() -> Iterator[ServerControl]:
    control = ServerControl()
    yield control
    control.close()


@pytest.fixture(params=[2, 1], ids=["gen2", "gen1"])
def sax(request: pytest.FixtureRequest, servers: ServerControl) -> SaxHttp:
    """A running server of each generation (tests using it run twice)."""
    return servers.start(SaxHttp(request.param))


@pytest.fixture()
def sax2(servers: ServerControl) -> SaxHttp:
    return servers.start(SaxHttp(2))


@pytest.fixture()
def sax1(servers: ServerControl) -> SaxHttp:
    return servers.start(SaxHttp(1))


# ---------------------------------------------------------------------------
# Running the program in-process with a fake clock.
# ---------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        self.on_sleep: Callable[[], None] | None = None

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep()


@dataclasses.dataclass
class Run:
    code: int
    summary: dict[str, Any]
    clock: FakeClock


def args_for(url: str, replicas: int = 2, **extra: str) -> list[str]:
    argv = ["--http-url", url, "--model-key", KEY, "--model-path", MODEL_PATH, "--checkpoint", CHECKPOINT]
    argv += ["--replicas", str(replicas), "--poll-seconds", "15", "--request-timeout-seconds", "5"]
    for flag, value in extra.items():
        argv += [f"--{flag.replace('_', '-')}", value]
    return argv


def one_json_line(text: str) -> dict[str, Any]:
    lines = text.splitlines()
    assert len(lines) == 1, text
    summary = json.loads(lines[0])
    assert isinstance(summary, dict)
    assert set(summary) == SUMMARY_KEYS
    return summary


def run_main(argv: list[str], env: dict[str, str] | None = None, clock: FakeClock | None = None) -> Run:
    clock = clock or FakeClock()
    out = io.StringIO()
    code = sp.main(argv, env or {}, clock=clock, sleep=clock.sleep, out=out)
    return Run(code, one_json_line(out.getvalue()), clock)


def expected_publish(replicas: int = 2) -> dict[str, Any]:
    return {"model": KEY, "model_path": MODEL_PATH, "checkpoint": CHECKPOINT, "replicas": replicas}


# ---------------------------------------------------------------------------
# Pure parsers (reference §2).
# ---------------------------------------------------------------------------

LISTCELL_BODY = {
    "model": KEY,
    "model_path": MODEL_PATH,
    "checkpoint": "None",
    "max_replicas": 2,
    "active_replicas": 1,
}


def test_parse_listcell_detail_both_generations_share_one_shape() -> None:
    detail = sp.parse_listcell_detail(LISTCELL_BODY)
    assert detail == sp.ModelDetail(KEY, MODEL_PATH, "None", 2, 1)


def test_parse_listcell_detail_accepts_path_alias_and_digit_strings() -> None:
    body = {"path": MODEL_PATH, "checkpoint": "gs://b/ckpt", "max_replicas": "2", "active_replicas": "0"}
    assert sp.parse_listcell_detail(body) == sp.ModelDetail(None, MODEL_PATH, "gs://b/ckpt", 2, 0)


def test_parse_listcell_detail_prefers_model_path_over_path() -> None:
    body = {**LISTCELL_BODY, "path": "other"}
    assert sp.parse_listcell_detail(body).model_path == MODEL_PATH


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ([1, 2], "JSON object"),
        ({"model_path": MODEL_PATH, "checkpoint": "None", "max_replicas": 1}, "lacks active_replicas"),
        ({"checkpoint": "None", "max_replicas": 1, "active_replicas": 1}, "lacks path"),
        ({**LISTCELL_BODY, "active_replicas": True}, "non-negative integer"),
        ({**LISTCELL_BODY, "active_replicas": -1}, "non-negative integer"),
        ({**LISTCELL_BODY, "max_replicas": "two"}, "non-negative integer"),
        ({**LISTCELL_BODY, "max_replicas": 1.5}, "non-negative integer"),
        ({**LISTCELL_BODY, "checkpoint": None}, "must be a string"),
    ],
)
def test_parse_listcell_detail_rejects_other_shapes(payload: Any, message: str) -> None:
    with pytest.raises(sp.ResponseShapeError, match=message):
        sp.parse_listcell_detail(payload)


def test_parse_publish_echo_gen2_model_path() -> None:
    echo = sp.parse_publish_echo(expected_publish())
    assert echo == sp.PublishEcho(KEY, MODEL_PATH, CHECKPOINT, 2)


def test_parse_publish_echo_gen1_path() -> None:
    echo = sp.parse_publish_echo({"model": KEY, "path": MODEL_PATH, "checkpoint": CHECKPOINT, "replicas": "2"})
    assert echo == sp.PublishEcho(KEY, MODEL_PATH, CHECKPOINT, 2)


@pytest.mark.parametrize("payload", [{"model": KEY}, [], None, {"replicas": True}])
def test_parse_publish_echo_is_lenient(payload: Any) -> None:
    echo = sp.parse_publish_echo(payload)
    assert echo.model_path is None
    assert echo.replicas is None


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"detail": "NOT_FOUND: model /sax/test/x not found"}', "NOT_FOUND: model /sax/test/x not found"),
        (b'{"Error": "boom"}', "boom"),
        (b'{"message": "Invalid Request"}', "Invalid Request"),
        (
            b'{"detail": [{"loc": ["body", "replicas"], "msg": "field required", "type": "value_error.missing"}]}',
            "replicas: field required",
        ),
        (b"<html>Bad Gateway</html>", "<html>Bad Gateway</html>"),
        (b"", "(empty body)"),
        (b'"just a string"', '"just a string"'),
    ],
)
def test_error_message_both_generations(body: bytes, message: str) -> None:
    assert sp.error_message(body) == message


@given(st.binary(max_size=300))
def test_error_message_never_raises(body: bytes) -> None:
    assert isinstance(sp.error_message(body), str)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda c: st.lists(c) | st.dictionaries(st.text(max_size=12), c),
        max_leaves=10,
    )
)
def test_parsers_fail_only_with_shape_errors(payload: Any) -> None:
    with contextlib.suppress(sp.ResponseShapeError):
        sp.parse_listcell_detail(payload)
    sp.parse_publish_echo(payload)
    sp.classify_listcell(200, json.dumps(payload).encode(), KEY)


def test_message_matchers() -> None:
    assert sp.is_not_published_message("NOT_FOUND: model /sax/test/x not found")
    assert sp.is_not_published_message("model /sax/test/x not found: NotFound")
    assert not sp.is_not_published_message("admin server address not found")  # must stay retryable
    assert not sp.is_not_published_message("Not Found")
    assert sp.is_already_exists_message("ALREADY_EXISTS: model /sax/test/x already exists")
    assert sp.is_already_exists_message("model /sax/test/x is being unpublished, please retry later: already exists")
    assert sp.is_already_exists_message("model /sax/test/x is being unpublished, please retry later")
    assert not sp.is_already_exists_message("invalid model path")


def _body(payload: Any) -> bytes:
    return json.dumps(payload).encode()


@pytest.mark.parametrize(
    ("status", "payload", "kind"),
    [
        (200, LISTCELL_BODY, "published"),
        (200, {"unexpected": 1}, "fatal"),
        (200, {**LISTCELL_BODY, "model": "/sax/test/other"}, "fatal"),
        (500, {"detail": f"NOT_FOUND: model {KEY} not found"}, "not-published"),  # Gen-2
        (400, {"Error": f"model {KEY} not found"}, "not-published"),  # Gen-1
        (500, {"detail": "UNAVAILABLE: admin server not reachable"}, "retry"),
        (503, {"detail": "Service Unavailable"}, "retry"),
        (400, {"Error": "failed to connect to admin"}, "retry"),  # Gen-1 turns every exception into 400
        (400, {"message": "Invalid Request"}, "fatal"),  # Gen-1 unknown path
        (404, {"detail": "Not Found"}, "fatal"),  # Gen-2 unknown path: not a "model not found"
        (422, {"detail": [{"loc": ["body", "model"], "msg": "field required"}]}, "fatal"),
        (403, {"detail": "forbidden"}, "fatal"),
        (429, {"detail": "slow down"}, "retry"),
    ],
)
def test_classify_listcell(status: int, payload: Any, kind: str) -> None:
    assert sp.classify_listcell(status, _body(payload), KEY).kind == kind


@pytest.mark.parametrize(
    ("status", "payload", "kind"),
    [
        (200, expected_publish(), "accepted"),
        (200, {"model": KEY}, "accepted"),
        (500, {"detail": f"ALREADY_EXISTS: model {KEY} already exists"}, "already-exists"),  # Gen-2
        (400, {"Error": f"model {KEY} already exists"}, "already-exists"),  # Gen-1
        (500, {"detail": "UNAVAILABLE: admin"}, "retry"),
        (502, {}, "retry"),
        (400, {"Error": "invalid model path"}, "fatal"),
        (422, {"detail": [{"loc": ["body", "replicas"], "msg": "value is not a valid integer"}]}, "fatal"),
        (404, {"detail": "Not Found"}, "fatal"),
    ],
)
def test_classify_publish(status: int, payload: Any, kind: str) -> None:
    assert sp.classify_publish(status, _body(payload)).kind == kind


def test_classify_publish_fatal_keeps_server_message() -> None:
    outcome = sp.classify_publish(400, _body({"Error": "invalid model path foo"}))
    assert "HTTP 400" in outcome.message
    assert "invalid model path foo" in outcome.message


def test_backoff_doubles_up_to_the_poll_interval() -> None:
    assert [sp.backoff_delay(n, 15) for n in range(7)] == [0.5, 1, 2, 4, 8, 15, 15]
    assert sp.backoff_delay(0, 0.05) == 0.05
    assert sp.backoff_delay(10_000, 15) == 15


def _settings(**kw: Any) -> sp.Settings:
    base: dict[str, Any] = {
        "http_url": "http://h:8888",
        "model_key": KEY,
        "model_path": MODEL_PATH,
        "checkpoint": CHECKPOINT,
        "replicas": 2,
        "deadline_seconds": 60.0,
        "poll_seconds": 1.0,
        "request_timeout_seconds": 1.0,
    }
    return sp.Settings(**{**base, **kw})


def test_settings_differences() -> None:
    same = sp.ModelDetail(KEY, MODEL_PATH, CHECKPOINT, 2, 0)
    assert sp.settings_differences(same, _settings()) == []
    other = sp.ModelDetail(KEY, "x.Y", "gs://b/c", 1, 1)
    diffs = sp.settings_differences(other, _settings())
    assert diffs == [
        f"model_path 'x.Y' (requested '{MODEL_PATH}')",
        "checkpoint 'gs://b/c' (requested 'None')",
        "replicas 1 (requested 2)",
    ]


# ---------------------------------------------------------------------------
# Flags and env vars.
# ---------------------------------------------------------------------------

FULL_ENV = {
    "SAX_HTTP_URL": "http://sax-http.sax.svc:8888/",
    "SAX_MODEL_KEY": KEY,
    "SAX_MODEL_PATH": MODEL_PATH,
    "SAX_CHECKPOINT": "None",
    "SAX_REPLICAS": "2",
    "SAX_PUBLISH_DEADLINE_SECONDS": "120",
}


def test_settings_from_env_with_defaults() -> None:
    settings = sp.parse_settings([], {k: v for k, v in FULL_ENV.items() if k != "SAX_PUBLISH_DEADLINE_SECONDS"})
    assert settings == sp.Settings(
        http_url="http://sax-http.sax.svc:8888",
        model_key=KEY,
        model_path=MODEL_PATH,
        checkpoint="None",
        replicas=2,
        deadline_seconds=3600.0,
        poll_seconds=15.0,
        request_timeout_seconds=60.0,
    )


def test_flag_beats_env_and_empty_env_is_unset() -> None:
    env = {**FULL_ENV, "SAX_REPLICAS": "3", "SAX_PUBLISH_DEADLINE_SECONDS": ""}
    settings = sp.parse_settings(["--replicas", "1", "--checkpoint", "gs://b/ckpt"], env)
    assert settings.replicas == 1
    assert settings.checkpoint == "gs://b/ckpt"
    assert settings.deadline_seconds == 3600.0  # empty env -> default
    with pytest.raises(sp.UsageError, match="--model-key/SAX_MODEL_KEY is required"):
        sp.parse_settings([], {**FULL_ENV, "SAX_MODEL_KEY": "  "})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--replicas", "0"], ">= 1"),
        (["--replicas", "two"], "integer"),
        (["--replicas", "+2"], "integer"),
        (["--http-url", "sax-http:8888"], "http://host:port"),
        (["--http-url", "ftp://h:8888"], "http://host:port"),
        (["--http-url", "http://h:99999"], "bad port"),
        (["--http-url", "http://h:8888/?x=1"], "query"),
        (["--model-key", "lm175b"], "/sax/<cell>/<name>"),
        (["--model-key", "/sax/test"], "/sax/<cell>/<name>"),
        (["--model-key", "/foo/test/lm"], "/sax/<cell>/<name>"),
        (["--model-path", "a b"], "whitespace"),
        (["--deadline-seconds", "0"], "> 0"),
        (["--poll-seconds", "nan"], "> 0"),
        (["--request-timeout-seconds", "soon"], "number of seconds"),
        (["--no-such-flag"], "unrecognized"),
    ],
)
def test_bad_settings(argv: list[str], message: str) -> None:
    with pytest.raises(sp.UsageError, match=message):
        sp.parse_settings(argv, FULL_ENV)


@pytest.mark.parametrize(
    "missing", ["SAX_HTTP_URL", "SAX_MODEL_KEY", "SAX_MODEL_PATH", "SAX_CHECKPOINT", "SAX_REPLICAS"]
)
def test_required_settings(missing: str) -> None:
    with pytest.raises(sp.UsageError, match="is required"):
        sp.parse_settings([], {k: v for k, v in FULL_ENV.items() if k != missing})


def test_bad_args_exit_2_with_one_json_line() -> None:
    run = run_main(["--http-url", "http://127.0.0.1:1", "--replicas", "0"])
    assert run.code == sp.EXIT_USAGE
    assert run.summary["ok"] is False
    assert run.summary["action"] == "failed"
    assert "bad arguments" in run.summary["error"]


# ---------------------------------------------------------------------------
# The flow against a real HTTP server.
# ---------------------------------------------------------------------------


def test_fresh_publish_then_replicas_become_active(sax: SaxHttp) -> None:
    sax.activate_after = 3
    run = run_main(args_for(sax.url))

    assert run.code == sp.EXIT_OK, run.summary
    assert run.summary == {
        "ok": True,
        "model_key": KEY,
        "action": "published",
        "requested_replicas": 2,
        "active_replicas": 2,
        "seconds": 45.0,  # three 15 s polls on the fake clock
        "error": None,
    }
    # Exactly: one listcell (not published), one publish with the §2 body, then polls.
    assert [(r.method, r.path) for r in sax.requests] == [
        ("GET", "/listcell"),
        ("POST", "/publish"),
        *[("GET", "/listcell")] * 4,
    ]
    publish = sax.calls("POST", "/publish")[0]
    assert publish.body == expected_publish()
    assert type(publish.body["replicas"]) is int
    assert publish.content_type == "application/json"
    assert all(r.body == {"model": KEY} for r in sax.calls("GET", "/listcell"))
    assert run.clock.sleeps == [15.0, 15.0, 15.0]


def test_already_published_with_same_settings_is_not_republished(sax: SaxHttp) -> None:
    sax.preload(KEY, MODEL_PATH, CHECKPOINT)
    run = run_main(args_for(sax.url))
    assert run.code == sp.EXIT_OK
    assert run.summary["action"] == "already-published"
    assert run.summary["active_replicas"] == 2
    assert sax.calls("POST", "/publish") == []
    assert run.clock.sleeps == []


def test_already_published_but_still_loading_waits_without_publishing(sax: SaxHttp) -> None:
    sax.preload(KEY, MODEL_PATH, CHECKPOINT, polls_until_active=2)
    run = run_main(args_for(sax.url))
    assert run.code == sp.EXIT_OK
    assert run.summary["action"] == "already-published"
    assert sax.calls("POST", "/publish") == []
    assert len(sax.calls("GET", "/listcell")) == 3


@pytest.mark.parametrize(
    ("preload", "field"),
    [
        ({"model_path": "saxml.server.pax.lm.params.lm_cloud.LmCloudSpmd2BTest"}, "model_path"),
        ({"checkpoint": "gs://bucket/ckpt"}, "checkpoint 'gs://bucket/ckpt'"),
    ],
)
def test_published_with_other_settings_fails_and_asks_to_unpublish(
    sax: SaxHttp, preload: dict[str, Any], field: str
) -> None:
    sax.preload(KEY, **{"model_path": MODEL_PATH, "checkpoint": CHECKPOINT, **preload})
    run = run_main(args_for(sax.url))
    assert run.code == sp.EXIT_FAILED
    assert run.summary["action"] == "failed"
    assert field in run.summary["error"]
    assert "Unpublish it first" in run.summary["error"]
    assert sax.calls("POST", "/publish") == []


@pytest.mark.parametrize("published", [1, 3])
def test_a_changed_slice_count_updates_the_replicas_in_place(sax: SaxHttp, published: int) -> None:
    sax.preload(KEY, MODEL_PATH, CHECKPOINT, replicas=published)
    run = run_main(args_for(sax.url))
    assert run.code == sp.EXIT_OK, run.summary
    assert run.summary["action"] == "updated"
    assert run.summary["active_replicas"] == 2
    assert sax.calls("POST", "/publish") == []
    assert [r.body for r in sax.calls("PUT", "/update")] == [expected_publish()]


def test_replicas_and_model_path_both_changed_still_asks_to_unpublish(sax: SaxHttp) -> None:
    sax.preload(KEY, "saxml.server.pax.lm.params.lm_cloud.LmCloudSpmd2BTest", CHECKPOINT, replicas=1)
    run = run_main(args_for(sax.url))
    assert run.code == sp.EXIT_FAILED
    assert "Unpublish it first" in run.summary["error"]
    assert sax.calls("PUT", "/update") == []


def test_never_active_fails_after_deadline_naming_requested_and_active(sax: SaxHttp) -> None:
    sax.max_active = 1
    run = run_main(args_for(sax.url, deadline_seconds="100"))
    assert run.code == sp.EXIT_FAILED
    summary = run.summary
    assert summary["ok"] is False
    assert summary["action"] == "failed"
    assert summary["active_replicas"] == 1
    assert summary["requested_replicas"] == 2
    assert "deadline of 100s passed" in summary["error"]
    assert "requested 2, active 1" in summary["error"]
    assert "active_replicas=1" in summary["error"]  # the last observed state
    assert summary["seconds"] == 100.0  # the last sleep is cut at the deadline
    assert len(sax.calls("POST", "/publish")) == 1


def test_publish_5xx_is_retried_then_succeeds(sax2: SaxHttp) -> None:
    sax2.publish_errors = [(500, "UNAVAILABLE: admin server restarting"), (503, "try later")]
    run = run_main(args_for(sax2.url))
    assert run.code == sp.EXIT_OK, run.summary
    assert run.summary["action"] == "published"
    assert len(sax2.calls("POST", "/publish")) == 3
    assert all(r.body == expected_publish() for r in sax2.calls("POST", "/publish"))
    # Each failed publish is followed by a fresh /listcell (it may have been applied).
    assert [(r.method, r.path) for r in sax2.requests][:6] == [("GET", "/listcell"), ("POST", "/publish")] * 3
    assert run.clock.sleeps[:2] == [0.5, 1.0]  # backoff


def test_publish_4xx_fails_immediately_with_server_message(sax1: SaxHttp) -> None:
    sax1.publish_errors = [(400, "ValueError: invalid model path saxml.nope")]
    run = run_main(args_for(sax1.url))
    assert run.code == sp.EXIT_FAILED
    assert "HTTP 400" in run.summary["error"]
    assert "invalid model path saxml.nope" in run.summary["error"]
    assert len(sax1.calls("POST", "/publish")) == 1
    assert run.clock.sleeps == []


def test_publish_race_already_exists_ends_as_already_published(sax: SaxHttp) -> None:
    # Someone publishes between our /listcell and our /publish.
    sax.publish_errors = [(500, f"ALREADY_EXISTS: model {KEY} already exists")]
    sax.listcell_errors = [(500, f"NOT_FOUND: model {KEY} not found")]
    sax.preload(KEY, MODEL_PATH, CHECKPOINT)
    run = run_main(args_for(sax.url))
    assert run.code == sp.EXIT_OK, run.summary
    assert run.summary["action"] == "already-published"
    assert len(sax.calls("POST", "/publish")) == 1


def test_listcell_errors_while_admin_starts_are_retried(sax: SaxHttp) -> None:
    sax.listcell_errors = [(500, "UNAVAILABLE: failed to locate the admin server")] * 3
    run = run_main(args_for(sax.url))
    assert run.code == sp.EXIT_OK, run.summary
    assert run.summary["action"] == "published"
    assert run.clock.sleeps[:3] == [0.5, 1.0, 2.0]


def test_connection_refused_at_first(servers: ServerControl) -> None:
    port = free_port()
    fake = SaxHttp(2)
    clock = FakeClock()

    def start_on_third_sleep() -> None:
        if len(clock.sleeps) == 3:
            servers.start(fake, port)

    clock.on_sleep = start_on_third_sleep
    run = run_main(args_for(f"http://127.0.0.1:{port}"), clock=clock)
    assert run.code == sp.EXIT_OK, run.summary
    assert run.summary["action"] == "published"
    assert clock.sleeps[:3] == [0.5, 1.0, 2.0]
    assert fake.calls("POST", "/publish")[0].body == expected_publish()


def test_unreachable_server_fails_at_deadline_with_last_error() -> None:
    run = run_main(args_for(f"http://127.0.0.1:{free_port()}", deadline_seconds="30"))
    assert run.code == sp.EXIT_FAILED
    assert run.summary["active_replicas"] is None
    assert "requested 2, active unknown" in run.summary["error"]
    assert "GET http://127.0.0.1:" in run.summary["error"]
    assert run.summary["seconds"] == 30.0


def test_model_unpublished_while_waiting_fails(sax: SaxHttp) -> None:
    sax.activate_after = 5
    clock = FakeClock()

    def unpublish_on_second_sleep() -> None:
        if len(clock.sleeps) == 2:
            sax.models.pop(KEY, None)

    clock.on_sleep = unpublish_on_second_sleep
    run = run_main(args_for(sax.url), clock=clock)
    assert run.code == sp.EXIT_FAILED
    assert "disappeared while waiting" in run.summary["error"]


def test_wrong_endpoint_fails_fast(sax: SaxHttp) -> None:
    run = run_main(args_for(sax.url + "/not-sax"))
    assert run.code == sp.EXIT_FAILED
    assert "--http-url" in run.summary["error"]
    assert run.clock.sleeps == []


def test_settings_from_env_drive_a_run(sax: SaxHttp) -> None:
    env = {**FULL_ENV, "SAX_HTTP_URL": sax.url, "SAX_REPLICAS": "1"}
    run = run_main(["--poll-seconds", "1"], env=env)
    assert run.code == sp.EXIT_OK
    assert run.summary["requested_replicas"] == 1
    assert sax.calls("POST", "/publish")[0].body == expected_publish(replicas=1)


# ---------------------------------------------------------------------------
# Real subprocesses (the way the Job runs it).
# ---------------------------------------------------------------------------


def run_script(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    clean = {k: v for k, v in os.environ.items() if k not in _PROGRAM_ENV}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *argv],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return proc.returncode, one_json_line(proc.stdout), proc.stderr


def test_subprocess_fresh_publish(sax1: SaxHttp) -> None:
    sax1.activate_after = 2
    argv = args_for(sax1.url, poll_seconds="0.05", deadline_seconds="20")
    # A proxy must be ignored: proxies drop GET bodies (reference §7 gotcha 4).
    code, summary, stderr = run_script(argv, {"http_proxy": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"})
    assert code == 0, stderr
    assert summary["ok"] is True
    assert summary["action"] == "published"
    assert summary["active_replicas"] == 2
    assert sax1.calls("POST", "/publish")[0].body == expected_publish()
    assert "publish accepted" in stderr


def test_subprocess_never_active_exits_1(sax2: SaxHttp) -> None:
    sax2.max_active = 0
    env = {"SAX_PUBLISH_DEADLINE_SECONDS": "0.5"}
    code, summary, _ = run_script(args_for(sax2.url, poll_seconds="0.05"), env)
    assert code == 1
    assert summary["action"] == "failed"
    assert "requested 2, active 0" in summary["error"]
    assert 0.5 <= summary["seconds"] < 5


def test_subprocess_sigterm_still_reports(sax2: SaxHttp) -> None:
    sax2.max_active = 0
    clean = {k: v for k, v in os.environ.items() if k not in _PROGRAM_ENV}
    argv = args_for(sax2.url, poll_seconds="0.05", deadline_seconds="60")
    with subprocess.Popen(
        [sys.executable, str(SCRIPT), *argv], env=clean, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        # Wait until it is polling, then stop it the way Kubernetes does.
        deadline = time.monotonic() + 10
        while not sax2.calls("POST", "/publish") and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        stdout, _ = proc.communicate(timeout=10)
    assert proc.returncode == 1
    summary = one_json_line(stdout)
    assert summary["action"] == "failed"
    assert "terminated by signal SIGTERM" in summary["error"]


def test_unexpected_error_still_reports_one_line() -> None:
    def broken_transport(method: str, url: str, payload: Any, timeout: float) -> tuple[int, bytes]:
        raise RuntimeError("bug")

    out = io.StringIO()
    clock = FakeClock()
    code = sp.main(
        args_for("http://127.0.0.1:1"), {}, transport=broken_transport, clock=clock, sleep=clock.sleep, out=out
    )
    assert code == sp.EXIT_FAILED
    summary = one_json_line(out.getvalue())
    assert summary["error"] == "RuntimeError: bug"
    assert summary["model_key"] == KEY


def test_subprocess_bad_args_exits_2() -> None:
    code, summary, stderr = run_script(["--http-url", "http://127.0.0.1:1"], {"SAX_REPLICAS": ""})
    assert code == 2
    assert summary["action"] == "failed"
    assert "is required" in summary["error"]
    assert "bad arguments" in stderr
