"""Stand-in for the kubelet that runs the smoke-test Job's pod (kwok's pods have no process).

kwok runs the pod (Pending to Running, tests/control_plane.py with `complete_jobs=False`); this
loop ends it, as the kubelet ends a container:

- `passing`: the pod succeeds the way kwok's pod-complete Stage makes a Job's pod succeed; the
  script does not run (what the tests of tests/test_cluster_up.py rely on, said there).
- `failing`: the script the cluster holds (the Job's ConfigMap, mounted by the pod) runs here with
  the container's environment, its `SMOKE_BASE_URL` pointed at a stand-in gateway that answers
  every request with vLLM's 404 for a model it does not serve (`{"error": {"message": "The model
  `x` does not exist."}}`, pods/smoke_request.py `is_unknown_model_error`), which the script does not
  retry; for JetStream (`api="jetstream"`), a jetstream-http front that refuses every request with
  FastAPI's 422 for a body it cannot validate (fastapi/exception_handlers.py
  `request_validation_exception_handler`: `{"detail": [...]}`), which the script does not retry
  either (a 4xx other than 404/408/425/429). The container then ends as the kubelet ends it (k8s.io/kubernetes v1.36.3
  pkg/kubelet/kuberuntime/kuberuntime_container.go `convertToKubeContainerStatus`): terminated
  with the script's exit code and reason `Error` (the runtime's), and only when the container's
  `terminationMessagePolicy` is `FallbackToLogsOnError` and the exit code is not 0, a message of
  the log's last 80 lines, at most its last 2048 bytes (`readLastStringFromContainerLogs`,
  pkg/kubelet/container/runtime.go `MaxContainerTerminationMessageLogLines`/`...LogLength`).

Running the script, it plays the kubelet's part of the container's world: the `kubernetes` Service's
address in KUBERNETES_SERVICE_HOST and _PORT (here the API server's own: no kube-proxy), `fieldRef`
variables of the pod's own metadata, and each projected volume written under a directory of its own
(a ServiceAccount token from the TokenRequest API bound to the pod, as the kubelet asks for one, and
ConfigMap keys), with every variable that names a mount path pointed at that directory instead.

What it cannot show: the script against a real gateway, the image's Python, the pod's security
context and read-only root file system, a pod killed by its active deadline. A leader that crashes
makes jetstream-http answer 500, which the script retries until its deadline (hours by the serving
budget), so the fast failure here is a refused request; the retry rule itself is
tests/test_smoke_request.py's.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests import control_plane as cp
from tests.standins.poller import JsonHandler, ServingPoller
from workloads.smoke_job import JETSTREAM_API, OPENAI_API

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # the Job controller's label on its pods
LOG_LINES = 80  # pkg/kubelet/container/runtime.go MaxContainerTerminationMessageLogLines
LOG_BYTES = 2048  # MaxContainerTerminationMessageLogLength
FALLBACK = "FallbackToLogsOnError"


class _WrongModel(JsonHandler):
    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        try:
            model = json.loads(self.rfile.read(length) or b"{}").get("model", "")
        except ValueError:
            model = ""
        self.send_json(
            404, {"error": {"message": f"The model `{model}` does not exist.", "type": "NotFoundError", "code": 404}}
        )


class _RefusedRequest(JsonHandler):
    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        missing = {"type": "missing", "loc": ["body", "prompt"], "msg": "Field required", "input": {}}
        self.send_json(422, {"detail": [missing]})


# The front each smoke-test API talks to (workloads/smoke_job.py names them as the script does).
FRONTS: dict[str, type[JsonHandler]] = {OPENAI_API: _WrongModel, JETSTREAM_API: _RefusedRequest}


def termination_message(log: str, policy: str | None, exit_code: int) -> str:
    """What the kubelet writes as the terminated container's message (no termination-log file)."""
    if policy != FALLBACK or exit_code == 0:
        return ""
    tail = "".join(log.splitlines(keepends=True)[-LOG_LINES:]).encode()
    return tail[-LOG_BYTES:].decode(errors="replace")


