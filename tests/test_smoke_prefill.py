"""The smoke test proves that a prefill pod did the prefill, and that the KV cache reached decode,
against local stand-in servers.

A stand-in gateway answers every completion; a stand-in prefill leader serves Prometheus text
with `vllm:prompt_tokens_total`. When the gateway routes through prefill, the counter rises by
the prompt's length; when decode answers alone, it does not, and the smoke test must fail.

Stand-in decode leaders serve what vLLM v0.26.0 with tpu-inference's TPUConnectorHMA shows
(tests/standins/vllm_metrics.py): per long prompt the gateway has decode load the prompt's KV from
prefill (`vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}` rises, the TPU
connector's series stay flat, as HMA leaves them), compute the prompt itself (the sidecar's
decode-only fallback: `source="local_compute"` rises), count nothing, count the prompt only after
answering, or fail a pull as the non-HMA TPUConnector counts it
(`vllm:tpu_num_failed_transfers_total` rises); or decode writes no by-source series at all.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pods import smoke_request as smoke
from tests.standins import vllm_metrics

ANSWER = {"choices": [{"text": "fine", "message": {"content": "fine"}}]}
SCRIPT = Path(__file__).resolve().parents[1] / "pods" / "smoke_request.py"
EXTERNAL = smoke.EXTERNAL_KV_SERIES
LOCAL = smoke.LOCAL_COMPUTE_SERIES
COUNT = smoke.KV_TRANSFER_COUNT_METRIC
FAILED = smoke.KV_FAILED_TRANSFERS_METRIC
DECODE_HOST = "vllm-decode-leaders.stand.test"  # resolved by Stand.resolve, as a headless Service would be
LATE_SECONDS = 0.3  # a prompt counted this long after the answer

# What decode does with each long prompt.
MOVES = "moves"  # loads the prompt's KV from prefill through TPUConnectorHMA
FALLBACK = "fallback"  # computes the prompt itself: the sidecar's decode-only fallback, or no KV moved
FLAT = "flat"  # counts nothing (its stats never arrive)
FAILS = "fails"  # a non-HMA TPUConnector whose pull was not ready in time: counted external, and failed
LATE = "late"  # MOVES, counted LATE_SECONDS after the answer
ABSENT = "absent"  # MOVES, but its /metrics has no vllm:prompt_tokens_by_source (not vLLM v0.26.0)
NO_TPU = "no-tpu"  # MOVES through a connector that writes no TPU connector series


def before_hma(*, pods: int = 1) -> dict[str, float | None]:
    """What the decode leaders show before the long prompt: engine 0's history, summed over `pods` leaders."""
    return {EXTERNAL: 120.0 * pods, LOCAL: 40.0 * pods, COUNT: 0.0, FAILED: 0.0}


class Decode:
    """One stand-in decode leader: two engines; 120 tokens loaded and 40 computed already, on engine 0."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.engines = {0: vllm_metrics.Engine(local_compute=40, external_kv_transfer=120), 1: vllm_metrics.Engine()}
        self.lock = threading.Lock()
        self.scrapes = 0

    def act(self, tokens: int, mode: str | None = None) -> None:
        """What a long prompt does here. It lands on engine 1: only a sum over label sets sees it."""
        mode = mode or self.mode
        if mode == LATE:
            threading.Timer(LATE_SECONDS, self.act, (tokens, MOVES)).start()
            return
        with self.lock:
            engine = self.engines[1]
            if mode in (MOVES, ABSENT, NO_TPU):
                engine.load_remote_prefill(tokens)  # TPUConnectorHMA: no connector metric moves
            elif mode == FALLBACK:
                engine.compute_prompt(tokens)
            elif mode == FAILS:
                engine.load_remote_prefill(tokens)  # counted by the scheduler before the pull
                engine.fail_pull()

    def text(self) -> str:
        with self.lock:
            self.scrapes += 1
            return vllm_metrics.metrics_text(
                "m", self.engines, tpu_connector=self.mode != NO_TPU, by_source=self.mode != ABSENT
            )


def prompt_tokens(prompt: str) -> int:
    """The stand-ins' token count: 4 bytes a token."""
    return len(prompt.encode()) // 4


