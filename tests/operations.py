"""Day-2 operations (the README's "Operations" recipes) applied to a stack that is already up.

Each recipe is the config edit a platform engineer makes in a pull request. The runner applies it
to the stack that tests/test_cluster_up.py's lifecycle has up on the local plane, with the real
engine, and records what a reviewer and the cluster would see:
- what `make diff` says (the offline plan of the stack file before and after the edit, through
  plan/document.py's diff report, as `python -m plan diff` makes it);
- what `pulumi preview` plans, by operation and kind;
- the wall time of the `up`, and which serving pods kept running (same UID) or were replaced;
- whether a second `up` is a no-op, and whether the token ever shows in the preview or the state.

The expectations live with the recipe and are the README's words as data; the tests in
tests/test_cluster_up.py compare each run with them.
"""

from __future__ import annotations

import base64
import json
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from settings.model import StackConfig
from tests import control_plane as cp

TPU_LABEL = "cloud.google.com/gke-tpu-accelerator"
WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/workloads"
# Kueue counts each eviction of a Workload by reason in status.schedulingStats.evictions; a
# preemption's reason is "Preempted" (kueue v0.19.2 pkg/workload/evict/evict.go
# workloadEvictionStateInc; apis/kueue/v1beta2/workload_types.go WorkloadEvictedByPreemption).
PREEMPTED = "Preempted"
# The owners of Kueue's Workloads here: Kueue makes one per JobSet and one per LWS group, each
# owned by its JobSet or LWS (pkg/controller/jobs/leaderworkerset/leaderworkerset_reconciler.go).
WORKLOAD_OWNERS = ("JobSet", "LeaderWorkerSet")
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER = "leaderworkerset.sigs.k8s.io/worker-index"
SETTLE_TIMEOUT = 300.0
# A replacement shows in `preview --json` as up to three steps of one URN.
REPLACING = {"replace", "create-replacement", "delete-replaced"}


@dataclass(frozen=True)
class Recipe:
    """One day-2 change and what the README says it does.

    `planned`: the preview's operations, as (operation, kind, resource name) with replacements
    folded into "replace". `restarts`: the LeaderWorkerSets whose running pods are replaced (all
    other serving pods keep their UIDs). `tpu_cost`: the first words of `make diff`'s headline, or
    "No changes." when the offline plan sees none (a secret's new value is masked)."""

    name: str
    config: tuple[tuple[str, str], ...] = ()
    secret: tuple[tuple[str, str], ...] = ()
    planned: tuple[tuple[str, str, str], ...] = ()
    restarts: tuple[str, ...] = ()
    tpu_cost: str = ""
    outputs: tuple[str, ...] = ()  # stack outputs the up changes
    # (level, value): every Kueue Workload of that level's class ends with this priority, by
    # Kueue's own reconciliation; the other classes' Workloads keep theirs.
    workload_priority: tuple[str, int] | None = None
    removed: tuple[str, ...] = ()  # --path keys the edit removes (`pulumi config rm --path`)
    unprotect: tuple[str, ...] = ()  # resources `pulumi state unprotect` releases first, by name
    # GKE creates or deletes the VMs of an added or removed TPU pool: the plane's nodes follow the
    # stack's pools after the up, as GKE's would (tests/control_plane.py tpu_nodes); these many
    # nodes (created, deleted).
    nodes: tuple[int, int] | None = None
    # The TPU workloads (JobSet or LWS names) Kueue preempts because of the change: `make diff`'s
    # admission table must call them preempted, and on the plane Kueue must evict exactly these.
    preempted: tuple[str, ...] = ()