class JobPods(ServingPoller):
    """The kubelet's part for the pods of the Job `job` in `namespace`: each running pod is ended once,
    with the exit code and log `outcome` gives (a subclass runs the pod's script, or does not)."""

    def __init__(self, plane: cp.ControlPlane, namespace: str, job: str) -> None:
        super().__init__(plane, interval=0.3)
        self.namespace, self.job = namespace, job
        self.hold = False  # leave running pods running (an `up` waiting on the Job)
        self.ended: list[tuple[str, int, str]] = []  # (pod, exit code, log)
        self._done: set[str] = set()
        self._dir = Path(tempfile.mkdtemp(prefix=f"{self.name}-", dir=plane.workdir))

    def outcome(self, pod: dict[str, Any], container: dict[str, Any]) -> tuple[int, str]:
        raise NotImplementedError

    def reconcile(self) -> None:
        if self.hold:
            return
        pods = self.plane.request(
            "GET",
            f"/api/v1/namespaces/{self.namespace}/pods",
            query={"labelSelector": f"{JOB_NAME_LABEL}={self.job}"},
        )["items"]
        for pod in pods:
            uid = pod["metadata"]["uid"]
            if uid in self._done or pod["status"].get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
                continue
            container = pod["spec"]["containers"][0]
            code, log = self.outcome(pod, container)
            message = termination_message(log, container.get("terminationMessagePolicy"), code)
            end_pod(self.plane, self.namespace, pod, container, code=code, message=message)
            self._done.add(uid)
            self.ended.append((pod["metadata"]["name"], code, log))

    def run_script(
        self, pod: dict[str, Any], container: dict[str, Any], overrides: dict[str, str], timeout: float
    ) -> tuple[int, str]:
        """The container's script, from the ConfigMap the pod mounts, with its environment (and
        `overrides`: the addresses the stand-ins serve on), run here."""
        volume = next(v for v in pod["spec"]["volumes"] if v.get("configMap"))
        config = self.plane.request(
            "GET", f"/api/v1/namespaces/{self.namespace}/configmaps/{volume['configMap']['name']}"
        )
        script_name = container["command"][-1].rsplit("/", 1)[-1]
        for name, text in config["data"].items():  # every key: a script may load a sibling
            (self._dir / name).write_text(text)
        script = self._dir / script_name
        env = {e["name"]: self._env_value(pod, e) for e in container.get("env") or []}
        mounts = self._projected(pod, container)
        for name, value in env.items():
            for path, there in mounts.items():
                if value == path or value.startswith(path + "/"):
                    env[name] = str(there) + value[len(path) :]
        host, port = self.plane.server.removeprefix("https://").rsplit(":", 1)
        env |= {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
        done = subprocess.run(
            [sys.executable, str(script)],
            env={**env, **overrides, "PATH": "/usr/bin:/bin"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            check=False,
        )
        return done.returncode, done.stdout

    @staticmethod
    def _env_value(pod: dict[str, Any], var: dict[str, Any]) -> str:
        field = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if field is None:
            return str(var.get("value", ""))
        if field not in ("metadata.namespace", "metadata.name"):
            raise NotImplementedError(f"the stand-in kubelet does not resolve fieldRef {field}")
        return str(pod["metadata"][field.split(".", 1)[1]])

    def _projected(self, pod: dict[str, Any], container: dict[str, Any]) -> dict[str, Path]:
        """Each projected volume the container mounts, written under its own directory: mount path to it."""
        volumes = {v["name"]: v["projected"] for v in pod["spec"].get("volumes") or [] if v.get("projected")}
        meta, namespace = pod["metadata"], pod["metadata"]["namespace"]
        mounts = {}
        for mount in container.get("volumeMounts") or []:
            projected = volumes.get(mount["name"])
            if projected is None:
                continue
            there = self._dir / f"{meta['name']}-{mount['name']}"
            there.mkdir(exist_ok=True)
            for source in projected["sources"]:
                if "serviceAccountToken" in source:
                    token = source["serviceAccountToken"]
                    request = {
                        "apiVersion": "authentication.k8s.io/v1",
                        "kind": "TokenRequest",
                        "spec": {
                            "expirationSeconds": token.get("expirationSeconds", 3600),
                            "boundObjectRef": {
                                "apiVersion": "v1",
                                "kind": "Pod",
                                "name": meta["name"],
                                "uid": meta["uid"],
                            },
                            **({"audiences": [token["audience"]]} if token.get("audience") else {}),
                        },
                    }
                    account = pod["spec"].get("serviceAccountName") or "default"
                    issued = self.plane.request(
                        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token", request
                    )
                    (there / token["path"]).write_text(issued["status"]["token"])
                elif "configMap" in source:
                    name = source["configMap"]["name"]
                    data = self.plane.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}")["data"]
                    for item in source["configMap"].get("items") or [{"key": k, "path": k} for k in data]:
                        (there / item["path"]).write_text(data[item["key"]])
                else:
                    raise NotImplementedError(f"the stand-in kubelet does not project {sorted(source)}")
            mounts[mount["mountPath"]] = there
        return mounts


class _Unavailable(JsonHandler):
    """The internal Gateway while no model server is ready: 503 (retried by the script)."""

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_json(503, {"error": "no healthy upstream"})


class SmokePods(JobPods):
    """Ends each running pod of the smoke Job: passes it, or runs it against a wrong gateway."""

    name = "smoke-pod-stand-in"

    def __init__(
        self, plane: cp.ControlPlane, namespace: str, job: str, api: str = OPENAI_API, *, unavailable: bool = False
    ) -> None:
        super().__init__(plane, namespace, job)
        self.failing = False
        # `unavailable`: the gateway answers 503 as long as the script asks (no model server ready).
        front = _Unavailable if unavailable else FRONTS[api]
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), front)

    def outcome(self, pod: dict[str, Any], container: dict[str, Any]) -> tuple[int, str]:
        if not self.failing:
            return 0, ""
        url = f"http://127.0.0.1:{self.server.server_address[1]}"
        return self.run_script(pod, container, {"SMOKE_BASE_URL": url}, timeout=120)


def end_pod(
    plane: cp.ControlPlane, namespace: str, pod: dict[str, Any], container: dict[str, Any], *, code: int, message: str
) -> None:
    """End the pod's one container with `code`, as the kubelet reports it (the module docstring)."""
    now = pod["status"].get("startTime")
    terminated: dict[str, Any] = {
        "exitCode": code,
        "reason": "Completed" if code == 0 else "Error",
        "startedAt": now,
        "finishedAt": now,
    }
    if message:
        terminated["message"] = message
    ready = {"type": "Ready", "status": "False", "reason": "PodCompleted" if code == 0 else "PodFailed"}
    plane.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}/status",
        {
            "status": {
                "phase": "Succeeded" if code == 0 else "Failed",
                "conditions": [c for c in pod["status"].get("conditions") or [] if c["type"] != "Ready"] + [ready],
                "containerStatuses": [
                    {
                        "name": container["name"],
                        "image": container["image"],
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "started": False,
                        "state": {"terminated": terminated},
                    }
                ],
            }
        },
        content_type="application/merge-patch+json",
    )
