"""The program's NetworkPolicies, judged by an upstream matcher against the flow table.

docs/architecture.md "Network flows" is the one source of the flows the policies must admit
(tests/network_flows.py reads it). For every committed stack, and dev with an autoscaled role,
cyclonus (tests/network_judge.py) decides every port of every pod from every source: what it
admits must be exactly the table's flows. Each admitted row's policy must admit it alone, and
every row, admitted or refused, must apply to some stack, so the table names nothing that is not
there.
"""

from __future__ import annotations

import re

import pytest

from plan import engine
from settings.model import StackConfig
from tests import network_flows, network_judge
from tests.network_reachability import Pod, _relation, allowed
from tests.test_network_policies import STACKS, _bodies, stack_plan, stack_pods

VARIANTS = (*STACKS, "dev+autoscaling")


def _policies(plan: engine.PlanResult) -> list[dict]:
    return [b for b in _bodies(plan) if b["kind"] == "NetworkPolicy"]


@pytest.fixture(scope="module")
def judged() -> dict[str, tuple[engine.PlanResult, StackConfig, set[str]]]:
    """Per stack: its plan, its settings and what cyclonus admits."""
    found = {}
    for stack in VARIANTS:
        plan, config = stack_plan(stack)
        targets, sources = stack_pods(plan, config)
        found[stack] = (plan, config, network_judge.reachable(_policies(plan), sources, targets))
    return found


@pytest.mark.parametrize("stack", VARIANTS)
def test_the_upstream_matcher_admits_exactly_the_flow_table(stack: str, judged: dict) -> None:
    plan, config, admitted = judged[stack]
    _, sources = stack_pods(plan, config)
    flows, refused = network_flows.read()
    wanted = network_flows.expected(flows, {pod.role for pod in sources})
    assert wanted, f"the flow table names no flow of {stack}"
    assert sorted(wanted - admitted) == [], "in docs/architecture.md, Network flows, but refused by cyclonus"
    assert sorted(admitted - wanted) == [], "admitted by cyclonus but not in docs/architecture.md, Network flows"
    assert not admitted & network_flows.expected(refused, {pod.role for pod in sources})


def test_the_control_plane_reaches_webhooks_and_the_metrics_api_through_konnectivity(judged: dict) -> None:
    """GKE's path: the API server's calls come from the konnectivity agents' pod addresses."""
    _, _, admitted = judged["dev+autoscaling"]
    assert "konnectivity agent -> slice-controller-controller-manager:9443" in admitted
    assert "konnectivity agent -> custom-metrics-stackdriver-adapter:6443" in admitted


def test_every_row_applies_to_some_stack(judged: dict) -> None:
    flows, refused = network_flows.read()
    roles = set()
    for plan, config, _ in judged.values():
        roles |= {pod.role for pod in stack_pods(plan, config)[1]}
    assert [f for f in [*flows, *refused] if not network_flows.applies(f, roles)] == []


def _pair(sources: list[Pod], targets: list[Pod], flow: network_flows.Flow) -> tuple[Pod, Pod] | None:
    for target in targets:
        if target.role != flow.destination:
            continue
        for source in sources:
            if source is not target and _relation(source, target) == flow.source:
                return source, target
    return None


def test_each_admitted_row_is_admitted_by_the_policy_it_names(judged: dict) -> None:
    flows, _ = network_flows.read()
    unchecked = set(flows)
    wrong = []
    for plan, config, _ in judged.values():
        policies = _policies(plan)
        targets, sources = stack_pods(plan, config)
        for flow in flows:
            pair = _pair(sources, targets, flow)
            if pair is None:
                continue
            source, target = pair
            unchecked.discard(flow)
            group = target.group if target.group is not None else ""
            name = flow.policy.replace("<i>", str(group))
            named = [p for p in policies if p["metadata"]["name"] == name]
            if not named or not all(allowed(named, source, target, port) for port in flow.ports):
                wrong.append(f"{flow.source} -> {flow.destination}: not admitted by {name!r} alone")
    assert wrong == []
    assert unchecked == set()


def test_the_table_parser_refuses_what_it_cannot_read() -> None:
    text = "## Network flows\n\n| a | b |\n|---|---|\n| x | y |\n"
    with pytest.raises(ValueError, match=re.escape("expected 2 tables")):
        network_flows.read(text)
