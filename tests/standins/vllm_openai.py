"""Stand-in for vLLM's OpenAI-compatible completions API, on loopback, for the benchmark's load generator.

What it answers, in the shape of vLLM's OpenAI server (vllm/entrypoints/openai/protocol.py
CompletionStreamResponse, CompletionResponse, UsageInfo; serving_completion.py
completion_stream_generator; not re-read at the pinned v0.26.0), and what the pinned inference-perf
v0.7.0 reads of it (inference_perf/apis/completion.py, streaming_parser.py):

- `GET /v1/models`: `{"object": "list", "data": [{"id": <served name>, "object": "model", ...}]}`.
- `POST /v1/completions`: with `"stream": true`, one server-sent event per generated token
  (`data: {"object": "text_completion", "choices": [{"index": 0, "text": ...}]}`), then, when
  `stream_options.include_usage` is set, a last event with no choices and the `usage`
  (`prompt_tokens`, `completion_tokens`, `total_tokens`), then `data: [DONE]`; without streaming,
  one `text_completion` object with the whole text and the usage. A request for another model gets
  vLLM's 404 (`The model `x` does not exist.`, serving_engine.py _check_model).

It generates exactly `max_tokens` tokens (the load generator sends `ignore_eos`), each the word
`tok`, one token in the test tokenizer (`word_tokenizer`). Its speed is a model, not a measurement:
`first_token_seconds` before the first token and `token_seconds` between tokens; a benchmark run
against two such servers of different speeds must tell them apart (tests/test_benchmark_run.py).

What it cannot show: batching, KV cache pressure, prefill/decode disaggregation, tokenizers of real
models, or any figure a TPU would give.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.standins.poller import JsonHandler

TOKEN = "tok"


@dataclass(frozen=True)
class Speed:
    first_token_seconds: float
    token_seconds: float


class _Handler(JsonHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/v1/models":
            model = {"id": self.server.model, "object": "model", "created": 0, "owned_by": "vllm"}
            self.send_json(200, {"object": "list", "data": [model]})
        else:
            self.send_json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path != "/v1/completions":
            self.send_json(404, {"detail": "Not Found"})
            return
        if body.get("model") != self.server.model:
            message = f"The model `{body.get('model')}` does not exist."
            self.send_json(404, {"error": {"message": message, "type": "NotFoundError", "code": 404}})
            return
        self.server.requests += 1
        prompt_tokens = len(str(body.get("prompt", "")).split())
        tokens = int(body.get("max_tokens") or 16)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": tokens, "total_tokens": prompt_tokens + tokens}
        head = {"id": f"cmpl-{self.server.requests}", "created": int(time.time()), "model": self.server.model}
        speed = self.server.speed
        if not body.get("stream"):
            time.sleep(speed.first_token_seconds + speed.token_seconds * (tokens - 1))  # the modelled compute
            text = " ".join([TOKEN] * tokens)
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length", "stop_reason": None}
            self.send_json(200, {**head, "object": "text_completion", "choices": [choice], "usage": usage})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for index in range(tokens):
            time.sleep(speed.first_token_seconds if index == 0 else speed.token_seconds)  # the modelled compute
            finish = "length" if index == tokens - 1 else None
            choice = {"index": 0, "text": (" " if index else "") + TOKEN, "logprobs": None, "finish_reason": finish}
            self._event({**head, "object": "text_completion", "choices": [choice], "usage": None})
        if (body.get("stream_options") or {}).get("include_usage"):
            self._event({**head, "object": "text_completion", "choices": [], "usage": usage})
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    def _event(self, body: dict[str, Any]) -> None:
        self._chunk(f"data: {json.dumps(body)}\n\n".encode())

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, model: str, speed: Speed) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.model, self.speed, self.requests = model, speed, 0


def server(model: str, speed: Speed) -> _Server:
    """A server bound to a free loopback port, not yet serving (`serve_forever` on a thread)."""
    return _Server(model, speed)


@contextlib.contextmanager
def serving(model: str, speed: Speed) -> Iterator[_Server]:
    """A server on a free loopback port; `server.server_address[1]` is its port."""
    server = _Server(model, speed)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


TOKENIZER_PROGRAM = """
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

vocab = {"[UNK]": 0, sys.argv[3]: 1, **{f"w{i}": i + 2 for i in range(int(sys.argv[2]))}}
tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tokenizer.decoder = decoders.WordPiece(prefix="##")
PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]").save_pretrained(sys.argv[1])
"""


def word_tokenizer(python: Path, directory: Path, words: int = 2000) -> Path:
    """A whitespace word-level tokenizer saved as a Hugging Face tokenizer folder (what the Job reads
    from the model's snapshot), made by `python`, which has the load generator's tokenizers and
    transformers: `tok` and `w0`..`w<n>` are one token each."""
    subprocess.run(
        [str(python), "-c", TOKENIZER_PROGRAM, str(directory), str(words), TOKEN], check=True, capture_output=True
    )
    return directory