class Stand:
    """One stand-in gateway, one stand-in prefill leader and, when `kv` is given, stand-in decode leaders on loopback.

    `kv` is what each decode leader does with a long prompt (one mode per leader); with more than
    one, the leaders listen on 127.0.0.1, 127.0.0.2, ... at one port, behind DECODE_HOST.
    """

    def __init__(self, prefills: bool, kv: tuple[str, ...] = ()):
        self.prefills = prefills
        self.kv = kv
        self.prompt_tokens = 120.0
        self.prompts: list[str] = []
        self.decodes = [Decode(mode) for mode in kv]
        stand = self

        class Gateway(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = body.get("prompt") or body["messages"][0]["content"]
                stand.prompts.append(prompt)
                if stand.prefills and len(prompt.encode()) >= 64:  # the decider's threshold, 16 x 4 bytes
                    stand.prompt_tokens += prompt_tokens(prompt)
                    for decode in stand.decodes:
                        decode.act(prompt_tokens(prompt))
                self._send(200, json.dumps(ANSWER).encode(), "application/json")

            def _send(self, status: int, payload: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Prefill(Gateway):
            def do_GET(self) -> None:
                text = (
                    "# TYPE vllm:prompt_tokens_total counter\n"
                    f'vllm:prompt_tokens_total{{model_name="m"}} {stand.prompt_tokens}\n'
                )
                self._send(200, text.encode(), "text/plain")

        self.servers = [self._server(Gateway), self._server(Prefill)]
        self.decode_port = 0
        for index, decode in enumerate(self.decodes):

            class DecodeMetrics(Gateway):
                leader = decode

                def do_GET(self) -> None:
                    self._send(200, self.leader.text().encode(), "text/plain; version=0.0.4; charset=utf-8")

            server = self._server(DecodeMetrics, f"127.0.0.{index + 1}", self.decode_port)
            self.decode_port = server.server_address[1]
            self.servers.append(server)

    @staticmethod
    def _server(handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def server_bind(self) -> None:  # no reverse DNS lookup
                socketserver.TCPServer.server_bind(self)

        server = Server((host, port), handler)
        # A short poll interval keeps shutdown() (once per server per test) from costing 0.5 s.
        threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
        return server

    def url(self, index: int) -> str:
        return f"http://127.0.0.1:{self.servers[index].server_address[1]}"

    def decode_url(self) -> str:
        host = "127.0.0.1" if len(self.decodes) == 1 else DECODE_HOST
        return f"http://{host}:{self.decode_port}/metrics"

    def resolve(self, host: str, port: int) -> list[str]:
        if host == DECODE_HOST:
            return [f"127.0.0.{index + 1}" for index in range(len(self.decodes))]
        return smoke.resolve_all(host, port)

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


def run(stand: Stand, *, prefill: bool = True, decode: bool = True, deadline: str = "3") -> tuple[int, dict[str, Any]]:
    out = io.StringIO()
    argv = ["--base-url", stand.url(0), "--model", "m", "--deadline-seconds", deadline]
    argv += ["--initial-backoff-seconds", "0.2", "--max-backoff-seconds", "0.5"]
    if prefill:
        argv += ["--prefill-metrics-url", stand.url(1) + "/metrics"]
    if decode and stand.decodes:
        argv += ["--decode-metrics-url", stand.decode_url()]
    runtime = smoke.Runtime(log=lambda _m: None, resolve=stand.resolve)
    code = smoke.main(argv, env={}, runtime=runtime, out=out)
    return code, json.loads(out.getvalue())


def entry(summary: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [r for r in summary["results"] if r["endpoint"] == name]
    return dict(found)


@pytest.fixture
def routed() -> Iterator[Stand]:
    stand = Stand(prefills=True)
    yield stand
    stand.close()


@pytest.fixture
def decode_only() -> Iterator[Stand]:
    stand = Stand(prefills=False)
    yield stand
    stand.close()


@pytest.fixture
def stand(request: pytest.FixtureRequest) -> Iterator[Stand]:
    """A routed stand whose decode leaders behave as the test's parameter says (a mode or a tuple of modes)."""
    modes = request.param if isinstance(request.param, tuple) else (request.param,)
    try:
        built = Stand(prefills=True, kv=modes)
    except OSError as exc:  # 127.0.0.2 and up are loopback on Linux; elsewhere they may not bind
        pytest.skip(f"cannot listen on a second loopback address: {exc}")
    yield built
    built.close()


# ---------------------------------------------------------------------------
# The prefill check
# ---------------------------------------------------------------------------


def test_passes_when_a_prefill_pod_processed_the_prompt(routed: Stand) -> None:
    code, summary = run(routed)
    assert code == smoke.EXIT_OK, summary
    prefill = summary["results"][-1]
    assert prefill["endpoint"] == "prefill" and prefill["ok"]
    assert "120 ->" in prefill["sample"]


def test_fails_when_decode_answers_without_a_prefill(decode_only: Stand) -> None:
    code, summary = run(decode_only)
    assert code == smoke.EXIT_FAILED
    assert [r["endpoint"] for r in summary["results"] if not r["ok"]] == ["prefill"]
    assert "no prefill pod processed the prompt" in summary["results"][-1]["error"]


def test_the_checked_prompt_is_long_enough_to_be_disaggregated_and_new_each_time(routed: Stand) -> None:
    run(routed)
    long_prompts = [p for p in routed.prompts if len(p.encode()) >= smoke.PREFILL_PROMPT_BYTES]
    assert long_prompts
    # The decider's 16 uncached tokens at the picker's 4 bytes a token: 64 bytes; the greeting is shorter.
    assert len(b"How are you today?") < 64
    assert smoke.long_prompt("x", "1") != smoke.long_prompt("x", "2")


def test_prompt_tokens_sums_every_sample() -> None:
    text = 'vllm:prompt_tokens_total{model_name="a"} 10\nvllm:prompt_tokens_total{model_name="b"} 5.5\nother 3\n'
    assert smoke.prompt_tokens(text) == 15.5
    assert smoke.prompt_tokens("other 3\n") is None


def test_a_metrics_url_that_is_not_http_host_port_is_refused() -> None:
    with pytest.raises(smoke.UsageError, match="prefill-metrics-url"):
        smoke.parse_settings(["--base-url", "http://x", "--model", "m", "--prefill-metrics-url", "x"], env={})


# ---------------------------------------------------------------------------
# The KV-transfer check
# ---------------------------------------------------------------------------


def long_prompts(stand: Stand) -> list[str]:
    return [p for p in stand.prompts if len(p.encode()) >= smoke.PREFILL_PROMPT_BYTES]


@pytest.mark.parametrize("stand", [MOVES], indirect=True)
def test_passes_when_decode_loaded_the_prompt_from_prefill_under_hma(stand: Stand) -> None:
    """A good transfer as TPUConnectorHMA shows it: external_kv_transfer rises, the transfer-time count stays 0.

    The previous design required vllm:tpu_kv_transfer_time_ms_count to rise and so failed this case,
    which is every real run: TPUConnectorHMAWorker._pull_kv (tpu-inference v0.26.0,
    tpu_connector_hma.py:434-487) never records a transfer.
    """
    code, summary = run(stand)
    assert code == smoke.EXIT_OK, summary
    assert [r["endpoint"] for r in summary["results"]] == [
        "/v1/completions",
        "/v1/chat/completions",
        "prefill",
        "kv_transfer",
    ]
    kv = entry(summary, "kv_transfer")
    assert kv["ok"] and kv["error"] is None and kv["attempts"] == 1 and kv["status"] == 200
    (prompt,) = long_prompts(stand)
    loaded = 120 + prompt_tokens(prompt)
    # Summed over both engines' label sets: 120 on engine 0, the new prompt on engine 1.
    assert kv["before"] == before_hma()
    assert kv["after"] == {**before_hma(), EXTERNAL: float(loaded)}  # transfer-time count still 0
    assert kv["sample"] == (
        f"{EXTERNAL} on 1 decode pod(s): 120 -> {loaded}, {FAILED} 0 -> 0; "
        f"{COUNT} 0 -> 0 (not judged: TPUConnectorHMA does not record it)"
    )
    assert entry(summary, "prefill")["ok"]


@pytest.mark.parametrize("stand", [FALLBACK], indirect=True)
def test_fails_when_decode_computed_the_prompt_itself(stand: Stand) -> None:
    # Prefill computed the prompt, yet decode computed it again: the prefill check alone passes this.
    code, summary = run(stand, deadline="1.5")
    assert code == smoke.EXIT_FAILED
    assert [r["endpoint"] for r in summary["results"] if not r["ok"]] == ["kv_transfer"]
    kv = entry(summary, "kv_transfer")
    before, after = kv["before"][LOCAL], kv["after"][LOCAL]
    assert after == before + prompt_tokens(long_prompts(stand)[-1])
    assert kv["error"].startswith(
        f"no KV transferred to the decode leaders ({EXTERNAL} 120 -> 120; "
        f"decode computed the prompt itself: local_compute {before:g} -> {after:g})"
    ), kv
    assert "deadline of 1.5s passed" in kv["error"]
    # Flat is retried with a new completion; decode's stats were in, so no attempt waited for them.
    assert kv["attempts"] >= 2 and len(long_prompts(stand)) == kv["attempts"]
    assert stand.decodes[0].scrapes == 2 * kv["attempts"]  # read before and after, never polled
    assert kv["after"][EXTERNAL] == 120.0 and kv["sample"] is None
    assert summary["error"] == "failed: kv_transfer"


@pytest.mark.parametrize("stand", [FLAT], indirect=True)
def test_fails_when_decode_counts_no_prompt_at_all(stand: Stand) -> None:
    code, summary = run(stand, deadline="1.5")
    assert code == smoke.EXIT_FAILED
    kv = entry(summary, "kv_transfer")
    assert kv["error"].startswith(
        f"no KV transferred to the decode leaders ({EXTERNAL} 120 -> 120; "
        "local_compute 40 -> 40: decode counted no new prompt)"
    ), kv
    assert "deadline of 1.5s passed" in kv["error"]
    assert kv["after"] == before_hma()
    # The decode metrics were polled (the stats may be late) until the deadline cut the settle window.
    assert stand.decodes[0].scrapes > 2 * kv["attempts"]


@pytest.mark.parametrize("stand", [FAILS], indirect=True)
def test_fails_at_once_when_a_kv_transfer_failed(stand: Stand) -> None:
    """The failed-transfer counter guards the non-HMA TPUConnector (TPUConnectorHMA never increments it).

    Its rise fails the check even though the scheduler counted the prompt as external_kv_transfer.
    """
    code, summary = run(stand)
    assert code == smoke.EXIT_FAILED
    assert [r["endpoint"] for r in summary["results"] if not r["ok"]] == ["kv_transfer"]
    kv = entry(summary, "kv_transfer")
    assert kv["error"].startswith(f"KV transfers failed ({FAILED} 0 -> 1)"), kv
    assert "not retried" in kv["error"] and kv["attempts"] == 1
    (prompt,) = long_prompts(stand)
    assert kv["before"] == before_hma()
    assert kv["after"] == {**before_hma(), EXTERNAL: 120.0 + prompt_tokens(prompt), FAILED: 1.0}


@pytest.mark.parametrize("stand", [ABSENT], indirect=True)
def test_fails_at_once_when_decode_shows_no_prompt_tokens_by_source(stand: Stand) -> None:
    code, summary = run(stand)
    assert code == smoke.EXIT_FAILED
    kv = entry(summary, "kv_transfer")
    assert kv["error"].startswith(f"{EXTERNAL} is absent from the metrics of decode pod(s) 127.0.0.1 "), kv
    assert "not retried" in kv["error"] and kv["attempts"] == 1
    # A figure some leader lacks is null; the connector's series are there.
    assert kv["before"] == kv["after"] == {EXTERNAL: None, LOCAL: None, COUNT: 0.0, FAILED: 0.0}


@pytest.mark.parametrize("stand", [NO_TPU], indirect=True)
def test_the_transfer_time_count_is_reported_not_judged(stand: Stand) -> None:
    code, summary = run(stand)
    assert code == smoke.EXIT_OK, summary
    kv = entry(summary, "kv_transfer")
    assert kv["before"][COUNT] is None and kv["after"][COUNT] is None and kv["after"][FAILED] == 0.0
    assert kv["sample"].endswith(f"{COUNT} absent -> absent (not judged: TPUConnectorHMA does not record it)")


@pytest.mark.parametrize("stand", [LATE], indirect=True)
def test_a_prompt_counted_just_after_the_answer_still_passes_first_time(stand: Stand) -> None:
    assert smoke.DECODE_SETTLE_SECONDS > LATE_SECONDS + smoke.DECODE_POLL_SECONDS
    code, summary = run(stand)
    assert code == smoke.EXIT_OK, summary
    kv = entry(summary, "kv_transfer")
    (prompt,) = long_prompts(stand)
    assert kv["attempts"] == 1 and kv["after"] == {**before_hma(), EXTERNAL: 120.0 + prompt_tokens(prompt)}
    assert kv["seconds"] >= LATE_SECONDS


@pytest.mark.parametrize(
    ("stand", "ok", "message"),
    [
        ((FLAT, MOVES), True, f"{EXTERNAL} on 2 decode pod(s): 240 -> "),
        ((MOVES, FAILS), False, f"KV transfers failed ({FAILED} 0 -> 1)"),
        ((MOVES, ABSENT), False, f"{EXTERNAL} is absent from the metrics of decode pod(s) 127.0.0.2 "),
    ],
    indirect=["stand"],
)
def test_sums_over_every_address_of_the_decode_service(stand: Stand, ok: bool, message: str) -> None:
    code, summary = run(stand)
    kv = entry(summary, "kv_transfer")
    assert (code == smoke.EXIT_OK) is ok and kv["ok"] is ok, summary
    assert (kv["sample"] if ok else kv["error"]).startswith(message), kv
    assert all(decode.scrapes >= 2 for decode in stand.decodes)


@pytest.mark.parametrize("stand", [MOVES], indirect=True)
def test_the_kv_check_runs_without_the_prefill_check(stand: Stand) -> None:
    code, summary = run(stand, prefill=False)
    assert code == smoke.EXIT_OK, summary
    assert [r["endpoint"] for r in summary["results"]] == ["/v1/completions", "/v1/chat/completions", "kv_transfer"]


@pytest.mark.parametrize("stand", [FAILS, FALLBACK], indirect=True)
def test_without_the_decode_flag_the_prefill_check_is_unchanged(stand: Stand) -> None:
    code, summary = run(stand, decode=False)
    assert code == smoke.EXIT_OK, summary
    assert [r["endpoint"] for r in summary["results"]] == ["/v1/completions", "/v1/chat/completions", "prefill"]
    prefill = entry(summary, "prefill")
    assert set(prefill) == {f.name for f in dataclasses.fields(smoke.EndpointResult)}
    assert (
        prefill["ok"]
        and prefill["attempts"] == 1
        and prefill["sample"].startswith(f"{smoke.PROMPT_TOKENS_METRIC} on 1 prefill pod(s): 120 -> ")
    )
    assert stand.decodes[0].scrapes == 0


def test_unreadable_decode_metrics_hold_back_the_completion(routed: Stand) -> None:
    with socketserver.TCPServer(("127.0.0.1", 0), BaseHTTPRequestHandler, bind_and_activate=False) as closed:
        closed.server_bind()  # bound, never listening: connections are refused
        port = closed.server_address[1]
        out = io.StringIO()
        argv = [
            "--base-url",
            routed.url(0),
            "--model",
            "m",
            "--deadline-seconds",
            "1",
            "--initial-backoff-seconds",
            "0.2",
        ]
        argv += ["--max-backoff-seconds", "0.5", "--prefill-metrics-url", routed.url(1) + "/metrics"]
        argv += ["--decode-metrics-url", f"http://127.0.0.1:{port}/metrics"]
        code = smoke.main(argv, env={}, runtime=smoke.Runtime(log=lambda _m: None), out=out)
    summary = json.loads(out.getvalue())
    assert code == smoke.EXIT_FAILED
    assert "Connection refused" in entry(summary, "kv_transfer")["error"]
    assert entry(summary, "kv_transfer")["before"] is None
    assert entry(summary, "prefill")["error"].startswith(
        "completion not sent: the kv_transfer metrics could not be read"
    )
    assert not [p for p in routed.prompts if len(p.encode()) >= smoke.PREFILL_PROMPT_BYTES]


def test_decode_metrics_url_falls_back_to_its_env_var_and_the_flag_wins() -> None:
    base = ["--base-url", "http://x", "--model", "m"]
    env = {"SMOKE_DECODE_METRICS_URL": "http://vllm-decode-leaders.ns.svc.cluster.local:8000/metrics"}
    assert smoke.parse_settings(base, env).decode_metrics_url == env["SMOKE_DECODE_METRICS_URL"]
    flag = smoke.parse_settings([*base, "--decode-metrics-url", "http://d:9/metrics"], env)
    assert flag.decode_metrics_url == "http://d:9/metrics"
    assert smoke.parse_settings(base, {"SMOKE_DECODE_METRICS_URL": " "}).decode_metrics_url is None
    assert smoke.parse_settings(base, {}).decode_metrics_url is None


@pytest.mark.parametrize("url", ["x", "https://d:9/metrics", "http://d/metrics", "http://d:99999/metrics"])
def test_a_decode_metrics_url_that_is_not_http_host_port_is_refused(url: str) -> None:
    with pytest.raises(smoke.UsageError, match="--decode-metrics-url/SMOKE_DECODE_METRICS_URL"):
        smoke.parse_settings(["--base-url", "http://x", "--model", "m", "--decode-metrics-url", url], env={})


def test_sample_sum_adds_every_label_set_of_exactly_that_name() -> None:
    text = "\n".join(
        [
            f"# HELP {COUNT} not a sample",
            f'{COUNT}{{engine="0",model_name="m"}} 12.0',
            f'{COUNT}{{engine="1",model_name="we}}ird \\"name\\" 9"}} 1.0 1712345678000',  # a timestamp after the value
            f"{COUNT} 2",
            f'{COUNT}_extra{{engine="0"}} 100',
            'vllm:tpu_kv_prepare_time_ms_count{engine="0"} 100',
            'vllm:tpu_kv_transfer_time_ms_bucket{engine="0",le="+Inf"} 100',
        ]
    )
    assert smoke.sample_sum(text, COUNT) == 15.0
    assert smoke.sample_sum(text, FAILED) is None
    with pytest.raises(ValueError, match="without a number"):
        smoke.sample_sum(f'{COUNT}{{engine="0"}} lots\n', COUNT)
    with pytest.raises(ValueError, match="unterminated"):
        smoke.sample_sum(f'{COUNT}{{engine="0}} 1\n', COUNT)  # the quote never closes
    with pytest.raises(ValueError, match="malformed"):
        smoke.sample_sum(f"{COUNT}{{engine=0}} 1\n", COUNT)  # an unquoted value


def test_sample_sum_filters_on_labels() -> None:
    name = smoke.PROMPT_TOKENS_BY_SOURCE_METRIC
    text = "\n".join(
        [
            f'{name}{{engine="0",model_name="m",source="external_kv_transfer"}} 120.0',
            f'{name}{{engine="1",model_name="a,source=\\"local_compute\\"}}",source="external_kv_transfer"}} 5.0',
            f'{name}{{engine="0",model_name="m",source="local_compute"}} 40.0',
            f'{name}{{ engine="1", source="local_compute", }} 2.0',  # spaces and a trailing comma
            f'{name}{{engine="0",model_name="m"}} 1000.0',  # no source label: never matches a source
        ]
    )
    assert smoke.sample_sum(text, name, {"source": "external_kv_transfer"}) == 125.0
    assert smoke.sample_sum(text, name, {"source": "local_compute"}) == 42.0
    assert smoke.sample_sum(text, name, {"source": "local_compute", "engine": "1"}) == 2.0
    assert smoke.sample_sum(text, name, {"source": "local_cache_hit"}) is None
    assert smoke.sample_sum(text, name) == 1167.0


def test_sample_sum_reads_the_metrics_as_vllm_writes_them() -> None:
    engines = {
        0: vllm_metrics.Engine(local_compute=7, local_cache_hit=16, external_kv_transfer=900, pulls_ms=[5.0, 60_000.0]),
        1: vllm_metrics.Engine(external_kv_transfer=33, pulls_ms=[1.0], failed_pulls=2),
    }
    text = vllm_metrics.metrics_text("Qwen/Qwen3.5-397B-A17B-FP8", engines)
    by_source = smoke.PROMPT_TOKENS_BY_SOURCE_METRIC
    assert smoke.sample_sum(text, by_source, {"source": smoke.EXTERNAL_KV_SOURCE}) == 933.0
    assert smoke.sample_sum(text, by_source, {"source": smoke.LOCAL_COMPUTE_SOURCE}) == 7.0
    assert smoke.sample_sum(text, smoke.PROMPT_TOKENS_METRIC) == 956.0  # the three sources add up to it
    assert smoke.sample_sum(text, COUNT) == 3.0
    assert smoke.sample_sum(text, FAILED) == 2.0
    without = vllm_metrics.metrics_text("m", engines, tpu_connector=False, by_source=False)
    assert smoke.sample_sum(without, COUNT) is None and smoke.sample_sum(without, FAILED) is None
    assert smoke.sample_sum(without, by_source, {"source": smoke.EXTERNAL_KV_SOURCE}) is None


# ---------------------------------------------------------------------------
# As the Job runs it: a subprocess configured through env vars
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("stand", "code"), [(MOVES, smoke.EXIT_OK), (FAILS, smoke.EXIT_FAILED)], indirect=["stand"])
def test_subprocess_with_env_vars(stand: Stand, code: int) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SMOKE_")}
    env |= {
        "SMOKE_BASE_URL": stand.url(0),
        "SMOKE_MODEL": "m",
        "SMOKE_DEADLINE_SECONDS": "20",
        "SMOKE_INITIAL_BACKOFF_SECONDS": "0.05",
        "SMOKE_MAX_BACKOFF_SECONDS": "0.1",
        "SMOKE_PREFILL_METRICS_URL": stand.url(1) + "/metrics",
        "SMOKE_DECODE_METRICS_URL": stand.decode_url(),
    }
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == code, proc.stderr
    (line,) = proc.stdout.splitlines()
    kv = entry(json.loads(line), "kv_transfer")
    assert kv["ok"] is (code == smoke.EXIT_OK)
    assert f"kv_transfer attempt 1: {'ok' if kv['ok'] else 'KV transfers failed'}" in proc.stderr
