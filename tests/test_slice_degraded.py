"""A TPU partition that degrades under a running serving group: real Kueue v0.19.2 and LWS v0.8.0
keep the group where it is, and place new work only on HEALTHY partitions (docs/operations.md, "A
partition that degrades under running work").

The decision this story holds the program to: the slice controller's FailOnUntoleratedDegradedSlice
gate stays off (alpha; it reads only the 4x4x4 state label, so it does nothing for 2x2x2 and 2x2x4
sub-slices, and for a super-slice it evicts a group that still serves: AI-Hypercomputer/xpk slice/
internal/controller/workload_controller.go `calculateEffectiveSliceCounts`,
`podSetRequestedOnlyHealthySlices`, internal/core/constants.go `TPUSliceHealthNodeSelectorKey`).
With the gate off the controller counts an ACTIVE_DEGRADED Slice as active and its check stays
Ready (the stand-in, tests/standins/slice_admission.py, does the same by reading no Slice status;
on this plane, as on every plane made by `oracle_env`, no Slice kind is installed, so it keeps no
Slice objects whose Ready reason could be set).

One cube (four 2x2x4 partitions, two in each 2x4x4) and the program's Kueue objects
(tests/test_admission_oracle.py `oracle_env`). A decode LWS made from the program's rendered one
(`leader_worker_set`), one 2x2x4 group (a leader and three workers), selecting HEALTHY partitions of
its own shape as the program writes a 2x2x4 role (settings/rules_recovery.py `healthy_selector`):

1. the group runs;
2. GKE marks two 2x2x4 partitions DEGRADED (the `cloud.google.com/gke-tpu-partition-2x2x4-state`
   label of their hosts, written as tests/standins/tpu_host.py writes partition states): the
   group's own, and the free one beside it in its 2x4x4, which is where Kueue's BestFit puts the
   next group on a healthy cube (the tightest 2x4x4 that holds it: kueue v0.19.2
   pkg/cache/scheduler/tas_flavor_snapshot.go `findBestFitDomainBy`; the admission preview,
   domain/admission.py A4, places it there too). Which other shapes' states GKE flips with them is
   not played: 2x2x4 pods read only their own;
3. a probe that selects DEGRADED 2x2x4 partitions is judged and left waiting, Kueue counting the 8
   other hosts as excluded by its nodeSelector: proof that Kueue's topology cache holds both
   partitions' new labels (a label change is synced into it and retries waiting workloads:
   pkg/controller/tas/node_controller.go `Update`, pkg/controller/tas/resource_flavor.go
   `NotifyNodeUpdate`);
4. the LWS is scaled to two groups; the second is admitted and Ready.

Read then, and final: (a) the running group was kept: same pods (UIDs), same hosts, its Workload
Admitted and never evicted. Kueue replaces or evicts an admitted workload's node only on Ready or
taints: the TAS node controller is triggered by a node update only when Ready or the taints change
(node_controller.go `Update`), and judges a node by Ready and taints alone (`getWorkloadStatus`);
a label change only updates the topology cache and retries *waiting* workloads (resource_flavor.go
`NotifyNodeUpdate`, `Reconcile`). nodeSelectors act at scheduling only; the kubelet (kwok here)
does not re-check them. (b) The second group sits on one HEALTHY 2x2x4 partition, not on the
DEGRADED one BestFit would otherwise give it.

The admission preview cannot judge (b): it models no partition health (domain/admission.py A8;
only whole failed cubes, A9). Its verdict (the second group admitted, on cube 0) is compared with
Kueue's, and its placement (beside the first group) is what the degradation is set against.

Cost: about 45 s with the plane's start (the late plane group).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from domain import admission
from domain.topology import Topology
from settings.rules_recovery import HEALTHY, healthy_selector
from tests import control_plane as cp
from tests.operations import LWS_GROUP, LWS_NAME
from tests.standins import slice_admission as sa
from tests.standins import tpu_host
from tests.test_admission_oracle import (
    JOBSETS,
    LWSS,
    Env,
    _condition,
    _hosts,
    _ready,
    _workloads,
    jobset,
    leader_worker_set,
    oracle_env,
)

pytestmark = pytest.mark.xdist_group(cp.LATE_XDIST_GROUP)  # one plane at a time (tests/control_plane.py)

STACK, CUBES = "dev", 1
NAME, SHAPE, LEVEL = "decode", "2x2x4", "high"
PODS = 4  # 2x2x4 = 16 chips, 4 a host: a leader and three workers
DEGRADED = "DEGRADED"
PROBE = "probe-degraded"
TIMEOUT = 180.0
STATE = re.compile(r"^cloud\.google\.com/gke-tpu-partition-\d+x\d+x\d+-state$")
PARTITION = f"cloud.google.com/gke-tpu-partition-{SHAPE}-id"  # a host's 2x2x4 partition
PARENT = "cloud.google.com/gke-tpu-partition-2x4x4-id"  # the 2x4x4 that holds a 2x2x4 partition
JUDGED = re.compile(r"Total nodes: (?P<total>\d+); excluded: .*\bnodeSelector: (?P<excluded>\d+)\b")
MERGE = "application/merge-patch+json"


@dataclass(frozen=True)
class Group:
    hosts: tuple[str, ...]  # Kueue's topology assignment, leader and workers
    pods: frozenset[str]  # the UIDs of its Running, Ready pods
    admitted: bool
    evictions: int  # all Kueue counted, for any reason
    failure: str  # its TPUSliceFailure condition's status, "" without one


@dataclass
class Story:
    before: dict[int, Group] = field(default_factory=dict)  # group 0 running, nothing degraded yet
    after: dict[int, Group] = field(default_factory=dict)  # both groups running, after the degradation
    own: frozenset[str] = frozenset()  # group 0's partition (hosts), degraded
    beside: frozenset[str] = frozenset()  # the free partition in its 2x4x4, degraded
    probe: str = ""  # Kueue's message on the probe that selects DEGRADED partitions
    states: dict[str, str] = field(default_factory=dict)  # host -> its 2x2x4 state at the end
    partition: dict[str, str] = field(default_factory=dict)  # host -> its 2x2x4 partition id
    preview: admission.Prediction | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    error: str = ""


def groups(env: Env) -> dict[int, Group]:
    pods = env.plane.request(
        "GET", f"/api/v1/namespaces/{env.namespace}/pods", query={"labelSelector": f"{LWS_NAME}={NAME}"}
    )["items"]
    found = {}
    for key, workload in _workloads(env).items():
        name, _, index = key.partition("/")
        if name != NAME:
            continue
        admitted = _condition(workload, "Admitted") == "True"
        stats = (workload.get("status", {}).get("schedulingStats") or {}).get("evictions") or []
        found[int(index)] = Group(
            tuple(sorted(_hosts(workload))) if admitted else (),
            frozenset(
                p["metadata"]["uid"] for p in pods if p["metadata"]["labels"].get(LWS_GROUP) == index and _ready(p)
            ),
            admitted,
            sum(int(e.get("count") or 0) for e in stats),
            _condition(workload, sa.SLICE_FAILURE) or "",
        )
    return found


def _running(group: Group | None) -> bool:
    return group is not None and group.admitted and len(group.pods) == PODS and len(group.hosts) == PODS


def _when(now: dict[int, Group], done: Callable[[dict[int, Group]], bool]) -> dict[int, Group] | None:
    return now if done(now) else None


def _healthy_of_its_shape(env: Env, body: dict[str, Any]) -> dict[str, Any]:
    """The program's selector for a SHAPE slice: the oracle's LWS keeps the rendered role's state
    label (its 2x2x2) when it changes the shape, where the program writes the slice's own."""
    wanted = healthy_selector(env.config.tpu.generation, Topology.parse(SHAPE))
    group = body["spec"]["leaderWorkerTemplate"]
    for template in (group["leaderTemplate"], group["workerTemplate"]):
        selector = template["spec"].setdefault("nodeSelector", {})
        for key in [k for k in selector if STATE.match(k)]:
            del selector[key]
        selector.update(wanted)
    return body


