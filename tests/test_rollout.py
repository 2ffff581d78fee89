"""The fleet rollout's rules (operate/rollout.py), with a runner that records what it was asked; the
real engine runs them on two planes in tests/test_rollout_plane.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pulumi.automation import events

from operate import rollout

STACKS = ["dev", "dev-b", "jetstream-v5e", "saxml-v5e"]


class Recorder:
    def __init__(self, failing: set[tuple[str, str]] = frozenset()) -> None:  # type: ignore[assignment]
        self.failing = failing
        self.calls: list[tuple[str, str]] = []
        self.running = 0
        self.most = 0
        self._lock = threading.Lock()

    def _step(self, operation: str, stack: str) -> Mapping[str, int]:
        with self._lock:
            self.calls.append((operation, stack))
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            time.sleep(0.01)  # the step's own duration, so overlapping steps overlap
            if (operation, stack) in self.failing:
                raise RuntimeError(f"pulumi {operation} failed: smoke test Job failed for {stack}")
            return {"same": 3} if operation == "preview" else {"update": 1}
        finally:
            with self._lock:
                self.running -= 1

    def preview(self, stack: str) -> Mapping[str, int]:
        return self._step("preview", stack)

    def up(self, stack: str) -> Mapping[str, int]:
        return self._step("up", stack)


def test_all_preview_then_the_canary_alone_then_waves() -> None:
    runner = Recorder()
    outcomes = rollout.rollout(runner, STACKS, canary="dev-b", parallel=2)
    ups = [s for op, s in runner.calls if op == "up"]
    assert ups[0] == "dev-b" and sorted(ups[1:]) == ["dev", "jetstream-v5e", "saxml-v5e"]
    assert all(op == "preview" for op, _ in runner.calls[:4])
    assert [o.result for o in outcomes] == ["succeeded"] * 8 and runner.most <= 2


def test_a_failed_canary_stops_every_other_stack() -> None:
    runner = Recorder({("up", "dev")})
    outcomes = rollout.rollout(runner, STACKS, parallel=3, keep_going=True)
    assert [s for op, s in runner.calls if op == "up"] == ["dev"]
    skipped = [o for o in outcomes if o.result == "skipped"]
    assert {o.stack for o in skipped} == {"dev-b", "jetstream-v5e", "saxml-v5e"}
    assert all(o.message == "not applied: the canary dev failed" for o in skipped)
    failed = next(o for o in outcomes if o.result == "failed")
    assert "smoke test Job failed for dev" in failed.message


def test_a_failed_wave_stops_the_next_unless_told_to_keep_going() -> None:
    runner = Recorder({("up", "dev-b")})
    stopped = rollout.rollout(runner, STACKS, parallel=1)
    assert [o.stack for o in stopped if o.result == "skipped"] == ["jetstream-v5e", "saxml-v5e"]
    kept = rollout.rollout(Recorder({("up", "dev-b")}), STACKS, parallel=1, keep_going=True)
    assert [o.stack for o in kept if o.operation == "up" and o.result == "succeeded"] == [
        "dev",
        "jetstream-v5e",
        "saxml-v5e",
    ]


def test_a_failed_preview_applies_nothing() -> None:
    runner = Recorder({("preview", "saxml-v5e")})
    outcomes = rollout.rollout(runner, STACKS)
    assert not [c for c in runner.calls if c[0] == "up"]
    assert {o.message for o in outcomes if o.result == "skipped"} == {"not applied: the preview of saxml-v5e failed"}


@given(st.lists(st.sampled_from(STACKS), min_size=1, unique=True), st.integers(1, 4), st.data())
def test_waves_hold_each_stack_once_canary_first_and_bounded(
    stacks: list[str], parallel: int, data: st.DataObject
) -> None:
    canary = data.draw(st.sampled_from(stacks))
    found = rollout.waves(stacks, canary, parallel)
    assert found[0] == [canary]
    assert sorted(s for wave in found for s in wave) == sorted(stacks)
    assert all(1 <= len(wave) <= parallel for wave in found)


def test_an_unknown_canary_or_no_parallelism_is_refused() -> None:
    with pytest.raises(ValueError, match="canary 'prod' is not one of the stacks"):
        rollout.waves(STACKS, "prod", 2)
    with pytest.raises(ValueError, match="allowed: at least 1"):
        rollout.waves(STACKS, None, 0)


def test_the_summary_table_has_a_row_per_step() -> None:
    lines = rollout.table(rollout.rollout(Recorder(), ["dev", "dev-b"], parallel=2))
    assert lines[0].split() == ["stack", "operation", "result", "changes", "seconds", "message"]
    assert len(lines) == 5 and "update 1" in lines[3]


def _diagnostic(severity: str, message: str, urn: str | None = None) -> Any:
    """An event as the CLI's event log writes it (sdk/go/common/apitype/events.go DiagnosticEvent)."""
    body: dict[str, Any] = {"message": message, "color": "never", "severity": severity}
    if urn is not None:
        body["urn"] = urn
    return events.EngineEvent.from_json({"sequence": 1, "timestamp": 1, "diagnosticEvent": body})


