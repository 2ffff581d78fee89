"""Faults survived: interrupted, killed, failing and concurrent `pulumi up` and `pulumi destroy`,
an API server restart, a webhook that stops serving, a failing smoke test and hand-made drift, each
followed by the recovery the README's Troubleshooting gives, then a check that the API server, the
state and the program agree.

Real, as in tests/test_cluster_up.py: the `pulumi` CLI and engine, its DIY (file) backend and its
lock, the Kubernetes provider; etcd, kube-apiserver, kube-controller-manager and kube-scheduler (the
three stopped and started again together on the same etcd, as a control-plane upgrade or repair
replaces them: tests/control_plane.py `restart_control_plane`), kwok; Kueue, JobSet and LWS out of cluster. Signals go
where a person or a CI runner sends them: SIGINT to the CLI's process group (a terminal's Ctrl-C;
the CLI starts its plugins in groups of their own, sdk/go/common/util/cmdutil/child_unix.go
`RegisterProcessGroup`), SIGKILL to the CLI and every process under it (a runner killed with its
job). The trigger is a point in the graph, read from the CLI's own event log (`--event-log`,
written per event: pkg/backend/display/display.go), never a time.

Stand-ins, besides tests/test_cluster_up.py's: the kubelet that ends the smoke Job's pod
(tests/standins/smoke_pod.py: passing, or running the cluster's script against a gateway that
answers 404 for the model) and the slice controller's webhook going unready (slice_webhook.py
`pause`).

Agreement after each recovery (`Agreement`): no pending operation in the state; `pulumi preview
--refresh --expect-no-changes` passes (every object the state holds is live and the refreshed
state is what the program declares), or after a destroy nothing is left; no object labelled as
the program's, with no owner, that the state does not hold (orphans); no object twice in the
state (duplicates); the Hugging Face token neither in plain text nor base64 in the exported state
(lost secrets). The suite prints the fault table (run with -s to see it).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import signal
import subprocess
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from settings.model import Backend
from tests import control_plane as cp
from tests import controllers as ctl
from tests import operations
from tests.engine import ROOT, Engine, Workspace, readme_stack
from tests.standins import gke_addons, slice_webhook, smoke_pod
from tests.test_cluster_up import PART_OF, PROJECT_ID, TOKEN, Api, _key, _kubernetes_resources, plane_env
from workloads.smoke_job import JETSTREAM_API, JOB_NAME, OPENAI_API

# The late plane: it starts once the tests without a plane are done (tests/suite_order.py).
pytestmark = pytest.mark.xdist_group(cp.LATE_XDIST_GROUP)
# The project name in the file backend's layout (.pulumi/stacks/<project>/<stack>.json).
PROJECT_NAME = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["name"]
FAULT_TIMEOUT = 600.0  # the most any one faulted or recovering run may take before the test kills it
# A GKE zonal control-plane upgrade leaves the API server unreachable for minutes; a bounded 15 s
# here, plus the restart's own time, is longer than a request of the provider's await.
APISERVER_DOWN = 15.0
Event = dict[str, Any]
# The Kubernetes provider's switch to win server-side apply conflicts (pulumi-kubernetes
# provider/pkg/await/await.go `patchForce`): the README's recovery after a hand edit.
FORCE = "PULUMI_K8S_ENABLE_PATCH_FORCE"
UP = ("up", "--yes", "--skip-preview", "--policy-pack", "policy")
DESTROY = ("destroy", "--yes", "--skip-preview")
CLEAR = ("refresh", "--yes", "--skip-preview", "--clear-pending-creates")  # the README's recovery after a kill
Trigger = Callable[[Event], bool]


def _pre(kind: str, op: str = "create") -> Trigger:
    """The engine starts `op` on a resource of `kind` (it is now in flight)."""

    def fire(event: Event) -> bool:
        meta = (event.get("resourcePreEvent") or {}).get("metadata") or {}
        return meta.get("op") == op and str(meta.get("type", "")).endswith(f":{kind}")

    return fire


def _done(op: str, count: int, kind: str = "") -> Trigger:
    """The engine has finished `count` operations `op` (on resources of `kind`, if given)."""
    seen: list[str] = []

    def fire(event: Event) -> bool:
        meta = (event.get("resOutputsEvent") or {}).get("metadata") or {}
        if meta.get("op") == op and str(meta.get("type", "")).endswith(f":{kind}" if kind else ""):
            seen.append(meta.get("urn", ""))
        return len(seen) >= count

    return fire


@dataclass
class Agreement:
    converged: bool
    pending: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    lost_secrets: list[str] = field(default_factory=list)
    detail: str = ""


@dataclass
class Outcome:
    fault: str
    injected: bool = False
    faulted: Any = None  # the faulted run (CompletedProcess-like: returncode, stdout)
    recovery: list[str] = field(default_factory=list)  # the commands run to recover
    recovery_runs: dict[str, Any] = field(default_factory=dict)
    recovery_seconds: float = 0.0
    agreement: Agreement | None = None
    notes: dict[str, Any] = field(default_factory=dict)


@dataclass
class Finished:
    returncode: int
    stdout: str  # the CLI's stdout and stderr, as a terminal shows them
    stderr: str = ""


class Scenario:
    """One stack on one plane, and the faults run on it in order."""

    def __init__(
        self,
        ws: Workspace,
        *,
        name: str,
        env: dict[str, str],
        plane: cp.ControlPlane,
        base: Path,
        kinds: set[tuple[str, str]],
    ) -> None:
        self.ws, self.name, self.env, self.plane, self.base = ws, name, env, plane, base
        self.api = Api(plane)
        self.kinds = kinds  # (apiVersion, kind) of everything the program makes, for the orphan search
        self.outcomes: list[Outcome] = []
        self.pollers: list[Any] = []  # the stand-ins' loops: a failed one is reported after each run
        self.error = ""  # what stopped the faults early, if anything

    def pulumi(self, *args: str, env: dict[str, str] | None = None) -> Any:
        done = self.ws.pulumi(*args, "--stack", self.name, check=False, extra_env={**self.env, **(env or {})})
        _check_alive(*self.pollers)
        return done

    def up(self, *extra: str) -> Any:
        return self.pulumi(*UP, *extra)

    def start(self, label: str, *args: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
        events, out = self.base / f"{label}.events.jsonl", self.base / f"{label}.out"
        with out.open("wb") as sink:
            process = subprocess.Popen(
                ["pulumi", "--non-interactive", *args, "--stack", self.name, "--event-log", str(events)],
                cwd=self.ws.root,
                # The event log is one of the CLI's debugging flags (pkg/cmd/pulumi/operations/up.go).
                env={**self.ws.engine.env, **self.ws.env, **self.env, "PULUMI_DEBUG_COMMANDS": "true"},
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return process, events, out

    def interrupted(self, label: str, args: tuple[str, ...], sig: signal.Signals, trigger: Trigger) -> Outcome:
        """Run `pulumi <args>`, send `sig` when `trigger` first holds for an engine event, wait for the end."""
        outcome = Outcome(label)
        process, events, out = self.start(label, *args)
        deadline = time.monotonic() + FAULT_TIMEOUT
        offset = 0
        while process.poll() is None and not outcome.injected and time.monotonic() < deadline:
            with contextlib.suppress(FileNotFoundError), events.open("rb") as log:
                log.seek(offset)
                for line in log:
                    if not line.endswith(b"\n"):
                        break  # written in part: read again on the next pass
                    offset += len(line)
                    if trigger(json.loads(line)):
                        _signal(process, sig)
                        outcome.injected = True
                        break
            time.sleep(0.05)
        _finish(process, deadline)
        _check_alive(*self.pollers)
        if sig == signal.SIGKILL and self.clear_empty_sidecar():
            # A kill that lands while the CLI rewrites the sidecar: README Troubleshooting's step.
            outcome.recovery.append(f"rm {self.sidecar().name} (left empty by the kill)")
            outcome.notes["empty sidecar"] = True
        _text, exported = self.exported()
        outcome.notes["held after"] = sum(
            1 for r in exported["deployment"].get("resources") or [] if not r["type"].startswith("pulumi:")
        )
        outcome.faulted = Finished(process.returncode, out.read_text(errors="replace"))
        return outcome

    def recover(self, outcome: Outcome, *commands: tuple[str, ...], up: bool = True, forced: int = 0) -> Outcome:
        """Run the recovery `commands` in order (the first `forced` with the provider's patch force
        on), time them, and check the agreement."""
        started = time.monotonic()
        for index, args in enumerate(commands):
            env = {FORCE: "true"} if index < forced else {}
            label = " ".join(args)
            outcome.recovery.append("".join(f"{k}={v} " for k, v in env.items()) + f"pulumi {label}")
            outcome.recovery_runs[label if not env else f"{FORCE} {label}"] = self.pulumi(*args, env=env)
        outcome.recovery_seconds = time.monotonic() - started
        outcome.agreement = self.agreement(up=up)
        self.outcomes.append(outcome)
        return outcome

    def sidecar(self) -> Path:
        """The checkpoint's metadata sidecar on the file backend (gocloud.dev fileblob attrs.go)."""
        backend = Path(self.ws.env["PULUMI_BACKEND_URL"].removeprefix("file://"))
        return backend / ".pulumi" / "stacks" / PROJECT_NAME / f"{self.name}.json.attrs"

    def clear_empty_sidecar(self) -> bool:
        """README Troubleshooting: an empty sidecar (a kill while it was written in place) is deleted,
        only if it is empty; a missing one reads as defaults. Whether one was deleted."""
        sidecar = self.sidecar()
        if sidecar.exists() and sidecar.stat().st_size == 0:
            sidecar.unlink()
            return True
        return False

    def exported(self) -> tuple[str, dict[str, Any]]:
        done = self.ws.pulumi("stack", "export", "--stack", self.name, extra_env=self.env)
        return done.stdout, json.loads(done.stdout)

    def agreement(self, *, up: bool) -> Agreement:
        text, exported = self.exported()
        deployment = exported["deployment"]
        pending = [f"{op['type']} {op['resource']['urn']}" for op in deployment.get("pending_operations") or []]
        state = _kubernetes_resources(self.ws, self.name)
        keys = [_key(r) for r in state]
        urns = [r["urn"] for r in deployment.get("resources") or []]
        duplicates = [k for k, n in Counter(keys).items() if n > 1] + [u for u, n in Counter(urns).items() if n > 1]
        lost = operations.leaked(text, [TOKEN])
        held = set(keys)
        orphans = [key for key in self.labelled() if key not in held]
        if up:
            check = self.pulumi("preview", "--refresh", "--expect-no-changes", "--diff", "--policy-pack", "policy")
            converged, detail = check.returncode == 0, (check.stdout + check.stderr)[-4000:]
        else:
            left = [r["urn"] for r in deployment.get("resources") or [] if not r["type"].startswith("pulumi:")]
            converged, detail = not left and not self.labelled(), "\n".join(left)
        return Agreement(converged and not pending, pending, orphans, duplicates, lost, detail)

    def labelled(self) -> list[str]:
        """The program's objects in the API server that no controller owns."""
        found = []
        for api_version, kind in sorted(self.kinds):
            listed = self.plane.request("GET", self.api.path(api_version, kind, None), query={"labelSelector": PART_OF})
            for item in listed["items"]:
                meta = item["metadata"]
                if not meta.get("ownerReferences"):
                    found.append(f"{kind} {meta.get('namespace') or ''}/{meta['name']}")
        return found


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _signal(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    if sig == signal.SIGKILL:
        # A runner killed with its job: the CLI and every process under it, plugins included.
        for pid in [process.pid, *_descendants(process.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)  # a terminal's Ctrl-C reaches the CLI's foreground group


def _finish(process: subprocess.Popen[bytes], deadline: float) -> None:
    try:
        process.wait(max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _signal(process, signal.SIGKILL)
        process.wait(30)
        raise cp.ControlPlaneError(f"pulumi did not end within {FAULT_TIMEOUT:.0f} s of its start") from None


# --- the dev stack's faults ------------------------------------------------------------------


def _check_alive(*pollers: Any) -> None:
    for poller in pollers:
        if isinstance(poller, ctl.Controllers):
            poller.check_alive()
        else:
            poller.check()


Faults = Callable[["Scenario", "Stands"], None]


@dataclass
class Stands:
    """What plays GKE and the cluster's controllers around one stack."""

    webhook: slice_webhook.SliceWebhook
    smoke: smoke_pod.SmokePods
    namespace: str


def _run(engine: Engine, base: Path, stack: str, faults: Faults) -> Scenario:
    """Make `<stack>-new` with the README's commands on a fresh plane, then run `faults` on it.
    An error stops the faults and is kept for the tests to report, with what ran before it."""
    config = cp.load_stack(stack)
    namespace = config.serving.namespace
    generation = config.tpu.generation if config.serving.dynamic_slicing else config.serving.slice.generation
    with (
        cp.control_plane(
            cp.stack_nodes(config), service_cidr=str(config.network.service_cidr), complete_jobs=False
        ) as plane,
        ctl.controllers(plane) as running,
    ):
        gke_addons.install(plane, config.versions.gateway_api_inference_extension)
        balancers = gke_addons.LoadBalancers(plane)
        webhook = slice_webhook.SliceWebhook(plane, generation)
        # The front the smoke Job talks to: jetstream-http on JetStream, vLLM's OpenAI API elsewhere.
        api = JETSTREAM_API if config.serving.backend == Backend.JETSTREAM else OPENAI_API
        smoke = smoke_pod.SmokePods(plane, namespace, JOB_NAME, api=api)
        for poller in (balancers, webhook, smoke):
            poller.start()
        try:
            ws = readme_stack(engine, stack, "faults", project=PROJECT_ID, token=TOKEN)
            name = f"{stack}-new"
            ws.pulumi("config", "set", "--path", "tpu-slicing:controllers.install", "false", "--stack", name)
            kinds = {
                ("v1", "ConfigMap"), ("v1", "Secret"), ("v1", "Service"), ("v1", "ServiceAccount"),
                ("v1", "Namespace"), ("batch/v1", "Job"), ("apps/v1", "Deployment"),
                ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
                ("networking.k8s.io/v1", "NetworkPolicy"),
            }  # fmt: skip
            scenario = Scenario(ws, name=name, env=plane_env(engine, base, plane), plane=plane, base=base, kinds=kinds)
            scenario.pollers = [balancers, webhook, smoke, running]
            try:
                faults(scenario, Stands(webhook, smoke, namespace))
                _check_alive(*scenario.pollers)
            except Exception:  # kept for the tests: the outcomes so far still say what happened
                scenario.error = traceback.format_exc()
        finally:
            for poller in (smoke, webhook, balancers):
                poller.stop()
    return scenario


def _dev_faults(s: Scenario, stands: Stands) -> None:
    webhook, smoke, namespace = stands.webhook, stands.smoke, stands.namespace

    # 1. Ctrl-C while Kueue's queues are being created; the next `up` converges.
    outcome = s.interrupted("SIGINT up (queues)", UP, signal.SIGINT, _done("create", 1, "ClusterQueue"))
    s.recover(outcome, UP)
    s.kinds |= {(r["apiVersion"], r["kind"]) for r in _kubernetes_resources(s.ws, s.name)}

    # Not here, to keep within the CI budget, each proven elsewhere on dev's own plane: a refresh
    # right after `up` finds no drift (tests/test_cluster_up.py, every stack's lifecycle), and a
    # failing smoke test fails `up` naming the Job and its last lines, keeps serving, and a new run
    # id re-runs it (tests/test_rollout_plane.py, the canary of a fleet rollout).

    # 1b. Ctrl-C while `up` waits for the smoke Job (a new run id replaces it); the next `up` converges.
    smoke.hold = True
    s.pulumi("config", "set", "--path", "tpu-slicing:serving.smokeTest.runId", "fault-3")
    outcome = s.interrupted("SIGINT up (smoke Job await)", UP, signal.SIGINT, _pre("Job", "create-replacement"))
    smoke.hold = False
    s.recover(outcome, UP)

    # 4. The slice controller's webhook stops serving while the serving objects change.
    webhook.pause()
    s.pulumi("config", "set", "--path", "tpu-slicing:versions.vllmImage", "docker.io/vllm/vllm-tpu:v0.26.1")
    outcome = Outcome("slice webhook not serving", injected=True)
    started = time.monotonic()
    outcome.faulted = s.up()
    outcome.notes["failed after seconds"] = time.monotonic() - started
    webhook.resume()
    s.plane.wait_for("the slice webhook served again", lambda: webhook.ready, 120)
    s.recover(outcome, UP)

    # 7. Two `up` runs on one stack at once: the DIY backend's lock refuses the second.
    s.pulumi("config", "set", "--path", "tpu-slicing:serving.smokeTest.runId", "fault-4")
    smoke.hold = True
    first, _events, out = s.start("concurrent up (first)", *UP)
    lock_dir = Path(s.ws.env["PULUMI_BACKEND_URL"].removeprefix("file://")) / ".pulumi" / "locks"
    s.plane.wait_for("the first up's lock", lambda: any(p.is_file() for p in lock_dir.rglob("*.json")), 120)
    second = s.up()
    smoke.hold = False
    _finish(first, time.monotonic() + FAULT_TIMEOUT)
    outcome = Outcome("two ups at once", injected=True, faulted=second)
    outcome.notes["first"] = Finished(first.returncode, out.read_text(errors="replace"))
    s.recover(outcome)  # nothing to run: the first finished the work

    # 8b. Drift by hand: an LWS scaled, a NetworkPolicy deleted, a ConfigMap edited.
    outcome = Outcome("drift by hand", injected=True)
    outcome.notes["edited"] = _drift(s, namespace)
    outcome.notes["preview"] = s.pulumi("preview", "--refresh", "--json", "--diff")
    # Server-side apply keeps the hand edit's field manager: a plain `up --refresh` stops at the
    # conflict, naming the field and who changed it; forcing takes the fields back (README).
    outcome.notes["plain up"] = s.up("--refresh")
    # The provider records the switch in its own inputs: a plain `up` after it sets it back.
    s.recover(outcome, (*UP, "--refresh"), UP, forced=1)

    # 3. The API server restarts (a control-plane upgrade) while `up` waits for the smoke Job.
    s.pulumi("config", "set", "--path", "tpu-slicing:serving.smokeTest.runId", "fault-5")
    smoke.hold = True
    old = _job_uid(s, namespace)
    process, _events, out = s.start("apiserver restart", *UP)
    s.plane.wait_for(
        "the up to create the new smoke Job",
        lambda: process.poll() is not None or _job_uid(s, namespace) not in (None, old),
        FAULT_TIMEOUT,
    )
    outcome = Outcome("API server restart during up", injected=process.poll() is None)
    stopped = time.monotonic()
    back = s.plane.restart_control_plane(down_seconds=APISERVER_DOWN)
    outcome.notes["apiserver unreachable for seconds"] = back - stopped
    smoke.hold = False
    _finish(process, time.monotonic() + FAULT_TIMEOUT)
    outcome.faulted = Finished(process.returncode, out.read_text(errors="replace"))
    outcome.notes["settled after seconds"] = _settled(s, time.time()) - back
    s.recover(outcome, UP)

    # 6. A protected stack: a mistaken destroy deletes nothing.
    before = s.labelled()
    outcome = Outcome("destroy of a protected stack", injected=True, faulted=s.pulumi("destroy", "--yes"))
    outcome.notes["deleted"] = sorted(set(before) - set(s.labelled()))
    s.recover(outcome)

    # The README's teardown, then a Ctrl-C in the middle of destroy; the next destroy finishes.
    _protection(s, "false")
    outcome = s.interrupted("SIGINT destroy", DESTROY, signal.SIGINT, _done("delete", 10))
    s.recover(outcome, DESTROY, up=False)

    # 2. SIGKILL while the serving LeaderWorkerSets are being created: the README's recovery.
    _protection(s, "true")
    outcome = s.interrupted("SIGKILL up (serving)", UP, signal.SIGKILL, _pre("LeaderWorkerSet"))
    s.recover(outcome, ("cancel", "--yes"), CLEAR, UP)

    # 6b. SIGKILL in the middle of destroy: the README's recovery, then destroy.
    _protection(s, "false")
    outcome = s.interrupted("SIGKILL destroy", DESTROY, signal.SIGKILL, _done("delete", 10))
    s.recover(outcome, ("cancel", "--yes"), CLEAR, DESTROY, up=False)

    # 7. The sidecar a kill can leave empty, emptied on purpose: every command fails until the
    # README's step (run by `interrupted` after each SIGKILL) deletes it.
    outcome = Outcome("empty checkpoint sidecar", injected=True)
    s.sidecar().write_bytes(b"")
    outcome.faulted = s.pulumi("stack", "export")
    outcome.notes["cleared"] = s.clear_empty_sidecar()
    outcome.recovery.append(f"rm {s.sidecar().name}")
    s.recover(outcome, DESTROY, up=False)


def _second_family_faults(s: Scenario, stands: Stands) -> None:
    """JetStream on fixed v5e slices: no slice controller, its own LWS, HTTP server and smoke Job."""
    outcome = s.interrupted("jetstream: SIGINT up (serving)", UP, signal.SIGINT, _done("create", 1, "LeaderWorkerSet"))
    s.recover(outcome, UP)
    # Its smoke Job is `up`'s proof too: jetstream-http refusing the request fails `up`, naming the
    # Job and the script's last lines; a new run id re-runs it against a serving front.
    stands.smoke.failing = True
    s.pulumi("config", "set", "--path", "tpu-slicing:serving.smokeTest.runId", "fault-1")
    outcome = Outcome("jetstream: smoke test fails", injected=True, faulted=s.up())
    stands.smoke.failing = False
    s.pulumi("config", "set", "--path", "tpu-slicing:serving.smokeTest.runId", "fault-2")
    s.recover(outcome, UP)
    s.kinds |= {(r["apiVersion"], r["kind"]) for r in _kubernetes_resources(s.ws, s.name)}
    _protection(s, "false")
    outcome = s.interrupted("jetstream: SIGKILL destroy", DESTROY, signal.SIGKILL, _done("delete", 5))
    s.recover(outcome, ("cancel", "--yes"), CLEAR, DESTROY, up=False)


def _protection(s: Scenario, value: str) -> None:
    """The README's teardown ("false": protection lifted through the policy pack) or a stack
    protected again ("true") for the next first `up`."""
    for key in ("cluster.deletionProtection", "cluster.protect"):
        s.pulumi("config", "set", "--path", f"tpu-slicing:{key}", value)
    if value == "false":
        done = s.up("--policy-pack-config", "policy/teardown-config.json")
        if done.returncode != 0:
            raise cp.ControlPlaneError(f"the README's teardown `up` failed:\n{done.stdout[-3000:]}")


def _job_uid(s: Scenario, namespace: str) -> str | None:
    job = s.api.get("batch/v1", "Job", namespace, JOB_NAME)
    return None if job is None else str(job["metadata"]["uid"])


def _settled(s: Scenario, since: float) -> float:
    """Wait until the plane is past an API server outage; the monotonic time it was.

    Settled, read from the API server, as the next refresh will read it: every node Ready with a
    Lease renewed after `since` (wall clock; renewTime is a MicroTime, so no rounding), every
    Running pod Ready, and every Deployment of the program's observed at its generation and
    Available with all its replicas (the Kubernetes provider's refresh judges a Deployment by its
    Available condition: pulumi-kubernetes provider/pkg/await/deployment.go)."""

    def check() -> bool:
        nodes = s.plane.request("GET", "/api/v1/nodes")["items"]
        leases = {
            lease["metadata"]["name"]: lease["spec"].get("renewTime") or ""
            for lease in s.plane.request("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases")[
                "items"
            ]
        }
        for node in nodes:
            name = node["metadata"]["name"]
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or [])
            renewed = leases.get(name)
            if not ready or not renewed or _micro_time(renewed) <= since:
                return False
        pods = s.plane.request("GET", "/api/v1/pods")["items"]
        if not all(
            any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
            for p in pods
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        ):
            return False
        deployments = s.plane.request("GET", "/apis/apps/v1/deployments", query={"labelSelector": PART_OF})["items"]
        return all(_available(d) for d in deployments)

    s.plane.wait_for("nodes, pods and Deployments ready after the restart", lambda: check() or None, FAULT_TIMEOUT)
    return time.monotonic()


def _available(deployment: dict[str, Any]) -> bool:
    status = deployment.get("status") or {}
    wanted = deployment["spec"].get("replicas", 1)
    return (
        status.get("observedGeneration", 0) >= deployment["metadata"]["generation"]
        and status.get("availableReplicas", 0) == wanted
        and any(c["type"] == "Available" and c["status"] == "True" for c in status.get("conditions") or [])
    )


def _micro_time(text: str) -> float:
    """A metav1.MicroTime (RFC 3339 with microseconds, UTC) as seconds since the epoch."""
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.UTC).timestamp()


def _drift(s: Scenario, namespace: str) -> list[str]:
    state = _kubernetes_resources(s.ws, s.name)
    lws = next(r for r in state if r["kind"] == "LeaderWorkerSet" and r["namespace"] == namespace)
    policy = next(r for r in state if r["kind"] == "NetworkPolicy" and r["namespace"] == namespace)
    config = next(r for r in state if r["kind"] == "ConfigMap" and r["namespace"] == namespace)
    path = s.api.path
    live = s.api.get(lws["apiVersion"], "LeaderWorkerSet", namespace, lws["name"]) or {}
    replicas = int(live["spec"].get("replicas", 1)) + 1
    s.plane.request(
        "PATCH",
        path(lws["apiVersion"], "LeaderWorkerSet", namespace, lws["name"]),
        {"spec": {"replicas": replicas}},
        content_type="application/merge-patch+json",
    )
    s.plane.request("DELETE", path(policy["apiVersion"], "NetworkPolicy", namespace, policy["name"]))
    s.plane.request(
        "PATCH",
        path(config["apiVersion"], "ConfigMap", namespace, config["name"]),
        {"data": {"edited-by-hand": "true"}},
        content_type="application/merge-patch+json",
    )
    return [_key(lws), _key(policy), _key(config)]


# --- the report --------------------------------------------------------------------------------


def report(outcomes: list[Outcome]) -> str:
    rows = [
        "| fault | injected | converged | orphans | duplicates | lost secrets | recovery | recovery s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        a = o.agreement or Agreement(False)
        recovery = "; ".join(o.recovery) or "(none)"
        rows.append(
            f"| {o.fault} | {'yes' if o.injected else 'no'} | {'yes' if a.converged else 'NO'} | {len(a.orphans)} "
            f"| {len(a.duplicates)} | {len(a.lost_secrets)} | {recovery} | {o.recovery_seconds:.0f} |"
        )
    return "\n".join(rows)


def _scenario(factory: pytest.TempPathFactory, stack: str, faults: Faults) -> Scenario:
    engine = Engine.create(factory.mktemp("engine"))
    scenario = _run(engine, factory.mktemp(f"faults-{stack}"), stack, faults)
    print("\n" + report(scenario.outcomes))  # shown with -s
    return scenario


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    return _scenario(tmp_path_factory, "dev", _dev_faults)


@pytest.fixture(scope="module")
def jetstream(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    return _scenario(tmp_path_factory, "jetstream-v5e", _second_family_faults)


def _outcome(s: Scenario, fault: str) -> Outcome:
    found = [o for o in s.outcomes if o.fault == fault]
    assert found, f"{fault!r} never ran: {[o.fault for o in s.outcomes]}\n{s.error}"
    return found[0]


def _agreed(o: Outcome) -> None:
    a = o.agreement
    assert a is not None
    runs = "\n".join(
        f"--- pulumi {k}: {r.returncode}\n{(r.stdout + r.stderr)[-3000:]}" for k, r in o.recovery_runs.items()
    )
    assert a.pending == [], f"{o.fault}: pending operations left: {a.pending}\n{runs}"
    assert a.converged, f"{o.fault}: not converged:\n{a.detail}\n{runs}"
    assert a.orphans == [], f"{o.fault}: orphans {a.orphans}"
    assert a.duplicates == [], f"{o.fault}: duplicates {a.duplicates}"
    assert a.lost_secrets == [], f"{o.fault}: the token is in the state as {a.lost_secrets}"


# --- the tests -------------------------------------------------------------------------------


INTERRUPTED = ["SIGINT up (queues)", "SIGINT up (smoke Job await)", "SIGKILL up (serving)"]


@pytest.mark.parametrize("fault", INTERRUPTED)
def test_an_interrupted_up_converges_after_the_readme_recovery(dev: Scenario, fault: str) -> None:
    o = _outcome(dev, fault)
    assert o.injected, f"{fault}: the trigger never fired:\n{o.faulted.stdout[-3000:]}"
    assert o.faulted.returncode != 0, f"{fault}: the interrupted run still succeeded"
    _agreed(o)


def test_ctrl_c_cancels_gracefully(dev: Scenario) -> None:
    """The first SIGINT lets in-flight operations finish and saves what they did (the CLI's
    cancellation scope, pkg/backend/cancellation_scope.go): nothing is left pending."""
    for fault in ("SIGINT up (queues)", "SIGINT up (smoke Job await)", "SIGINT destroy"):
        o = _outcome(dev, fault)
        assert "^C received; cancelling" in o.faulted.stdout, o.faulted.stdout[-2000:]


def test_sigkill_leaves_the_lock_and_pending_operations_that_the_recovery_clears(dev: Scenario) -> None:
    for fault in ("SIGKILL up (serving)", "SIGKILL destroy"):
        o = _outcome(dev, fault)
        cancel = o.recovery_runs["cancel --yes"]
        assert cancel.returncode == 0, cancel.stderr
        assert "has been canceled" in cancel.stdout


@pytest.mark.parametrize("fault", ["SIGINT destroy", "SIGKILL destroy"])
def test_an_interrupted_destroy_finishes_on_the_next_destroy(dev: Scenario, fault: str) -> None:
    o = _outcome(dev, fault)
    assert o.injected, o.faulted.stdout[-3000:]
    assert o.notes["held after"] > 0, "the destroy ended before the fault"
    if fault == "SIGINT destroy":
        # Pulumi v3.274.0 ends a destroy cancelled by Ctrl-C with exit code 0 and "The resources in
        # the stack have been deleted" while most are still there: the README warns of it.
        assert "^C received; cancelling" in o.faulted.stdout
    else:
        assert o.faulted.returncode != 0
    _agreed(o)


def test_a_protected_stack_deletes_nothing_on_destroy(dev: Scenario) -> None:
    o = _outcome(dev, "destroy of a protected stack")
    assert o.faulted.returncode != 0
    assert "protected" in o.faulted.stdout + o.faulted.stderr
    assert o.notes["deleted"] == []
    _agreed(o)


def test_up_fails_naming_the_webhook_that_is_not_serving_then_converges(dev: Scenario) -> None:
    o = _outcome(dev, "slice webhook not serving")
    out = o.faulted.stdout + o.faulted.stderr
    assert o.faulted.returncode != 0
    assert "failed calling webhook" in out and "no endpoints available" in out, out[-3000:]
    assert o.notes["failed after seconds"] < FAULT_TIMEOUT
    _agreed(o)


def test_a_second_up_on_a_locked_stack_is_refused(dev: Scenario) -> None:
    o = _outcome(dev, "two ups at once")
    assert o.faulted.returncode != 0
    assert "the stack is currently locked by 1 lock(s)" in o.faulted.stdout + o.faulted.stderr
    assert o.notes["first"].returncode == 0, o.notes["first"].stdout[-3000:]
    _agreed(o)


def test_drift_by_hand_is_shown_by_preview_refresh_and_restored_by_up_refresh(dev: Scenario) -> None:
    o = _outcome(dev, "drift by hand")
    preview = o.notes["preview"]
    try:
        steps = json.loads(preview.stdout).get("steps") or []
    except json.JSONDecodeError:
        steps = []
    changed = {(s["op"], s["urn"].rsplit("::", 1)[0].rsplit("$", 1)[-1]) for s in steps if s["op"] != "same"}
    kinds = {kind for _op, kind in changed}
    shown = preview.stdout + preview.stderr
    assert {"kubernetes:networking.k8s.io/v1:NetworkPolicy", "kubernetes:core/v1:ConfigMap"} <= kinds, (changed, shown)
    # The scaled LWS: an update, or (server-side dry run) the conflict naming the field.
    assert "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet" in kinds or ".spec.replicas" in shown, shown
    plain = o.notes["plain up"]
    assert plain.returncode != 0
    assert "Server-Side Apply field conflict" in plain.stdout and ".spec.replicas" in plain.stdout, plain.stdout[-3000:]
    _agreed(o)


def test_an_api_server_restart_during_up_converges(dev: Scenario) -> None:
    """The provider's Job await rides out the outage (client-go retries its watch) or, if the
    outage outlasts a request, `up` fails naming the connection; either way the next `up` converges."""
    o = _outcome(dev, "API server restart during up")
    assert o.injected, f"the up finished before the restart:\n{o.faulted.stdout[-3000:]}"
    out = o.faulted.stdout + o.faulted.stderr
    assert o.faulted.returncode == 0 or "connection refused" in out, out[-3000:]
    print(f"\nAPI server restart: {', '.join(f'{k} {v:.0f}' for k, v in o.notes.items())}")  # with -s
    _agreed(o)


def test_an_empty_checkpoint_sidecar_fails_every_command_until_the_readme_step(dev: Scenario) -> None:
    o = _outcome(dev, "empty checkpoint sidecar")
    out = o.faulted.stdout + o.faulted.stderr
    assert o.faulted.returncode != 0 and "failed to load checkpoint: EOF" in out, out[-3000:]
    assert o.notes["cleared"] is True
    _agreed(o)


def test_every_fault_was_injected_and_reported(dev: Scenario) -> None:
    table = report(dev.outcomes)
    assert len(dev.outcomes) == 11, table
    assert all(o.injected for o in dev.outcomes), table


@pytest.mark.parametrize(
    "fault",
    [
        "jetstream: SIGINT up (serving)",
        "jetstream: smoke test fails",
        "jetstream: SIGKILL destroy",
    ],
)
def test_the_second_family_survives_the_same_faults(jetstream: Scenario, fault: str) -> None:
    o = _outcome(jetstream, fault)
    assert o.injected, o.faulted.stdout[-3000:] if o.faulted else o.fault
    _agreed(o)


def test_a_jetstream_front_that_refuses_fails_up_naming_the_job_and_its_last_lines(jetstream: Scenario) -> None:
    o = _outcome(jetstream, "jetstream: smoke test fails")
    out = o.faulted.stdout + o.faulted.stderr
    assert o.faulted.returncode != 0
    assert JOB_NAME in out and "smoke test failed" in out, out[-3000:]
    assert "HTTP 422" in out and "Field required" in out, out[-3000:]
