"""What if a cube is unhealthy: `python -m plan --unhealthy-cube N` adds the admission preview with
cube N's hosts out of Kueue's reach.

An unhealthy host is cordoned, tainted or NotReady; Kueue's topology-aware scheduler keeps only
nodes that are schedulable and Ready (kueue v0.19.2 pkg/cache/scheduler/tas_nodes_cache.go `sync`),
so a cube whose hosts are out offers no domain: the stack's workloads, arriving as the plan has them,
meet one cube fewer. The cubes are alike, so that is the preview on `tpu.cubes - 1` cubes; its
verdicts are judged by real Kueue with cube N's nodes cordoned (tests/test_admission_oracle.py).
"""

from __future__ import annotations

from domain import admission
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
    priorities = dict(config.kueue.priorities.items())
    prediction = admission.predict(admission.requests_from_workloads(work, priorities), cubes, config.tpu.generation)
    return {w.name: prediction.groups(w.name) for w in work}


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
