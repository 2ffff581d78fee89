"""The first `pulumi up` on a bare Google Cloud project: ordering judged by the bare-project stand-in.

Two judges, both run on this tree and on `BEFORE`, the commit before the ordering fixes, so each
rule is shown to catch what it was written for:

- the real engine previews a new stack against the stand-in GCP provider on a bare project: a
  plan-time read of an API the program itself enables must wait for it (GetServerConfig refuses
  while container.googleapis.com is off);
- every Google resource of a stack's plan is created on a bare project in the worst order the
  engine may choose: whatever does not depend on the cluster goes first (a real cluster takes
  about ten minutes, so everything else that can start does). The engine promises dependency
  order and nothing more, so a create that needs the cluster must depend on it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest

from plan.engine import ROOT, cloud_state
from tests.control_plane import load_stack
from tests.engine import Engine, Workspace
from tests.standins import gcp_project, gcp_provider
from tests.standins.gcp_project import Project

# The last commit before the ordering fixes of issue 22 (plan-time reads with no `depends_on`,
# Workload Identity members racing the cluster).
BEFORE = "5728d82"
STACKS = ("dev", "dev-b", "saxml-v5e", "jetstream-v5e")


def _tree(revision: str, dest: Path) -> Path:
    """The repository at `revision`, unpacked (no checkout of this one is touched)."""
    archive = subprocess.run(["git", "archive", revision], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


@pytest.fixture(scope="module")
def before(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tree(BEFORE, tmp_path_factory.mktemp("before") / "tree")


def _plan(tree: Path, stack: str, out: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "plan", "--stack", stack, "--json", str(out), "--out", str(out.parent / "shown")],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(out.read_text())["resources"])


def worst_order(resources: dict[str, dict[str, Any]]) -> Iterator[str]:
    """A dependency order the engine may run, holding the cluster back while anything else can go.

    What is not a Google resource (Kubernetes objects, the Command provider's) reaches the cluster
    through its provider's kubeconfig, so it counts as depending on the cluster."""
    clusters = {key for key, r in resources.items() if r["type"] == gcp_project.CLUSTER}
    deps = {
        key: {d for d in r.get("dependsOn") or [] if d in resources}
        | (clusters if not r["type"].startswith("gcp:") else set())
        for key, r in resources.items()
    }
    done: set[str] = set()
    while len(done) < len(resources):
        ready = sorted(k for k in resources if k not in done and deps[k] <= done)
        assert ready, "a dependency cycle"
        chosen = [k for k in ready if k not in clusters] or ready[:1]
        for key in chosen:
            done.add(key)
            yield key


def first_up(resources: dict[str, dict[str, Any]], project: Project) -> list[dict[str, Any]]:
    """Every Google create of the plan on `project`, in the worst order; the refusals."""
    for key in worst_order(resources):
        resource = resources[key]
        if not resource["type"].startswith("gcp:"):
            continue
        resource_id, state = cloud_state(resource["type"], resource["name"], resource["inputs"])
        project.try_create(resource["type"], resource["inputs"], state, resource_id)
    return project.refusals


@pytest.mark.parametrize("stack", STACKS)
def test_the_first_up_creates_every_google_resource_in_any_dependency_order(stack: str, tmp_path: Path) -> None:
    project = gcp_provider.prepare(tmp_path / "project.json", load_stack(stack))
    refusals = first_up(_plan(ROOT, stack, tmp_path / "plan.json"), project)
    assert refusals == []
    assert gcp_project.CONTAINER in project.enabled_order


@pytest.mark.parametrize("stack", ["dev", "saxml-v5e"])
def test_before_the_fix_workload_identity_members_raced_the_cluster(stack: str, before: Path, tmp_path: Path) -> None:
    project = gcp_provider.prepare(tmp_path / "project.json", load_stack(stack))
    refusals = first_up(_plan(before, stack, tmp_path / "plan.json"), project)
    assert refusals, "the stand-in no longer shows the race this test was written for"
    assert {r["rule"] for r in refusals} == {"identity-pool-missing"}, refusals
    assert all("Identity Pool does not exist" in r["message"] for r in refusals)


# --- the real engine ------------------------------------------------------------------------------


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
