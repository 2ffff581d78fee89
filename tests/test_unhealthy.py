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
