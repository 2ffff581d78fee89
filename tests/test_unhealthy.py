"""`python -m plan --unhealthy-cube N` (plan/unhealthy.py): the preview with one cube fewer. Real Kueue
judges the same question on the plane (tests/test_admission_oracle.py, a cube's nodes cordoned)."""

from __future__ import annotations

import subprocess
import sys

from plan import engine, unhealthy
from tests.conftest import config_with


def test_a_stack_that_needs_every_cube_shows_what_waits_without_one() -> None:
    config = config_with({"serving": {"decode": {"replicas": 8}}, "checks": {"subslicing": {"enabled": True}}})
    planned, without = unhealthy.verdicts(config, config.tpu.cubes), unhealthy.verdicts(config, config.tpu.cubes - 1)
    assert planned != without
    lines = unhealthy.lines(config, 0)
    assert lines[0] == f"If cube 0 is unhealthy ({config.tpu.cubes - 1} of {config.tpu.cubes} cubes left to Kueue):"
    changed = [line for line in lines if "(planned:" in line]
    assert changed, lines


def test_the_command_refuses_a_cube_the_stack_does_not_have() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "plan", "--stack", "dev", "--unhealthy-cube", "9"],
        cwd=engine.ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and done.stderr.strip() == "error: --unhealthy-cube 9: the stack has cubes 0 to 1"


def test_a_stack_without_cubes_is_refused() -> None:
    said = unhealthy.problem(config_with(stack="saxml-v5e"), 0)
    assert said is not None and "has no cubes" in said


def test_a_cube_failing_under_the_plan_says_what_is_evicted_placed_again_and_left_waiting() -> None:
    """The cube holding groups matters here, unlike before the workloads arrive: the preview with
    cube N failed while they run (domain/admission.py A9)."""
    config = config_with({"serving": {"decode": {"replicas": 8}}, "checks": {"subslicing": {"enabled": True}}})
    told = {cube: unhealthy.failure_lines(config, cube) for cube in range(config.tpu.cubes)}
    for cube, lines in told.items():
        assert (
            lines[0] == f"If cube {cube} fails while the workloads run (the plan's load on {config.tpu.cubes} cubes):"
        )
    everything = "\n".join(line for lines in told.values() for line in lines)
    assert "evicted by Kueue (NodeFailures), to be placed again" in everything
    assert "placed again on cube" in everything
    # The planned map: cube 0 holds two groups of each role, cube 1 two of prefill's and six of decode's.
    assert "  high-priority work left waiting: vllm-prefill, vllm-decode" in told[0], told[0]
    assert "  high-priority work left waiting: vllm-decode" in told[1], told[1]


def test_a_cube_with_nothing_on_it_moves_nothing() -> None:
    config = config_with({})
    quiet = [unhealthy.failure_lines(config, cube) for cube in range(config.tpu.cubes)]
    assert any(lines[1:] == ["  nothing runs on it: nothing moves"] for lines in quiet), quiet


def test_groups_of_one_worker_on_a_failing_cube_carry_the_known_limitation() -> None:
    """The dev stack's roles run 2x2x2 groups (a leader and one worker): Kueue v0.19.2 replaces their
    failed hosts one pod at a time (tests/test_slice_recovery.py), which the preview says."""
    config = config_with({})
    lines = unhealthy.failure_lines(config, 0)
    assert any(
        line.startswith("  caution: vllm-decode, vllm-prefill run groups of a leader and one worker") for line in lines
    ), lines
    wider = config_with({"serving": {"prefill": {"topology": "2x2x4"}, "decode": {"topology": "2x2x4"}}})
    told = [line for cube in range(wider.tpu.cubes) for line in unhealthy.failure_lines(wider, cube)]
    assert any("evicted by Kueue (NodeFailures)" in line for line in told), told
    assert not any("caution" in line for line in told), told