@dataclass
class RecipeRun:
    recipe: Recipe
    planned: list[tuple[str, str, str]] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    headline: list[str] = field(default_factory=list)
    diff: dict[str, Any] = field(default_factory=dict)
    preview: Any = None
    up: Any = None
    seconds: float = 0.0
    settled: str = ""  # empty when every LeaderWorkerSet settled, else what was missing
    kept: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    again: Any = None
    leaked: list[str] = field(default_factory=list)  # where a secret showed in plain text or base64
    unprotected: list[str] = field(default_factory=list)  # URNs released by `pulumi state unprotect`
    nodes: tuple[list[str], list[str]] = ([], [])  # TPU nodes created, deleted as GKE would
    # `make diff`'s admission after the change (workload -> admitted or pending) and what it calls
    # preempted; then what Kueue on the plane did: each workload's admission once settled, and the
    # workloads whose Workloads it preempted during the change.
    predicted: dict[str, str] = field(default_factory=dict)
    predicted_preempted: list[str] = field(default_factory=list)
    admission: dict[str, str] = field(default_factory=dict)
    preemptions: list[str] = field(default_factory=list)
    error: str = ""  # the runner's own failure (a traceback), which stops the later recipes


def _step(step: Mapping[str, Any]) -> tuple[str, str, str]:
    # urn:pulumi:<stack>::<project>::<parent types>$<type>::<name>
    _stack, _project, types, name = step["urn"].split("::", 3)
    kind = types.rsplit("$", 1)[-1].rsplit(":", 1)[-1]
    return ("replace" if step["op"] in REPLACING else step["op"], kind, name)