def _preview(env: Env) -> admission.Prediction:
    """The admission preview of the story on a healthy cube: the group, then one more of its LWS."""
    priority = dict(env.config.kueue.priorities.items())[LEVEL]
    first = [admission.Request(f"{NAME}/0", priority, SHAPE, 1, 0, lws=NAME)]
    return admission.predict(admission.with_added_groups(first, {NAME: 1}), CUBES, env.config.tpu.generation)


def _probe_judged(env: Env) -> str | None:
    """Kueue's message on the probe once its topology cache holds every degraded label: half the
    cube's hosts (the 8 not DEGRADED) excluded by its nodeSelector, of the hosts it counted
    (tas_flavor_snapshot.go `notFitMessage`; scheduling_simulator_default.go `FindFeasibleNodes`)."""
    workload = _workloads(env).get(PROBE)
    reserved = next(
        (c for c in (workload or {}).get("status", {}).get("conditions") or [] if c["type"] == "QuotaReserved"), None
    )
    message = str((reserved or {}).get("message") or "")
    judged = JUDGED.search(message)
    return message if judged and 2 * int(judged["excluded"]) == int(judged["total"]) else None


def _run(env: Env, story: Story) -> None:
    started = time.monotonic()
    plane = env.plane
    story.preview = _preview(env)
    body = _healthy_of_its_shape(env, leader_worker_set(env, NAME, LEVEL, SHAPE, 1))
    plane.request("POST", f"{LWSS}/namespaces/{env.namespace}/leaderworkersets", body)
    story.before = plane.wait_for(
        "the first group admitted and Ready",
        lambda: _when(groups(env), lambda now: _running(now.get(0))),
        TIMEOUT,
    )
    story.seconds["first group running"] = time.monotonic() - started
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in plane.request("GET", "/api/v1/nodes")["items"]}
    story.partition = {h: lab[PARTITION] for h, lab in labels.items() if PARTITION in lab}
    host = story.before[0].hosts[0]
    story.own = frozenset(tpu_host.partition_hosts(plane, host)[SHAPE])
    story.beside = frozenset(
        h
        for h, lab in labels.items()
        if lab.get(PARENT) == labels[host][PARENT] and h in story.partition and h not in story.own
    )

    # GKE marks both partitions DEGRADED: the state label of each of their hosts.
    degraded = time.monotonic()
    for node in sorted(story.own | story.beside):
        plane.request(
            "PATCH", f"/api/v1/nodes/{node}", {"metadata": {"labels": {tpu_host.state_label(SHAPE): DEGRADED}}},
            content_type=MERGE,
        )  # fmt: skip
    probe = jobset(env, PROBE, "-", SHAPE, 2)
    template = probe["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    template["spec"]["nodeSelector"][tpu_host.state_label(SHAPE)] = DEGRADED
    plane.request("POST", f"{JOBSETS}/namespaces/{env.namespace}/jobsets", probe)
    story.probe = plane.wait_for(
        "Kueue's topology cache to hold the DEGRADED labels", lambda: _probe_judged(env), TIMEOUT
    )
    story.seconds["labels seen by Kueue"] = time.monotonic() - degraded
    plane.request(
        "DELETE", f"{JOBSETS}/namespaces/{env.namespace}/jobsets/{PROBE}", {"propagationPolicy": "Background"}
    )

    # A second group arrives (the LWS scaled out, as its autoscaler would).
    scaled = time.monotonic()
    path = f"{LWSS}/namespaces/{env.namespace}/leaderworkersets/{NAME}"
    plane.request("PATCH", path, {"spec": {"replicas": 2}}, content_type=MERGE)
    story.after = plane.wait_for(
        "the second group admitted and Ready",
        lambda: _when(groups(env), lambda now: len(now) == 2 and _running(now.get(1))),
        TIMEOUT,
    )
    story.seconds["second group running"] = time.monotonic() - scaled
    nodes = plane.request("GET", "/api/v1/nodes")["items"]
    story.states = {
        n["metadata"]["name"]: n["metadata"]["labels"].get(tpu_host.state_label(SHAPE), "")
        for n in nodes
        if n["metadata"]["name"] in story.partition
    }


@pytest.fixture(scope="module")
def story() -> Iterator[Story]:
    started = time.monotonic()
    with oracle_env(STACK, CUBES) as env:
        told = Story()
        try:
            _run(env, told)
        except cp.ControlPlaneError as err:  # kept for the tests: what happened so far still says something
            told.error = str(err)
        print(
            f"\ndegraded partition story: {', '.join(f'{k} {v:.1f} s' for k, v in told.seconds.items())}; "
            f"with the plane's start {time.monotonic() - started:.0f} s; degraded "
            f"{sorted({told.partition[h] for h in told.own | told.beside})}, the second group on "
            f"{sorted({told.partition[h] for h in told.after[1].hosts}) if 1 in told.after else None}; "
            f"probe: {told.probe}",
            file=sys.stderr,
        )
        yield told


def _ready_story(story: Story) -> Story:
    assert not story.error and story.after, story.error or story
    return story


def test_the_running_group_on_a_degraded_partition_keeps_serving(story: Story) -> None:
    """Final once the second group is admitted: Kueue's cache held the labels before it was placed
    (the probe), and nothing in Kueue reacts to a label change on an admitted workload's node."""
    story = _ready_story(story)
    before, after = story.before[0], story.after[0]
    assert set(before.hosts) == story.own, "the first group was not on one whole partition"
    assert {story.states[h] for h in story.own} == {DEGRADED}, story.states
    assert _running(after) and after.pods == before.pods, f"the group restarted: {before} -> {after}"
    assert after.hosts == before.hosts and after.evictions == 0, after
    assert after.failure == "", "the slice controller (gate off) marked the group failed"


def test_a_group_submitted_after_the_degradation_lands_only_on_healthy_partitions(story: Story) -> None:
    story = _ready_story(story)
    second = story.after[1]
    partitions = {story.partition[h] for h in second.hosts}
    assert len(partitions) == 1 and len(second.hosts) == PODS, second
    assert {story.states[h] for h in second.hosts} == {HEALTHY}, {h: story.states[h] for h in second.hosts}
    assert not set(second.hosts) & (story.own | story.beside), second.hosts
    assert second.evictions == 0, second


def test_the_preview_agrees_on_the_verdict_and_would_have_used_the_degraded_partition(story: Story) -> None:
    """The preview models no partition health (domain/admission.py A8): its verdict (admitted, cube 0)
    is Kueue's; its placement, beside the first group in one 2x4x4, is the partition degraded here,
    so the story judges the selector where Kueue's BestFit would otherwise go."""
    story = _ready_story(story)
    preview = story.preview
    assert preview is not None
    assert preview.final == {f"{NAME}/0": "admitted", f"{NAME}/1": "admitted"}, preview.final
    placed = {p.workload: p for p in preview.placements}
    assert {p.cube for p in placed.values()} == {0}
    block = Topology.parse("2x4x4").chips
    assert placed[f"{NAME}/0"].offset_chips // block == placed[f"{NAME}/1"].offset_chips // block, placed
    assert len(story.beside) == PODS and not story.beside & story.own, story.beside
    assert all(g.admitted for g in story.after.values()), story.after
    # Kueue's hosts are all on cube 0, the plane's one cube.
    assert {h for g in story.after.values() for h in g.hosts} <= set(story.partition), story.after


def test_no_other_workload_holds_the_degraded_partitions(story: Story) -> None:
    """The probe never ran: it waited, and was deleted; only the first group sits on a DEGRADED host."""
    story = _ready_story(story)
    assert story.probe, "the probe was never judged"
    held = {h for g in story.after.values() for h in g.hosts} & (story.own | story.beside)
    assert held == story.own, held
