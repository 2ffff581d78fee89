"""The first `pulumi preview` on a bare Google Cloud project, by the real engine.

The engine previews a new stack against the stand-in GCP provider on a bare project, on this tree
and on `BEFORE` (tests/bare_project.py): a plan-time read of an API the program itself enables
must wait for it (GetServerConfig refuses while container.googleapis.com is off). The offline
judge of the same first `up` is tests/test_bare_project.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from plan.engine import ROOT
from tests.bare_project import BEFORE, tree_at
from tests.engine import Engine, Workspace
from tests.standins import gcp_provider
from tests.standins.gcp_project import Project

pytestmark = pytest.mark.gcp_standin


@pytest.fixture(scope="module")
def before(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tree_at(BEFORE, tmp_path_factory.mktemp("before") / "tree")


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    return Engine.create(tmp_path_factory.mktemp("engine"))


def _workspace(engine: Engine, tree: Path, label: str) -> Workspace:
    """A workspace of `tree` (this checkout's stand-ins judge it), on a bare project."""
    dest = engine.base / "projects" / label
    shutil.copytree(tree, dest, ignore=shutil.ignore_patterns(".git", ".venv", "venv", "build", "__pycache__"))
    (dest / ".venv").symlink_to(ROOT / ".venv")
    state = engine.base / "state" / label
    state.mkdir(parents=True)
    ws = Workspace(engine=engine, root=dest, env={"PULUMI_BACKEND_URL": f"file://{state}"})
    ws.pulumi("stack", "init", "dev")
    ws.bare_project("dev")
    return ws


def _preview(ws: Workspace) -> Any:
    return ws.pulumi("preview", "--stack", "dev", "--diff", check=False)


def test_before_the_fix_the_first_preview_failed_on_a_disabled_api(engine: Engine, before: Path) -> None:
    done = _preview(_workspace(engine, before, "before"))
    assert done.returncode != 0
    output = done.stdout + done.stderr
    # The old program ran two invokes before their APIs (GetServerConfig on container, getProject on
    # cloudresourcemanager), at once: which one the engine reports first is a matter of timing.
    assert "has not been used in project" in output and "SERVICE_DISABLED" in output, output[-3000:]
    assert "container.googleapis.com" in output or "cloudresourcemanager.googleapis.com" in output


def test_the_first_preview_on_a_bare_project_waits_for_the_apis(engine: Engine) -> None:
    ws = _workspace(engine, ROOT, "now")
    done = _preview(ws)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert Project.at(Path(ws.env[gcp_provider.PROJECT_ENV])).refusals == []