def planned_steps(preview: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """The preview's changes, one per resource, Stack and components left out (they carry no state)."""
    found = {_step(s) for s in preview.get("steps") or [] if s["op"] != "same"}
    return sorted(s for s in found if s[1] not in ("Stack",) and not s[1][0].islower())


def offline_document(stack_file: Path, stack: str) -> dict[str, Any]:
    """The offline plan of a stack file, as `make plan`/`make diff` make it (secrets masked)."""
    from plan import document
    from plan import engine as offline

    raw, secret_keys = offline.read_stack_config(stack_file)
    return document.document(offline.run(raw, stack=stack, secret_keys=secret_keys), stack_config(stack_file, stack))


def stack_config(stack_file: Path, stack: str) -> StackConfig:
    from plan import engine as offline
    from settings.loader import load

    raw, secret_keys = offline.read_stack_config(stack_file)
    return load(raw, stack=stack, project=raw.get("gcp:project"), secret_keys=secret_keys)


def follow_pools(plane: cp.ControlPlane, config: StackConfig) -> tuple[list[str], list[str]]:
    """Create the TPU nodes of pools the plane lacks and delete those of pools the stack no longer
    has, as GKE does for a created or deleted node pool; (created, deleted) node names."""
    wanted = {node["metadata"]["name"]: node for node in cp.tpu_nodes(config)}
    present = {
        node["metadata"]["name"]
        for node in plane.request("GET", "/api/v1/nodes", query={"labelSelector": TPU_LABEL})["items"]
    }
    created, deleted = sorted(wanted.keys() - present), sorted(present - wanted.keys())
    plane.create_nodes([wanted[name] for name in created])
    for name in deleted:
        plane.request("DELETE", f"/api/v1/nodes/{name}")
    plane.wait_for(f"{len(created)} new TPU nodes Ready", lambda: set(created) <= plane.ready_nodes())
    return created, deleted


def serving_pods(plane: cp.ControlPlane, namespace: str) -> dict[str, str]:
    """'<lws> group <g> worker <w>' -> pod UID, for the running (undeleted) pods of every LWS."""
    pods = plane.request("GET", f"/api/v1/namespaces/{namespace}/pods", query={"labelSelector": LWS_NAME})["items"]
    found = {}
    for pod in pods:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        labels = pod["metadata"]["labels"]
        found[f"{labels[LWS_NAME]} group {labels[LWS_GROUP]} worker {labels.get(LWS_WORKER, '0')}"] = pod["metadata"][
            "uid"
        ]
    return found


def settled(plane: cp.ControlPlane, namespace: str) -> str:
    """'' when every LeaderWorkerSet in `namespace` has exactly its replicas x size pods, all Ready,
    none terminating, and its status counts every group ready and updated; else what is missing."""
    sets = plane.request("GET", f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{namespace}/leaderworkersets")["items"]
    pods = plane.request("GET", f"/api/v1/namespaces/{namespace}/pods", query={"labelSelector": LWS_NAME})["items"]
    for lws in sets:
        name, spec, status = lws["metadata"]["name"], lws["spec"], lws.get("status") or {}
        replicas = spec.get("replicas", 1)
        wanted = replicas * (spec.get("leaderWorkerTemplate") or {}).get("size", 1)
        mine = [p for p in pods if p["metadata"]["labels"].get(LWS_NAME) == name]
        ready = [
            p
            for p in mine
            if not p["metadata"].get("deletionTimestamp")
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
        ]
        if len(mine) != wanted or len(ready) != wanted:
            return f"{name}: {len(ready)} of {wanted} pods Ready, {len(mine)} in all"
        # A rollout the controller has not begun yet leaves every old pod Ready and the status as
        # it was: the pods' containers must be the templates' (what a change of image or model moves).
        stale = [
            p["metadata"]["name"] for p in mine if _containers(p["spec"]) != _containers(_template(lws, p)["spec"])
        ]
        if stale:
            return f"{name}: pods {stale} still run an earlier template"
        if status.get("readyReplicas") != replicas or status.get("updatedReplicas") != replicas:
            counted = f"{status.get('readyReplicas')} ready, {status.get('updatedReplicas')} updated"
            return f"{name}: status {counted} of {replicas}"
    return ""


def priorities_other_than(plane: cp.ControlPlane, namespace: str, level: str, value: int) -> list[str]:
    """The Kueue Workloads in `namespace` of the class of `level` (settings/naming.py
    `priority_class`: `<prefix>-<level>`) whose spec.priority is not `value`."""
    workloads = [
        w
        for w in plane.request("GET", WORKLOADS.format(namespace=namespace))["items"]
        if ((w["spec"].get("priorityClassRef") or {}).get("name") or "").endswith(f"-{level}")
    ]
    if not workloads:
        return [f"no Workload of the {level} class"]
    return [
        f"{w['metadata']['name']}: {w['spec'].get('priority')}" for w in workloads if w["spec"].get("priority") != value
    ]


def _owner(workload: Mapping[str, Any]) -> str:
    refs = workload["metadata"].get("ownerReferences") or []
    return next((r["name"] for r in refs if r["kind"] in WORKLOAD_OWNERS), "")


def _workloads(plane: cp.ControlPlane, namespace: str) -> list[dict[str, Any]]:
    found = plane.request("GET", WORKLOADS.format(namespace=namespace))["items"]
    return [w for w in found if _owner(w) and not w["metadata"].get("deletionTimestamp")]


def admission(plane: cp.ControlPlane, namespace: str) -> dict[str, str]:
    """JobSet or LWS -> "admitted" when Kueue admitted every Workload it has (an LWS has one per
    group), "pending" when none, "partly" otherwise; as `make diff`'s admission verdicts say it."""
    admitted: dict[str, list[bool]] = {}
    for workload in _workloads(plane, namespace):
        conditions = workload.get("status", {}).get("conditions") or []
        done = any(c["type"] == "Finished" and c["status"] == "True" for c in conditions)
        if not done:
            ok = any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions)
            admitted.setdefault(_owner(workload), []).append(ok)
    return {
        owner: "admitted" if all(flags) else "pending" if not any(flags) else "partly"
        for owner, flags in admitted.items()
    }


def preemption_counts(plane: cp.ControlPlane, namespace: str) -> dict[str, tuple[str, int]]:
    """Workload UID -> (owner, how many times Kueue preempted it)."""
    found = {}
    for workload in _workloads(plane, namespace):
        stats = (workload.get("status", {}).get("schedulingStats") or {}).get("evictions") or []
        count = sum(e.get("count", 0) for e in stats if e.get("reason") == PREEMPTED)
        found[workload["metadata"]["uid"]] = (_owner(workload), count)
    return found


def preempted_since(before: Mapping[str, tuple[str, int]], after: Mapping[str, tuple[str, int]]) -> list[str]:
    """The owners of the Workloads Kueue preempted between two preemption_counts."""
    return sorted({owner for uid, (owner, count) in after.items() if count > before.get(uid, (owner, 0))[1]})


def predicted_admission(doc: Mapping[str, Any]) -> dict[str, str]:
    """The offline plan's admission verdict per Kueue workload (make plan's admission section)."""
    impact = doc.get("impact") or {}
    if not impact.get("kueue"):
        return {}
    return {w["name"]: w["verdict"] for w in impact.get("workloads") or []}


def _template(lws: Mapping[str, Any], pod: Mapping[str, Any]) -> Mapping[str, Any]:
    template = lws["spec"]["leaderWorkerTemplate"]
    leader = pod["metadata"]["labels"].get(LWS_WORKER) == "0"
    return template["leaderTemplate"] if leader and template.get("leaderTemplate") else template["workerTemplate"]


def _containers(spec: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    return [(c["name"], c.get("image"), c.get("command"), c.get("args")) for c in spec.get("containers") or []]


def leaked(text: str, secrets: list[str]) -> list[str]:
    found = []
    for value in secrets:
        for form, shown in (("plain", value), ("base64", base64.b64encode(value.encode()).decode())):
            if shown in text:
                found.append(f"{form} {value[:5]}...")
    return found


@dataclass
class Stack:
    """The stack a recipe changes, and how to reach it."""

    pulumi: Callable[..., Any]  # (*args, check=False) -> CompletedProcess, on the stack, with the plane's env
    stack_file: Path
    name: str
    plane: cp.ControlPlane
    namespace: str
    secrets: list[str]  # every secret value the stack ever had
    plane_stack: str  # the stack file's own name, which named the plane's nodes (cp.stack_nodes)
    document: dict[str, Any] | None = None  # the offline plan of the stack file as the last recipe left it


def apply(stack: Stack, recipe: Recipe, up: tuple[str, ...]) -> RecipeRun:
    """Make the recipe's edit, record what `make diff` and `pulumi preview` say, apply it, and
    record what changed on the plane."""
    from plan import document

    run = RecipeRun(recipe)
    plane, namespace = stack.plane, stack.namespace
    before_doc = stack.document or offline_document(stack.stack_file, stack.name)
    # Whatever the last change started (an image bump's rollout, Kueue re-admitting a workload)
    # ends before this one is measured: every LWS rolled out, and Kueue's admission as planned.
    expected = predicted_admission(before_doc)
    plane.wait_for("every LeaderWorkerSet settled before the edit", lambda: settled(plane, namespace) == "",
                   SETTLE_TIMEOUT, 1.0)  # fmt: skip
    plane.wait_for(f"Kueue's admission {expected} before the edit", lambda: admission(plane, namespace) == expected,
                   SETTLE_TIMEOUT, 1.0)  # fmt: skip
    before = serving_pods(plane, namespace)
    counts = preemption_counts(plane, namespace)
    for key, value in recipe.config:
        stack.pulumi("config", "set", "--path", f"tpu-slicing:{key}", value)
    for key, value in recipe.secret:
        stack.pulumi("config", "set", "--secret", f"tpu-slicing:{key}", value)
        stack.secrets.append(value)
    for key in recipe.removed:
        stack.pulumi("config", "rm", "--path", f"tpu-slicing:{key}")
    if recipe.unprotect:
        resources = json.loads(stack.pulumi("stack", "export").stdout)["deployment"]["resources"]
        for name in recipe.unprotect:
            for urn in [r["urn"] for r in resources if r["urn"].endswith(f"::{name}")]:
                run.unprotected.append(urn)
                stack.pulumi("state", "unprotect", "--yes", urn)
    after_doc = stack.document = offline_document(stack.stack_file, stack.name)
    run.diff = document.diff_report(before_doc, after_doc, recipe.name)
    run.headline = [line for line in run.diff["markdown"].splitlines()[2:] if line][:1]
    run.predicted = predicted_admission(after_doc)
    run.predicted_preempted = sorted(w["name"] for w in run.diff.get("workloads") or [] if w["change"] == "preempted")

    run.preview = stack.pulumi("preview", "--json", "--diff")
    if run.preview.returncode == 0:
        run.planned = planned_steps(json.loads(run.preview.stdout))
    outputs = stack.pulumi("stack", "output", "--json").stdout
    started = time.monotonic()
    run.up = stack.pulumi(*up)
    run.seconds = time.monotonic() - started
    old, new = json.loads(outputs or "{}"), json.loads(stack.pulumi("stack", "output", "--json").stdout or "{}")
    run.outputs = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    if run.up.returncode == 0:
        if recipe.nodes is not None:
            # Named as the plane's nodes were, from the stack file the stack was made from.
            run.nodes = follow_pools(plane, stack_config(stack.stack_file, stack.plane_stack))

        def as_planned() -> bool:
            done = set(preempted_since(counts, preemption_counts(plane, namespace))) >= set(run.predicted_preempted)
            return done and admission(plane, namespace) == run.predicted

        waits: list[tuple[str, Callable[[], bool], Callable[[], str]]] = [
            ("every LeaderWorkerSet settled", lambda: settled(plane, namespace) == "",
             lambda: settled(plane, namespace) or "settled only after the wait"),
            (f"Kueue's admission {run.predicted}", as_planned,
             lambda: "Kueue's admission is not what `make diff` planned (below)"),
        ]  # fmt: skip
        if recipe.workload_priority is not None:
            level, wanted = recipe.workload_priority

            def others() -> list[str]:
                return priorities_other_than(plane, namespace, level, wanted)

            waits.append((f"every {level} Workload at priority {wanted}", lambda: not others(),
                          lambda: f"{level} Workloads not at {wanted}: {others()}"))  # fmt: skip
        for what, done, missing in waits:  # in order; the first that times out says what is missing
            try:
                plane.wait_for(what, done, SETTLE_TIMEOUT, 1.0)
            except cp.ControlPlaneError:
                run.settled = missing()
                break
    run.admission = admission(plane, namespace)
    run.preemptions = preempted_since(counts, preemption_counts(plane, namespace))
    after = serving_pods(plane, namespace)
    run.kept = sorted(k for k in before.keys() & after.keys() if before[k] == after[k])
    run.replaced = sorted(k for k in before.keys() & after.keys() if before[k] != after[k])
    run.added = sorted(after.keys() - before.keys())
    run.removed = sorted(before.keys() - after.keys())
    run.again = stack.pulumi(*up, "--expect-no-changes")
    exported = stack.pulumi("stack", "export")
    run.leaked = leaked(run.preview.stdout + run.diff["markdown"] + exported.stdout, stack.secrets)
    return run


def preview_counts(planned: list[tuple[str, str, str]]) -> dict[str, int]:
    """The preview's steps as `make diff` counts them: to add, to change (updated or replaced), to remove."""
    ops = Counter(op for op, _kind, _name in planned)
    return {"add": ops["create"], "change": ops["update"] + ops["replace"], "remove": ops["delete"]}


def problems(run: RecipeRun) -> list[str]:
    """How a run differs from its recipe (empty: it did what the README says)."""
    recipe, found = run.recipe, []
    if run.error:
        return [f"the recipe did not run to its end:\n{run.error}"]
    for label, done in (("preview", run.preview), ("up", run.up), ("second up", run.again)):
        if done is None or done.returncode != 0:
            tail = "" if done is None else (done.stdout + done.stderr)[-2500:]
            found.append(f"`pulumi {label}` failed:\n{tail}")
    if run.planned != sorted(recipe.planned):
        found.append(f"planned {run.planned}, the recipe says {sorted(recipe.planned)}")
    counted = preview_counts(run.planned)
    offline = {key: (run.diff.get("summary") or {}).get(key) for key in counted}
    if not recipe.secret and offline != counted:  # the offline plan masks a secret's new value
        found.append(f"`make diff` counts {offline}, the engine's preview {counted}")
    if run.outputs != sorted(recipe.outputs):
        found.append(f"outputs changed {run.outputs}, the recipe says {sorted(recipe.outputs)}")
    if not run.headline or not run.headline[0].startswith(recipe.tpu_cost):
        found.append(f"`make diff` headline {run.headline}, the recipe says {recipe.tpu_cost!r}...")
    if run.settled:
        found.append(f"not settled: {run.settled}")
    if run.predicted_preempted != sorted(recipe.preempted):
        found.append(
            f"`make diff` calls {run.predicted_preempted} preempted, the recipe says {sorted(recipe.preempted)}"
        )
    if run.preemptions != sorted(recipe.preempted):
        found.append(f"Kueue preempted {run.preemptions} on the plane, the recipe says {sorted(recipe.preempted)}")
    if run.admission != run.predicted:
        found.append(f"Kueue's admission on the plane {run.admission}, `make diff` planned {run.predicted}")
    restarted = {key.split(" group ", 1)[0] for key in run.replaced}
    if restarted != set(recipe.restarts):
        found.append(f"pods replaced in {sorted(restarted)}, the recipe says {sorted(recipe.restarts)}")
    if recipe.nodes is not None and tuple(len(names) for names in run.nodes) != recipe.nodes:
        found.append(f"TPU nodes created, deleted: {run.nodes}, the recipe says {recipe.nodes} in number")
    if len(run.unprotected) != len(recipe.unprotect):
        found.append(f"unprotected {run.unprotected}, the recipe names {list(recipe.unprotect)}")
    if run.leaked:
        found.append(f"a secret showed in the preview, the diff or the state: {run.leaked}")
    return found


def table(runs: list[RecipeRun]) -> str:
    """The closing note's figures: per recipe, the planned operations, what restarted, the up's wall time."""
    lines = [
        "| recipe | planned | pods kept / replaced / added / removed | Kueue preempted | up s | problems |",
        "|---|---|---|---|---|---|",
    ]
    for run in runs:
        ops = Counter(op for op, _kind, _name in run.planned)
        shown = ", ".join(f"{n} {op}" for op, n in sorted(ops.items())) or "none"
        pods = f"{len(run.kept)} / {len(run.replaced)} / {len(run.added)} / {len(run.removed)}"
        preempted = ", ".join(run.preemptions) or "none"
        lines.append(
            f"| {run.recipe.name} | {shown} | {pods} | {preempted} | {run.seconds:.0f} | {len(problems(run))} |"
        )
    for run in runs:
        lines += ["", f"{run.recipe.name}: planned {run.planned}; outputs {run.outputs}; headline {run.headline}"]
        lines.append(f"  make diff counts {run.diff.get('summary')}")
        lines.append(f"  replaced {run.replaced}; added {run.added}; removed {run.removed}")
        lines.append(f"  Kueue preempted {run.preemptions}; admission {run.admission}")
        lines += [f"  problem: {p[:1500]}" for p in problems(run)]
    return "\n".join(lines)


# The dev stack's recipes, in the order the lifecycle applies them (each starts where the last
# ended). What each says is the README's "Operations" section.
NETWORK_POLICY_GROUPS = (("vllm-decode", 4), ("vllm-decode", 5), ("vllm-prefill", 4))
SERVING_SETS = (("update", "LeaderWorkerSet", "decode-lws"), ("update", "LeaderWorkerSet", "prefill-lws"))
# A cube is one more TPU pool, a larger ClusterQueue quota and the dashboard's chip count.
CUBE_CHANGES = {
    op: (
        (op, "NodePool", "cube-sub-block-2"),
        ("update", "ClusterQueue", "cluster-queue"),
        ("update", "Dashboard", "dashboard"),
        # The component's input: each bound sub-block's health as read (infra/reservation.py `bound`).
        ("update", "TpuPools", "tpu-pools"),
    )
    for op in ("create", "delete")
}
DEV_RECIPES = (
    Recipe(
        "picker and sidecar images (one llm-d release)",
        config=(
            ("versions.endpointPickerImage", "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.9.1"),
            ("versions.routingSidecarImage", "ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.9.1"),
        ),
        planned=(
            ("update", "Deployment", "epp"),
            ("update", "LeaderWorkerSet", "decode-lws"),
            ("replace", "Job", "job"),
        ),
        restarts=("vllm-decode",),
        tpu_cost="**TPU cost: not touched**",
    ),
    Recipe(
        "serving replicas up",
        config=(("serving.decode.replicas", "6"), ("serving.prefill.replicas", "5")),
        # One NetworkPolicy per new group (k8s/network_policies.py: the KV transfer pairs groups).
        planned=(
            *(("create", "NetworkPolicy", f"serving-network-policies-{s}-group-{g}") for s, g in NETWORK_POLICY_GROUPS),
            *SERVING_SETS,
        ),
        tpu_cost="**TPU cost: touched**",
        # 11 serving groups and the check's 6 sub-slices are 17 of the 16 2x2x2 sub-slices of two
        # cubes: a new (high) group preempts the running (low) sub-slicing check, which waits.
        preempted=("subslicing-check",),
    ),
    Recipe(
        "serving replicas down",
        config=(("serving.decode.replicas", "4"), ("serving.prefill.replicas", "4")),
        planned=(
            *(("delete", "NetworkPolicy", f"serving-network-policies-{s}-group-{g}") for s, g in NETWORK_POLICY_GROUPS),
            *SERVING_SETS,
        ),
        tpu_cost="**TPU cost: touched**",
    ),
    Recipe(
        "hfToken rotated",
        secret=(("hfToken", "hf_rotatedRecipeToken9876543210"),),
        # The provider replaces a Secret whose data changes (pulumi-kubernetes provider/pkg/provider
        # diff.go forceNewProperties, unless enableSecretMutable); named, it is deleted first.
        planned=(("replace", "Secret", "hf-token"),),
        tpu_cost="No changes.",
    ),
    Recipe(
        "another model",
        config=(
            ("serving.model.name", "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"),
            # A real revision of that repository (vLLM and SGLang launch scripts name it), in cache layout.
            (
                "serving.model.path",
                "models--Qwen--Qwen3-235B-A22B-Instruct-2507-FP8/snapshots/e156cb4efae43fbee1a1ab073f946a1377e6b969",
            ),
            ("serving.model.parametersBillions", "235"),
            ("serving.model.attentionHeads", "64"),
            ("serving.model.contextLength", "262144"),
        ),
        planned=(("replace", "Job", "job"), *SERVING_SETS),
        restarts=("vllm-decode", "vllm-prefill"),
        tpu_cost="**TPU cost: not touched**",
    ),
    Recipe(
        "high priority raised",
        config=(("kueue.priorities.high", "3500"),),
        planned=(("update", "WorkloadPriorityClass", "priority-high"),),
        tpu_cost="**TPU cost: touched**",
        workload_priority=("high", 3500),
    ),
    Recipe(
        "Kueue patch version (installed by the platform team)",
        config=(("versions.kueue", "0.19.3"),),
        outputs=("platformControllers",),
        tpu_cost="**TPU cost: not touched**",
    ),
    Recipe(
        "cube added",
        config=(("reservation.subBlocks[2]", "sub-block-2"), ("tpu.cubes", "3")),
        planned=CUBE_CHANGES["create"],
        outputs=("nodePools", "totalChips"),
        tpu_cost="**TPU cost: touched**",
        nodes=(16, 0),
    ),
    Recipe(
        "cube handed back",
        config=(("tpu.cubes", "2"),),
        removed=("reservation.subBlocks[2]",),
        unprotect=("cube-sub-block-2",),
        planned=CUBE_CHANGES["delete"],
        outputs=("nodePools", "totalChips"),
        tpu_cost="**TPU cost: touched**",
        nodes=(0, 16),
    ),
)
