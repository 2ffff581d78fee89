"""A first `pulumi up` on a bare Google Cloud project, judged without the engine.

Every Google resource of a stack's plan is created on the bare-project stand-in
(tests/standins/gcp_project.py) in the worst order the engine may choose: whatever does not
depend on the cluster goes first (a real cluster takes about ten minutes, so everything else that
can start does), and, once per API Service and the AI-zone preview feature, whatever does not
depend on that switch goes before it; a component's `dependsOn` holds back its children. The
engine promises dependency order and nothing more, so a create that needs the cluster or an API
must depend on it. `mutated` makes a copy of this checkout with one line of the program changed,
so a test can show a rule refusing the mistake it was written for.

Used by tests/test_bare_project.py (ordering and the rules) and tests/test_gcp_access.py (the
Saxml cell's Cloud Storage access); the real engine's preview on a bare project is
tests/test_bare_project_engine.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

from plan.engine import ROOT, cloud_state
from settings.model import StackConfig
from tests.standins import gcp_project, gcp_provider
from tests.standins.gcp_project import Project

# The last commit before the ordering fixes of issue 22 (plan-time reads with no `depends_on`,
# Workload Identity members racing the cluster).
BEFORE = "5728d82"
STACKS = ("dev", "dev-b", "saxml-v5e", "jetstream-v5e")


def tree_at(revision: str, dest: Path) -> Path:
    """The repository at `revision`, unpacked (no checkout of this one is touched)."""
    archive = subprocess.run(["git", "archive", revision], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def plan_resources(tree: Path, stack: str, out: Path) -> dict[str, Any]:
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


def _is_component(type_: str) -> bool:
    return type_.startswith("tpu-slicing:")


def _address(key: str) -> tuple[tuple[str, ...], str]:
    """(the parents' names, the name) of a plan key, `parent/.../type::name` (plan/document.py
    `address`); a type token holds a colon, a name given to a parent here does not."""
    head, name = key.rsplit("::", 1)
    segments = head.split("/")
    first_type = next(i for i, segment in enumerate(segments) if ":" in segment)
    return tuple(segments[:first_type]), name


def _parent_of(
    key: str, resources: dict[str, dict[str, Any]], by_address: dict[tuple[str, ...], list[str]]
) -> str | None:
    parents, _ = _address(key)
    if not parents:
        return None
    candidates = by_address.get(parents, [])
    components = [c for c in candidates if _is_component(resources[c]["type"])]
    found = components or candidates
    assert len(found) == 1, f"{key}: its parent is ambiguous or missing: {found}"
    return found[0]


def dependencies(resources: dict[str, dict[str, Any]]) -> dict[str, set[str]]:
    """What each resource waits for, as the engine orders them.

    Its own `dependsOn` (the SDK already expands a component there into its children), its parent:
    a child registers after its parent, and a component registers after its own `dependsOn`, so a
    component's `dependsOn` holds back every child (pulumi/pulumi#2299: a resource always depends on
    its parent). What is neither a Google resource nor a component (Kubernetes
    objects, providers, the Command provider's) reaches the cluster through its provider's
    kubeconfig, so it counts as depending on the cluster."""
    clusters = {key for key, r in resources.items() if r["type"] == gcp_project.CLUSTER}
    by_address: dict[tuple[str, ...], list[str]] = {}
    for key in resources:
        parents, name = _address(key)
        by_address.setdefault((*parents, name), []).append(key)
    deps: dict[str, set[str]] = {}
    for key, r in resources.items():
        own = {d for d in r.get("dependsOn") or [] if d in resources}
        parent = _parent_of(key, resources, by_address)
        if parent is not None:
            own.add(parent)
        if not r["type"].startswith("gcp:") and not _is_component(r["type"]):
            own |= clusters
        deps[key] = own
    return deps


def api_switches(resources: dict[str, dict[str, Any]]) -> list[str]:
    """The API Services and the AI-zone preview feature: every Google resource the program's
    ProjectApis component creates (infra/apis.py)."""
    return sorted(
        key for key, r in resources.items() if r["type"] in {gcp_project.SERVICE, gcp_project.PREVIEW_FEATURE}
    )


def worst_order(resources: dict[str, dict[str, Any]], hold: frozenset[str] = frozenset()) -> Iterator[str]:
    """A dependency order the engine may run, holding back the cluster and `hold` (an API Service or
    the preview feature) while anything else can go: whatever does not depend on them runs first."""
    deps = dependencies(resources)
    held = hold | {key for key, r in resources.items() if r["type"] == gcp_project.CLUSTER}
    done: set[str] = set()
    while len(done) < len(resources):
        ready = sorted(k for k in resources if k not in done and deps[k] <= done)
        assert ready, "a dependency cycle"
        # Stuck: the cluster goes before the held API switch, which goes last of all.
        chosen = [k for k in ready if k not in held] or [k for k in ready if k not in hold][:1] or ready[:1]
        for key in chosen:
            done.add(key)
            yield key


def first_up(
    resources: dict[str, dict[str, Any]], project: Project, hold: frozenset[str] = frozenset()
) -> list[dict[str, Any]]:
    """Every Google create of the plan on `project`, in the worst order; the refusals."""
    for key in worst_order(resources, hold):
        resource = resources[key]
        if not resource["type"].startswith("gcp:"):
            continue
        resource_id, state = cloud_state(resource["type"], resource["name"], resource["inputs"])
        project.try_create(resource["type"], resource["inputs"], state, resource_id)
    return project.refusals


def first_up_in_every_order(resources: dict[str, dict[str, Any]], config: StackConfig) -> list[dict[str, Any]]:
    """The refusals of a first `up` on a bare project, once per API switch held back to the last:
    each run enables every API but that one as early as it may; a create that needs the held API
    and does not wait for it runs before it and is refused."""
    refusals: list[dict[str, Any]] = []
    for switch in api_switches(resources):
        project = gcp_provider.prepare(None, config)
        refusals += [{**r, "held": switch} for r in first_up(resources, project, frozenset({switch}))]
    return refusals


@dataclass(frozen=True)
class Mutation:
    """A one-line mistake a first `up` on a real project would meet, and the stand-in rule that refuses it."""

    path: str  # the file
    line: str  # the line as it is
    mistake: str  # the line mistaken
    stack: str
    rule: str
    token: str  # the resource type refused


NOT_THE_PROGRAM = shutil.ignore_patterns(
    ".git", ".venv", "venv", "build", "__pycache__", ".mypy_cache", ".ruff_cache", ".hypothesis", ".pytest_cache"
)


def mutated(dest: Path, mutation: Mutation) -> Path:
    """This checkout's program with one line changed."""
    shutil.copytree(ROOT, dest, ignore=NOT_THE_PROGRAM)
    source = dest / mutation.path
    text = source.read_text()
    assert text.count(mutation.line) == 1, f"{mutation.path} no longer holds the line this mutation changes"
    source.write_text(text.replace(mutation.line, mutation.mistake))
    return dest
