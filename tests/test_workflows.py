"""CI workflows: lint clean, every action pinned, and their offline commands work."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@(v\d+\.\d+\.\d+|[0-9a-f]{40})$")


def _actionlint() -> str:
    found = shutil.which("actionlint") or str(Path(sys.executable).parent / "actionlint")
    if not Path(found).exists():
        pytest.fail("actionlint is not installed: it comes with requirements-dev.txt")
    return found


def test_workflows_exist() -> None:
    assert {p.name for p in WORKFLOWS} == {"ci.yml", "preview.yml", "preview-comment.yml", "deploy.yml", "destroy.yml"}


def test_actionlint_is_clean() -> None:
    done = subprocess.run([_actionlint(), *map(str, WORKFLOWS)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  x:\n    runs-on: ubuntu-24.04\n    steps:\n      - run: echo ${{ matrix.nope }}\n"
    )
    done = subprocess.run([_actionlint(), str(broken)], capture_output=True, text=True, check=False)
    assert done.returncode != 0 and "matrix" in done.stdout


def _uses(document: object) -> list[str]:
    if isinstance(document, dict):
        return [v for k, v in document.items() if k == "uses" and isinstance(v, str)] + [
            u for v in document.values() for u in _uses(v)
        ]
    if isinstance(document, list):
        return [u for v in document for u in _uses(v)]
    return []


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned(workflow: Path) -> None:
    uses = _uses(yaml.safe_load(workflow.read_text()))
    assert uses, "a workflow without actions?"
    for action in uses:
        assert PINNED.match(action), f"{workflow.name}: {action} is not pinned to an exact version or commit"


def test_write_access_is_limited() -> None:
    for workflow in WORKFLOWS:
        document = yaml.safe_load(workflow.read_text())
        assert document["permissions"] == {"contents": "read"} or workflow.name == "preview-comment.yml", workflow.name
        triggers = document[True] if True in document else document["on"]  # YAML reads `on` as True
        if "pull_request" in triggers:
            # Jobs that run pull-request code get no write token beyond the credentials-gated preview.
            for name, job in document["jobs"].items():
                perms = job.get("permissions", {})
                assert perms.get("contents", "read") == "read", name


def test_preview_comment_runs_no_pull_request_code() -> None:
    document = yaml.safe_load((ROOT / ".github/workflows/preview-comment.yml").read_text())
    steps = [step for job in document["jobs"].values() for step in job["steps"]]
    assert not any("checkout" in step.get("uses", "") for step in steps)
    assert not any("run" in step for step in steps)


def test_destroy_is_manual_and_confirmed() -> None:
    document = yaml.safe_load((ROOT / ".github/workflows/destroy.yml").read_text())
    triggers = document[True]
    assert list(triggers) == ["workflow_dispatch"]
    job = document["jobs"]["destroy"]
    assert job["if"] == "${{ inputs.stack == inputs.confirm }}"
    assert job["environment"] == "${{ inputs.stack }}"


def test_deploy_runs_each_stack_behind_its_environment() -> None:
    job = yaml.safe_load((ROOT / ".github/workflows/deploy.yml").read_text())["jobs"]["up"]
    assert job["environment"] == "${{ matrix.stack }}"
    pulumi = next(step for step in job["steps"] if step.get("uses", "").startswith("pulumi/actions@"))
    assert pulumi["with"]["command"] == "up" and pulumi["with"]["policyPacks"] == "policy"


def test_the_stack_matrix_command_lists_every_stack_file() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "plan", "stacks", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    names = json.loads(done.stdout)
    assert names == sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in ROOT.glob("Pulumi.*.yaml"))
    assert "dev" in names
