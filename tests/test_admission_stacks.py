"""Each committed stack's admission section is what real Kueue does with that stack's own workloads.

`make plan STACK=<stack>` and the PR diff's impact section tell a reviewer which of the stack's TPU
workloads Kueue admits, keeps pending or preempts (plan/impact.py, from `domain/admission.py` on
`settings/capacity.py workloads`). Here the same workloads, in the same order, are submitted to
Kueue v0.19.2 on a plane with the stack's own cubes and the plan's own Kueue objects
(tests/test_admission_oracle.py `oracle_env`), and Kueue's verdicts must be the section's: per
JobSet its state, per LeaderWorkerSet how many groups run (Kueue makes one Workload per group).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from domain import admission
from settings import capacity
from tests import control_plane as cp
from tests.test_admission_oracle import (
    Env,
    Scenario,
    kueue_verdicts,
    model_verdicts,
    oracle_env,
    previewer,
    run_in_kueue,
    tied_preemptions,
)
from tests.test_admission_oracle import _stack_raw as stack_raw

pytestmark = pytest.mark.xdist_group(cp.XDIST_GROUP)  # one plane at a time (tests/control_plane.py)

# The committed stacks Kueue queues (the TPU7x cube platform); the slice backends have no Kueue.
KUEUE_STACKS = ("dev", "dev-b")


@pytest.fixture(scope="module", params=KUEUE_STACKS)
def stack_env(request: pytest.FixtureRequest) -> Iterator[Env]:
    with oracle_env(request.param, None) as running:
        yield running


def _scenario(env: Env) -> Scenario:
    work = capacity.workloads(env.config)
    return Scenario(
        env.config.name_prefix,
        tuple((w.name, w.priority, w.shape, w.slices) for w in work),
        tuple(w.name for w in work if w.kind == admission.LWS_KIND),
    )


def _section(env: Env) -> admission.Prediction:
    """The prediction plan/impact.py builds its admission section from, as it builds it."""
    config = env.config
    requests = admission.requests_from_workloads(capacity.workloads(config), dict(config.kueue.priorities.items()))
    return admission.predict(requests, config.tpu.cubes, config.tpu.generation)


def test_the_stacks_are_their_committed_selves() -> None:
    for stack in KUEUE_STACKS:
        raw, _ = stack_raw(stack, None)
        assert "tpu-slicing:tpu" in raw, stack  # a cube stack, with the cubes it commits


def test_kueue_admits_what_the_stack_plan_says(stack_env: Env) -> None:
    scenario = _scenario(stack_env)
    assert scenario.workloads, f"{scenario.name} has no TPU workloads to compare"
    section = _section(stack_env)
    assert not tied_preemptions(section), "the stack's outcome rests on a tie Kueue breaks by UID"
    plan = model_verdicts(scenario, section)
    # Each arrival waits for the preview's verdicts on the arrivals so far, on the stack's own cubes,
    # not for a quiet period (tests/test_admission_oracle.py `run_in_kueue`).
    observed = run_in_kueue(stack_env, scenario, plan, previewer(stack_env, stack_env.config.tpu.cubes))
    kueue = kueue_verdicts(scenario, observed)
    where = {name: o.cubes for name, o in observed.items() if o.cubes}
    print(f"\n{scenario.name} {scenario.workloads}: plan {plan}\n  kueue {kueue} cubes {where}", file=sys.stderr)
    assert kueue == plan, f"{scenario.name}: the plan says {plan}, Kueue did {kueue} (cubes {where})"
