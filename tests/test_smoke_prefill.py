"""The smoke test proves that a prefill pod did the prefill, against local stand-in servers.

A stand-in gateway answers every completion; a stand-in prefill leader serves Prometheus text
with `vllm:prompt_tokens_total`. When the gateway routes through prefill, the counter rises by
the prompt's length; when decode answers alone, it does not, and the smoke test must fail.
"""

from __future__ import annotations

import io
import json
import socketserver
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from pods import smoke_test as smoke

ANSWER = {"choices": [{"text": "fine", "message": {"content": "fine"}}]}


class Stand:
    """One stand-in gateway and one stand-in prefill leader on loopback."""

    def __init__(self, prefills: bool):
        self.prefills = prefills
        self.prompt_tokens = 120.0
        self.prompts: list[str] = []
        stand = self

        class Gateway(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = body.get("prompt") or body["messages"][0]["content"]
                stand.prompts.append(prompt)
                if stand.prefills and len(prompt.encode()) >= 64:  # the decider's threshold, 16 x 4 bytes
                    stand.prompt_tokens += len(prompt.encode()) / 4
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

    @staticmethod
    def _server(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def server_bind(self) -> None:  # no reverse DNS lookup
                socketserver.TCPServer.server_bind(self)

        server = Server(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def url(self, index: int) -> str:
        return f"http://127.0.0.1:{self.servers[index].server_address[1]}"

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


def run(stand: Stand) -> tuple[int, dict[str, Any]]:
    out = io.StringIO()
    argv = ["--base-url", stand.url(0), "--model", "m", "--deadline-seconds", "3"]
    argv += ["--initial-backoff-seconds", "0.2", "--max-backoff-seconds", "0.5"]
    argv += ["--prefill-metrics-url", stand.url(1) + "/metrics"]
    code = smoke.main(argv, env={}, runtime=smoke.Runtime(log=lambda _m: None), out=out)
    return code, json.loads(out.getvalue())


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
