"""What if a cube is unhealthy: `python -m plan --unhealthy-cube N` adds the admission preview with
cube N's hosts out of Kueue's reach, before the workloads arrive and while they run.

An unhealthy host is cordoned, tainted or NotReady; Kueue's topology-aware scheduler keeps only
nodes that are schedulable and Ready (kueue v0.19.2 pkg/cache/scheduler/tas_nodes_cache.go `sync`),
so a cube whose hosts are out offers no domain: the stack's workloads, arriving as the plan has them,
meet one cube fewer. The cubes are alike, so that is the preview on `tpu.cubes - 1` cubes; its
verdicts are judged by real Kueue with cube N's nodes cordoned (tests/test_admission_oracle.py).

A cube that fails under the running workloads is a different story, and N matters: what sits on
cube N loses its hosts, an LWS group is evicted and placed again, perhaps preempting lower-priority
work, a check (no restart) ends (domain/admission.py A9); real Kueue judges it with every host of
the cube failed under LWS groups (tests/test_cube_failure.py).
"""

from __future__ import annotations

from domain import admission, recovery_time, topology
from settings import capacity
from settings.model import StackConfig

HIGH = "high"


def problem(config: StackConfig, cube: int) -> str | None:
    """Why `cube` cannot be asked about, or None."""
    if not config.serving.dynamic_slicing:
        return "--unhealthy-cube: the stack has no cubes (its backend runs one node pool per slice)"
    if not 0 <= cube < config.tpu.cubes:
        return f"--unhealthy-cube {cube}: the stack has cubes 0 to {config.tpu.cubes - 1}"
    return None


def verdicts(config: StackConfig, cubes: int) -> dict[str, tuple[int, int]]:
    """Each workload's (groups admitted, groups) on `cubes` cubes."""
    work = capacity.workloads(config)
    if not work or cubes < 1:
        return {w.name: (0, w.slices if w.kind == "LeaderWorkerSet" else 1) for w in work}
    prediction = admission.predict(_requests(config), cubes, config.tpu.generation)
    return {w.name: prediction.groups(w.name) for w in work}


def _requests(config: StackConfig) -> list[admission.Request]:
    priorities = dict(config.kueue.priorities.items())
    return admission.requests_from_workloads(capacity.workloads(config), priorities)


def failure_lines(config: StackConfig, cube: int) -> list[str]:
    """What the preview says happens when cube `cube`'s hosts fail under the plan's load."""
    requests, cubes, generation = _requests(config), config.tpu.cubes, config.tpu.generation
    shown = [f"If cube {cube} fails while the workloads run (the plan's load on {cubes} cubes):"]
    if not requests:
        return [*shown, "  nothing runs on it"]
    planned = admission.predict(requests, cubes, generation)
    after = admission.predict(requests, cubes, generation, [admission.CubeFault(cube)])
    told = after.events[len(planned.events) :]
    if not told:
        return [*shown, "  nothing runs on it: nothing moves"]
    shown += [f"  {line}" for line in _told(after, told)]
    workloads = capacity.workloads(config)
    for work in workloads:
        before, now = planned.groups(work.name), after.groups(work.name)
        members = after.members(work.name)
        if any(after.final[r.name] == "failed" for r in members):
            state = "ended (its Job runs no restart)"
        elif now[0] == now[1]:
            state = "admitted"
        else:
            state = "pending" if not now[0] else f"{now[0]} of {now[1]} groups"
        change = "" if now == before else f" (planned: {before[0]} of {before[1]})"
        shown.append(f"  {work.name} [{work.priority}]: {state}{change}")
    by_name = {r.name: r for r in after.requests}
    split = sorted(
        {
            by_name[e.workload].lws
            for e in told
            if e.action == "evicted" and _one_worker(config, by_name[e.workload].shape)
        }
    )
    if split:
        shown.append(
            f"  caution: {', '.join(split)} run groups of a leader and one worker; Kueue v0.19.2 replaces such a "
            "group's failed hosts one pod at a time wherever one fits, which can split it across partitions "
            "(docs/operations.md, When a TPU host fails: deactivate and activate its Workload)"
        )
    waiting = [w.name for w in workloads if w.priority == HIGH and after.pending_groups(w.name)]
    if waiting:
        shown.append(f"  high-priority work left waiting: {', '.join(waiting)}")
    if any(e.action == "evicted" for e in told):
        cube_shape = generation.cube_topology
        hosts = generation.vms(cube_shape, config.tpu.machine_type) if cube_shape is not None else 1
        shown += recovery_time.lines(hosts, config.kueue.recovery.force_delete_on_unreachable_host)
    return shown


def _one_worker(config: StackConfig, shape: str) -> bool:
    """A group of `shape` has a leader and one worker: each of its two PodSets is one pod."""
    generation = config.tpu.generation
    return generation.vms(topology.Topology.parse(shape), config.tpu.machine_type) == 2


def _told(after: admission.Prediction, told: tuple[admission.Event, ...]) -> list[str]:
    """The fault's events, one line per workload and kind: lost, placed again, preempted."""
    owner = {r.name: r.lws or r.name for r in after.requests}
    lines: dict[tuple[str, str], list[admission.Event]] = {}
    for event in told:
        lines.setdefault((owner[event.workload], event.action), []).append(event)
    said = []
    for (name, action), events in lines.items():
        count = f"{len(events)} group{admission.plural_s(len(events))} of " if events[0].workload != name else ""
        cubes = admission.cube_span(c for e in events for c in e.cubes)
        if action == "evicted":
            said.append(f"{count}{name} on {cubes}: evicted by Kueue (NodeFailures), to be placed again")
        elif action == "failed":
            said.append(f"{name} on {cubes}: its Job fails (no restart) and it ends")
        elif action == "preempted":
            said.append(f"{count}{name} on {cubes}: preempted by {', '.join(sorted({owner[e.by] for e in events}))}")
        else:
            said.append(f"{count}{name}: placed again on {cubes}")
    return said


def lines(config: StackConfig, cube: int) -> list[str]:
    planned = verdicts(config, config.tpu.cubes)
    without = verdicts(config, config.tpu.cubes - 1)
    priority = {w.name: w.priority for w in capacity.workloads(config)}
    shown = [f"If cube {cube} is unhealthy ({config.tpu.cubes - 1} of {config.tpu.cubes} cubes left to Kueue):"]
    for name, (running, total) in without.items():
        before = planned[name][0]
        state = "admitted" if running == total else ("pending" if not running else f"{running} of {total} groups")
        change = "" if running == before else f" (planned: {before} of {total})"
        shown.append(f"  {name} [{priority[name]}]: {state}{change}")
    waiting = [n for n, (r, t) in without.items() if priority[n] == HIGH and r < t]
    if waiting:
        shown.append(f"  high-priority work left waiting: {', '.join(waiting)}")
    return shown
