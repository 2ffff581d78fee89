"""Stand-in for sax-http, the HTTP front of a Saxml cell (the Saxml reference §2), in either generation:

* Gen-2 (FastAPI): errors are HTTP 500 `{"detail": text}`, schema errors 422, `/publish` echoes
  `model_path`, unknown paths 404.
* Gen-1 (`http.server`, the era of `sax-http:v1.0.x`): errors are HTTP 400 `{"Error": text}`, exact
  key sets enforced, `/publish` echoes `path`, unknown paths `{"message": "Invalid Request"}`.

`SaxHttp` is the server's state and contract; tests/test_saxml_publish.py scripts it around the
publish program. On the local plane, `SaxCell` (below) wires it to the cluster: every call first
reads the cell's GCS root as the sax-http pod's identity (tests/standins/gcp_access.py judges it
against the IAM members the stack created on the GCP stand-in), a model's active replicas are
capped by the model-server slices that can join the cell, and the publish Job's pod runs the
publish script the cluster holds against it (the kubelet's part, as tests/standins/smoke_pod.py).

What it cannot show: the admin server's election and its address file, a model server loading a
checkpoint, `/generate`, and the real sax-http's exact error texts (only their shape is known).
"""

from __future__ import annotations

import dataclasses
import http.server
import json
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests import control_plane as cp
from tests.standins import smoke_pod
from tests.standins.gcp_access import OBJECT_CREATE, OBJECT_GET, Workload, refuse_object_access
from tests.standins.gcp_project import Project

# The cell's objects as workloads/saxml.py names them (the Deployments' `app`, the publish Job).
HTTP_APP = "sax-http"
ADMIN_APP = "sax-admin-server"
PUBLISH_JOB = "sax-publish"
# The labels JobSet puts on its pods (sigs.k8s.io/jobset api/jobset/v1alpha2/jobset_types.go) and the
# Job controller's completion index (batch/v1 `batch.kubernetes.io/job-completion-index`).
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


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
        # What the cell's GCS root answers the Sax client (None: it is readable), and how many
        # model servers could join the cell; both None unless a plane wires them (SaxCell).
        self.gate: Callable[[], str | None] | None = None
        self.active_limit: Callable[[], int] | None = None

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

    def handle(self, method: str, path: str, body: Any) -> tuple[int, Any]:  # noqa: PLR0911 (one per path)
        with self.lock:
            if (method, path) == ("GET", "/"):
                return 200, {"message": "HTTP Server for SAX Client"}
            # The Sax client behind every other path first finds the admin server in the cell's
            # GCS root (saxml client/go/admin.go -> common/addr.go -> common/platform/cloud.go).
            refused = self.gate() if self.gate is not None else None
            if refused is not None:
                return self.error(500, refused)
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
            "active_replicas": self._active(model),
        }
        model.polls_until_active = max(0, model.polls_until_active - 1)
        return 200, answer

    def _active(self, model: PublishedModel) -> int:
        return model.active() if self.active_limit is None else min(model.active(), self.active_limit())

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


# --- the cell on the local plane ------------------------------------------------------------------

GIVE_UP_SLACK = 60  # seconds past the script's own deadline before the kubelet stand-in stops it


def _bucket_and_prefix(sax_root: str) -> tuple[str, str]:
    """`gs://B/sax-root` -> ("B", "sax-root/")."""
    path = sax_root.removeprefix("gs://")
    bucket, _, prefix = path.partition("/")
    return bucket, prefix.strip("/") + "/"


class SaxCell(smoke_pod.JobPods):
    """A Saxml cell on the local plane: sax-http's answers judged by what the cell's pods may do in GCS,
    and the kubelet's part for the publish Job's pod (it runs the script the cluster holds)."""

    name = "sax-cell-stand-in"

    def __init__(self, plane: cp.ControlPlane, namespace: str, project: Project, *, gen: int = 1) -> None:
        super().__init__(plane, namespace, PUBLISH_JOB)
        self.project = project
        self.sax = SaxHttp(gen)
        self.sax.gate = self.refusal
        self.sax.active_limit = self.joinable_slices
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_for(self.sax))
        self.sax.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    # --- what the cell's pods may do in GCS

    def _get(self, path: str) -> dict[str, Any]:
        return dict(self.plane.request("GET", f"/api/v1/namespaces/{self.namespace}{path}"))

    def _deployment(self, app: str) -> dict[str, Any] | None:
        try:
            return dict(self.plane.request("GET", f"/apis/apps/v1/namespaces/{self.namespace}/deployments/{app}"))
        except cp.ApiError:
            return None

    def _workload(self, pod_spec: Mapping[str, Any]) -> Workload:
        account = str(pod_spec.get("serviceAccountName") or "default")
        ksa = self._get(f"/serviceaccounts/{account}")
        return Workload.of(self.namespace, account, ksa["metadata"].get("annotations"))

    def refusal(self) -> str | None:
        """What the Sax client inside sax-http meets reading the cell's root, as its error text."""
        http_server, admin = self._deployment(HTTP_APP), self._deployment(ADMIN_APP)
        if http_server is None or admin is None:
            return "sax-http or the admin server is not deployed"
        spec = http_server["spec"]["template"]["spec"]
        env = {e["name"]: e.get("value", "") for e in spec["containers"][0].get("env") or []}
        bucket, prefix = _bucket_and_prefix(env.get("SAX_ROOT", ""))
        refused = refuse_object_access(self.project, self._workload(spec), bucket, prefix, OBJECT_GET)
        if refused is not None:
            return refused.message
        # The admin server writes its address under the root; one that may not write leaves none.
        admin_spec = admin["spec"]["template"]["spec"]
        if refuse_object_access(self.project, self._workload(admin_spec), bucket, prefix, OBJECT_CREATE):
            return "storage: object doesn't exist"  # cloud.google.com/go/storage ErrObjectNotExist
        return None

    def joinable_slices(self) -> int:
        """Model-server slices whose first host runs and may read the cell's root (it joins the cell)."""
        pods = self.plane.request(
            "GET", f"/api/v1/namespaces/{self.namespace}/pods", query={"labelSelector": f"{JOBSET_NAME}"}
        )["items"]
        joined = set()
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            if pod["status"].get("phase") != "Running" or labels.get(COMPLETION_INDEX) != "0":
                continue
            spec = pod["spec"]
            env = {e["name"]: e.get("value", "") for e in spec["containers"][0].get("env") or []}
            if "SAX_ROOT" not in env:
                continue
            bucket, prefix = _bucket_and_prefix(env["SAX_ROOT"])
            if refuse_object_access(self.project, self._workload(spec), bucket, prefix, OBJECT_GET) is None:
                joined.add((labels.get(JOBSET_NAME), labels.get(JOB_INDEX)))
        return len(joined)

    # --- the publish Job's pod

    def outcome(self, pod: dict[str, Any], container: dict[str, Any]) -> tuple[int, str]:
        env = {e["name"]: e.get("value", "") for e in container.get("env") or []}
        deadline = float(env.get("SAX_PUBLISH_DEADLINE_SECONDS") or 600)
        # SAX_HTTP_URL: the Service's address, as the cluster's DNS would answer it.
        return self.run_script(pod, container, {"SAX_HTTP_URL": self.sax.url}, timeout=deadline + GIVE_UP_SLACK)