def test_a_failed_step_names_the_failing_resource_and_why_not_the_clis_summary() -> None:
    errors = rollout.Errors()
    job = "urn:pulumi:dev::tpu-slicing::tpu-slicing:serving:Smoke$kubernetes:batch/v1:Job::serving-smoke-test"
    errors.on_event(_diagnostic("info", "creating", job))
    errors.on_event(_diagnostic("error", "<{%fg 1%}>Job failed<{%reset%}>:\n  smoke test failed: 404\n", job))
    errors.on_event(_diagnostic("error", "update failed"))
    errors.on_event(_diagnostic("error", f'resource "{job}" was created but failed', job))
    summary = "Outputs: gatewayIp: 10.250.0.1 ... Resources: + 118 created 2 errored Duration: 19s"
    message = errors.explain("up", RuntimeError(summary))
    assert message == (
        "pulumi up failed: Job serving-smoke-test: Job failed:\n  smoke test failed: 404\nupdate failed\n"
        'Job serving-smoke-test: resource "Job serving-smoke-test" was created but failed'
    )
    # Without a diagnostic the CLI's own words are all there is.
    assert rollout.Errors().explain("up", RuntimeError(summary)) == f"pulumi up failed: {summary}"


def test_a_long_failure_keeps_its_start_and_end_in_the_table_and_all_of_it_below() -> None:
    text = "pulumi up failed: Job job: Resource 'serving-smoke-test' failed\n" + "log line\n" * 400 + "verdict"

    class Long(Recorder):
        def up(self, stack: str) -> Mapping[str, int]:
            raise RuntimeError(text)

    outcomes = rollout.rollout(Long(), ["dev"])
    failed = next(o for o in outcomes if o.operation == "up")
    assert failed.message.startswith("pulumi up failed: Job job: Resource 'serving-smoke-test' failed log line")
    assert failed.message.endswith("log line verdict") and " … " in failed.message
    assert len(failed.message) == rollout.MESSAGE_HEAD + len(" … ") + rollout.MESSAGE_TAIL
    assert rollout.failures(outcomes) == [f"dev up: {text}"]


# --- which stacks: those the backend holds, selected, never created by a typo ------------------------

FILES = ["dev", "dev-b", "jetstream-v5e", "saxml-v5e"]
PROJECTS = {"dev": "my-project", "dev-b": "my-project", "jetstream-v5e": "example-tpu-project", "saxml-v5e": None}


def test_by_default_only_the_stacks_the_backend_holds_are_rolled_out() -> None:
    """Before, every stack file was a target: the committed examples were previewed and failed."""
    assert rollout.targets(FILES, ["dev", "other-project-stack"], PROJECTS) == ["dev"]


def test_a_named_stack_the_backend_does_not_hold_needs_create() -> None:
    with pytest.raises(rollout.TargetError, match="dev-b not in the backend you are logged in to"):
        rollout.targets(FILES, ["dev"], PROJECTS, ["dev", "dev-b"])
    assert rollout.targets(FILES, ["dev"], PROJECTS, ["dev", "dev-b"], create=True) == ["dev", "dev-b"]


@pytest.mark.parametrize("stack", ["jetstream-v5e", "saxml-v5e"])
def test_a_stack_naming_the_placeholder_project_is_refused(stack: str) -> None:
    with pytest.raises(rollout.TargetError, match=f"{stack}: gcp:project is the example's placeholder"):
        rollout.targets(FILES, FILES, PROJECTS, [stack])


def test_nothing_to_roll_out_and_unknown_stacks_are_refused() -> None:
    with pytest.raises(rollout.TargetError, match="no stack of this repository exists in the backend"):
        rollout.targets(FILES, [], PROJECTS)
    with pytest.raises(rollout.TargetError, match="no stack file for typo"):
        rollout.targets(FILES, FILES, PROJECTS, ["typo"])


def test_the_placeholder_is_the_one_the_workflows_skip() -> None:
    from plan.engine import ROOT

    for workflow in ("preview.yml", "deploy.yml", "drift.yml"):
        assert f'"{rollout.PLACEHOLDER_PROJECT}"' in (ROOT / ".github" / "workflows" / workflow).read_text()


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.engine import Engine, EngineMissingError

    try:
        return Engine.create(tmp_path_factory.mktemp("engine"))
    except EngineMissingError as err:
        pytest.skip(str(err))


def test_the_real_cli_lists_the_backends_stacks_and_never_creates_one_unasked(engine: Any) -> None:
    workspace = engine.workspace("rollout-targets")
    workspace.pulumi("stack", "init", "dev")
    env = {**engine.env, **workspace.env}
    assert rollout.deployed_stacks(workspace.root, env, engine.base) == ["dev"]
    runner = rollout.AutomationRunner(workspace.root, env, engine.base)
    with pytest.raises(RuntimeError, match="no stack named 'dev-b' found"):
        runner.preview("dev-b")
    assert rollout.deployed_stacks(workspace.root, env, engine.base) == ["dev"], "a typo made a stack"
