"""Stand-in for sax-http, the HTTP front of a Saxml cell (the Saxml reference §2), in either generation:

* Gen-2 (FastAPI): errors are HTTP 500 `{"detail": text}`, schema errors 422, `/publish` echoes
  `model_path`, unknown paths 404.
* Gen-1 (`http.server`, the era of `sax-http:v1.0.x`): errors are HTTP 400 `{"Error": text}`, exact
  key sets enforced, `/publish` echoes `path`, unknown paths `{"message": "Invalid Request"}`.

`SaxHttp` is the server's state and contract; tests/test_saxml_publish.py scripts it around the
publish program. What the cell's identities may do in its GCS root is judged apart, on the plan
(tests/test_gcp_access.py); the publish Job on the local plane is still ended by kwok.

What it cannot show: the admin server's election and its address file, a model server loading a
checkpoint, `/generate`, and the real sax-http's exact error texts (only their shape is known).
"""

from __future__ import annotations

import dataclasses
import json
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any


@dataclasses.dataclass
class Recorded:
    method: str
    path: str
    body: Any  # decoded JSON, or the raw text if it was not JSON
    content_type: str | None


@dataclasses.dataclass
class PublishedModel:
    model_path: str
    checkpoint: str
    replicas: int
    polls_until_active: int = 0
    max_active: int | None = None  # None: all replicas become active

    def active(self) -> int:
        if self.polls_until_active > 0:
            return 0
        return self.replicas if self.max_active is None else min(self.replicas, self.max_active)


class SaxHttp:
    """State and behaviour of one sax-http server of generation 1 or 2."""

    def __init__(self, gen: int) -> None:
        assert gen in (1, 2)
        self.gen = gen
        self.lock = threading.Lock()
        self.models: dict[str, PublishedModel] = {}
        self.requests: list[Recorded] = []
        # Script for the next publishes: the number of /listcell answers with 0
        # active replicas before they become active, and an optional cap.
        self.activate_after = 0
        self.max_active: int | None = None
        # (status, message) answered instead of doing the work, first in first out.
        self.publish_errors: list[tuple[int, str]] = []
        self.listcell_errors: list[tuple[int, str]] = []
        # Publish succeeds but does not store the model (a "lost" model).
        self.forget_after_publish = False
        self.url = ""

    # -- helpers for tests ---------------------------------------------------

    def preload(self, key: str, model_path: str, checkpoint: str, replicas: int = 2, **kw: Any) -> None:
        self.models[key] = PublishedModel(model_path, checkpoint, replicas, **kw)

    def calls(self, method: str, path: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method and r.path == path]

    # -- HTTP ------------------------------------------------------------------

    def error(self, status: int, message: str) -> tuple[int, Any]:
        if self.gen == 1:
            return 400, {"Error": message}
        return status, {"detail": message}

    def schema_error(self, field: str, message: str) -> tuple[int, Any]:
        if self.gen == 1:
            return 400, {"Error": message}
        return 422, {"detail": [{"loc": ["body", field], "msg": message, "type": "value_error"}]}

    def handle(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        with self.lock:
            if (method, path) == ("GET", "/"):
                return 200, {"message": "HTTP Server for SAX Client"}
            if (method, path) == ("GET", "/listcell"):
                return self.listcell(body)
            if (method, path) == ("POST", "/publish"):
                return self.publish(body)
            if (method, path) == ("PUT", "/update"):
                return self.update(body)
            if self.gen == 1:
                return 400, {"message": "Invalid Request"}
            return 404, {"detail": "Not Found"}

    def listcell(self, body: Any) -> tuple[int, Any]:
        if not isinstance(body, dict) or "model" not in body:
            return self.schema_error("model", "field required")
        if self.gen == 1 and set(body) != {"model"}:
            return self.schema_error("model", "exactly 1 key allowed")
        if self.listcell_errors:
            return self.error(*self.listcell_errors.pop(0))
        key = body["model"]
        model = self.models.get(key)
        if model is None:
            return self.error(500, f"NOT_FOUND: model {key} not found")
        answer = {
            "model": key,
            "model_path": model.model_path,
            "checkpoint": model.checkpoint,
            "max_replicas": model.replicas,
            "active_replicas": model.active(),
        }
        model.polls_until_active = max(0, model.polls_until_active - 1)
        return 200, answer

    def publish(self, body: Any) -> tuple[int, Any]:
        fields = ("model", "model_path", "checkpoint", "replicas")
        if not isinstance(body, dict) or any(f not in body for f in fields):
            return self.schema_error("model", "field required")
        if self.gen == 1 and set(body) != set(fields):
            return self.schema_error("model", "exactly 4 keys allowed")
        if self.gen == 2 and (not isinstance(body["replicas"], int) or isinstance(body["replicas"], bool)):
            return self.schema_error("replicas", "value is not a valid integer")
        if self.publish_errors:
            return self.error(*self.publish_errors.pop(0))
        key = body["model"]
        if key in self.models:
            return self.error(500, f"ALREADY_EXISTS: model {key} already exists")
        replicas = int(body["replicas"])  # Gen-1 coerces with int()
        if not self.forget_after_publish:
            self.models[key] = PublishedModel(
                body["model_path"], body["checkpoint"], replicas, self.activate_after, self.max_active
            )
        path_key = "path" if self.gen == 1 else "model_path"
        return 200, {"model": key, path_key: body["model_path"], "checkpoint": body["checkpoint"], "replicas": replicas}

    def update(self, body: Any) -> tuple[int, Any]:
        """`PUT /update`: the publish body, for a model that exists (§2 table, /update row)."""
        fields = ("model", "model_path", "checkpoint", "replicas")
        if not isinstance(body, dict) or any(f not in body for f in fields):
            return self.schema_error("model", "field required")
        model = self.models.get(body["model"])
        if model is None:
            return self.error(500, f"NOT_FOUND: model {body['model']} not found")
        model.replicas = int(body["replicas"])
        path_key = "path" if self.gen == 1 else "model_path"
        return 200, {"model": body["model"], path_key: body["model_path"], "checkpoint": body["checkpoint"]} | {
            "replicas": model.replicas
        }


def handler_for(fake: SaxHttp) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", errors="replace")
            with fake.lock:
                fake.requests.append(Recorded(self.command, self.path, body, self.headers.get("Content-Type")))
            status, payload = fake.handle(self.command, self.path, body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = _serve  # noqa: N815 (http.server's naming)
        do_POST = _serve  # noqa: N815
        do_PUT = _serve  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
