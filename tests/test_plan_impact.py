"""Pull-request diffs that say what a change costs (`python -m plan diff`, plan/impact.py).

The git tests make real commits in a throwaway clone of this repository and diff two of them,
as the pull-request workflow does: the base commit holds the working tree's plan code (so the
code under test plans both sides), each change is one more commit on top of it.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from plan import document, engine
from plan.__main__ import PENDING_HIGH_PRIORITY_EXIT, main
from settings.loader import load
from tests.conftest import dev_raw, merged

# The files of the diff feature (with the admission model its impact section is written from):
# copied from the working tree into the clone's base commit.
PLAN_CODE = (
    "plan/__main__.py",
    "plan/changes.py",
    "plan/document.py",
    "plan/graph.py",
    "plan/impact.py",
    "plan/manifests.py",
    "plan/outputs.py",
    "plan/policies.py",
    "plan/render.py",
    "plan/stacks.py",
    "domain/admission.py",
    "domain/admission_cubes.py",
    "domain/admission_preemption.py",
    "domain/admission_render.py",
    "domain/admission_replay.py",
    "domain/admission_requests.py",
    "settings/loader.py",
    "settings/stack_file.py",
)
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"]
JOBSET = "slicing-checks/kubernetes:jobset.x-k8s.io/v1alpha2:JobSet::subslicing-check"
CUBE_3 = "tpu-pools/gcp:container/nodePool:NodePool::cube-sub-block-2"


class Clone:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.stack = path / "Pulumi.dev.yaml"

    def git(self, *args: str) -> str:
        done = subprocess.run([*GIT, *args], cwd=self.path, capture_output=True, text=True, check=True)
        return done.stdout.strip()

    def commit(self, message: str, edit: Callable[[str], str]) -> str:
        """A commit on top of the base that edits Pulumi.dev.yaml; returns its hash."""
        self.git("checkout", "-q", "--detach", "base")
        text = self.stack.read_text()
        edited = edit(text)
        assert edited != text, f"{message}: the edit changed nothing"
        self.stack.write_text(edited)
        self.git("commit", "-qam", message)
        return self.git("rev-parse", "HEAD")

    def diff(self, head: str, tmp: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
        out = tmp / f"{head[:8]}.json"
        command = [sys.executable, "-m", "plan", "diff", "--stack", "dev", "--base", "base", "--head", head]
        done = subprocess.run(
            [*command, "--json", str(out), *extra],
            cwd=self.path,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        report = json.loads(out.read_text()) if out.exists() else {}
        return done, report


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clone]:
    path = tmp_path_factory.mktemp("impact") / "repo"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(engine.ROOT), str(path)], check=True)
    repo = Clone(path)
    for rel in PLAN_CODE:
        (path / rel).write_bytes((engine.ROOT / rel).read_bytes())
    repo.git("add", *PLAN_CODE)
    repo.git("commit", "-qm", "base: the plan code under test", "--allow-empty")
    repo.git("tag", "base")
    yield repo


def _replace(old: str, new: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        assert old in text, old
        return text.replace(old, new)

    return edit


SUBSLICING_OFF = "    subslicing:\n      enabled: false\n      topology: 2x2x2\n      replicas: 6\n"
SUBSLICING_ON = "    subslicing:\n      enabled: true\n      topology: 2x2x2\n      replicas: 4\n"


def test_subslicing_check_moves_the_decode_group(clone: Clone, tmp_path: Path) -> None:
    """The issue's example: 4 x 2x2x2 low-priority check slices push vllm-decode to cube 1."""
    head = clone.commit("enable the sub-slicing check", _replace(SUBSLICING_OFF, SUBSLICING_ON))
    done, report = clone.diff(head, tmp_path)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text == report["markdown"]
    lines = text.splitlines()
    assert lines[2].startswith("**TPU cost: touched**") and "`subslicing-check` added (4 x 2x2x2" in lines[2]
    assert "**Warning" not in text
    # The check's component, program and JobSet (and whatever else a check brings: no exact count).
    assert {JOBSET, "slicing-checks/kubernetes:core/v1:ConfigMap::program"} <= set(report["added"])
    assert "tpu-slicing:k8s:SlicingChecks::slicing-checks" in report["added"] and report["removed"] == []
    assert f"**{len(report['added'])} to add, " in text
    # The JobSet with its shape, replicas and priority, and its YAML folded.
    (jobset,) = [line for line in lines if line.startswith(f"- `+` `{JOBSET}`")]
    assert "shape=2x2x2" in jobset and "replicas=4" in jobset and "priority=dev-low" in jobset
    assert "<details><summary>YAML of <code>subslicing-check</code>" in text
    # Impact: chips 64 -> 96 of 128; the decode group moves from cube 0 to cube 1.
    assert "| TPU chips in use | 64 of 128 | 96 of 128 |" in text
    assert "| TPU VMs in use | 16 of 32 | 24 of 32 |" in text
    assert "| `vllm-decode` | high | 4 x 2x2x2 | admitted, cube 0 | admitted, cube 1 | **moved** |" in text
    assert "| `subslicing-check` | low | 4 x 2x2x2 | - | admitted, cube 0 | **added** |" in text
    assert report["usage"]["chips"] == {"before": 64, "after": 96, "totalBefore": 128, "totalAfter": 128}
    changes = {w["name"]: w["change"] for w in report["workloads"]}
    assert changes == {"subslicing-check": "added", "vllm-prefill": "unchanged", "vllm-decode": "moved"}
    decode = next(w for w in report["workloads"] if w["name"] == "vllm-decode")
    assert (decode["before"]["cubes"], decode["after"]["cubes"]) == ([0], [1])
    assert report["tpuCost"]["touched"] is True
    assert report["highPriorityPending"] == [] and report["noop"] is False
    assert report["policy"]["ran"] is True and report["policy"]["appeared"] == []
    assert report["timeToServing"]["beforeSeconds"] == report["timeToServing"]["afterSeconds"]


def test_a_third_cube_adds_a_pool_on_its_own_sub_block(clone: Clone, tmp_path: Path) -> None:
    edit = _replace("      - sub-block-1\n", "      - sub-block-1\n      - sub-block-2\n")
    head = clone.commit("a third cube", lambda text: edit(text).replace("    cubes: 2\n", "    cubes: 3\n"))
    done, report = clone.diff(head, tmp_path)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert f"`+` `{CUBE_3}`" in text
    (pool,) = [line for line in text.splitlines() if line.startswith(f"- `+` `{CUBE_3}`")]
    assert "nodeCount=16" in pool and "reservationSubBlocks/sub-block-2" in pool
    reasons = report["tpuCost"]["reasons"]
    assert "TPU pool `cube-sub-block-2` added" in reasons
    path = "projects/example-tpu-project/reservations/example-tpu7x-reservation/reservationBlocks/block-0"
    assert f"reservation paths change (pool 3: (no pool) → `{path}/reservationSubBlocks/sub-block-2`)" in reasons
    assert text.splitlines()[2].startswith("**TPU cost: touched**: TPU pool `cube-sub-block-2` added")
    # More capacity, the same use: the servers stay where they were.
    assert report["usage"]["chips"] == {"before": 64, "after": 64, "totalBefore": 128, "totalAfter": 192}
    assert "| TPU chips in use | 64 of 128 | 64 of 192 |" in text
    assert {w["change"] for w in report["workloads"]} == {"unchanged"}
    assert report["outputs"]["added"] == [] and "nodePools" in report["outputs"]["changed"]


def test_an_image_tag_costs_no_tpu_but_restarts_the_servers(clone: Clone, tmp_path: Path) -> None:
    image = "  tpu-slicing:versions:\n    vllmImage: docker.io/vllm/vllm-tpu:v0.26.1\n"
    head = clone.commit("a newer vLLM image", _replace("  tpu-slicing:checks:\n", image + "  tpu-slicing:checks:\n"))
    done, report = clone.diff(head, tmp_path)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    first = text.splitlines()[2]
    assert first.startswith("**TPU cost: not touched**"), first
    assert "`vllm-prefill`" in first and "`vllm-decode`" in first
    assert report["tpuCost"] == {"touched": False, "reasons": [], "restarts": ["vllm-decode", "vllm-prefill"]}
    assert report["summary"]["add"] == 0 and report["summary"]["remove"] == 0 and report["summary"]["change"] >= 2
    assert "+        image: docker.io/vllm/vllm-tpu:v0.26.1" in text or "vllm-tpu:v0.26.1" in text
    assert "| TPU chips in use | 64 of 128 | 64 of 128 |" in text
    assert {w["change"] for w in report["workloads"]} == {"unchanged"}


def test_a_change_that_changes_nothing_says_so(clone: Clone, tmp_path: Path) -> None:
    head = clone.commit("a comment", lambda text: text + "# reviewed\n")
    done, report = clone.diff(head, tmp_path, "--fail-on-pending-high-priority")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1:] == ["", "No changes."]
    assert report["noop"] is True and report["tpuCost"]["touched"] is False
    assert report["summary"] == {"add": 0, "change": 0, "remove": 0, "rewired": 0}
    # The base's tree was planned once for all these tests: its document is cached by tree hash.
    assert list((clone.path / "build" / "plan-cache").glob("*.json"))
    again, same = clone.diff("base", tmp_path)  # the same tree on both sides: planned once, from the cache
    assert again.returncode == 0, again.stderr
    assert same["noop"] is True


# ---------------------------------------------------------------- in-process documents


@pytest.fixture(scope="module")
def dev_doc(dev_plan: engine.PlanResult) -> dict[str, Any]:
    raw, secrets = dev_raw()
    return document.document(dev_plan, load(raw, stack="dev", project=raw["gcp:project"], secret_keys=secrets))


def _doc(overrides: dict[str, Any]) -> dict[str, Any]:
    raw, secrets = dev_raw()
    changed = merged(overrides, raw)
    config = load(changed, stack="dev", project=changed["gcp:project"], secret_keys=secrets)
    return document.document(engine.run(changed, stack="dev", secret_keys=secrets), config)


def test_document_carries_the_impact_facts(dev_doc: dict[str, Any]) -> None:
    facts = dev_doc["impact"]
    assert facts["usage"]["chips"] == {"inUse": 64, "total": 128}
    assert [(w["name"], w["verdict"], w["cubes"]) for w in facts["workloads"]] == [
        ("vllm-prefill", "admitted", [0]),
        ("vllm-decode", "admitted", [0]),
    ]
    assert facts["timeToServing"]["target"] == "smoke-test/kubernetes:batch/v1:Job::job"
    assert facts["policy"] == {"ran": True, "pack": "tpu-slicing-guardrails", "violations": []}
    json.dumps(dev_doc)  # JSON-safe


def test_superslicing_check_is_preempted_and_a_policy_verdict_appears(dev_doc: dict[str, Any]) -> None:
    new = _doc({"checks": {"superslicing": {"enabled": True}}, "network": {"mtu": 1500}})
    report = document.diff_report(dev_doc, new, "dev")
    check = next(w for w in report["workloads"] if w["name"] == "superslicing-check")
    assert check["change"] == "added, pending" and check["after"]["preemptedBy"] == ["vllm-prefill"]
    assert "pending (preempted by vllm-prefill)" in report["markdown"]
    assert report["highPriorityPending"] == []  # a medium-priority check: no warning
    (appeared,) = report["policy"]["appeared"]
    assert appeared["policy"] == "tpu-network-jumbo-mtu"
    assert "- + new: `tpu-network-jumbo-mtu` (mandatory)" in report["markdown"]
    back = document.diff_report(new, dev_doc, "dev")
    assert [v["policy"] for v in back["policy"]["disappeared"]] == ["tpu-network-jumbo-mtu"]
    assert next(w for w in back["workloads"] if w["name"] == "superslicing-check")["change"] == "removed"


def _pending(doc: dict[str, Any], name: str) -> dict[str, Any]:
    """`doc` as if the admission model had left `name` pending (no valid dev config does)."""
    doc = copy.deepcopy(doc)
    for w in doc["impact"]["workloads"]:
        if w["name"] == name:
            w.update(verdict="pending", cubes=[], reason="needs 32 chips in whole 2x2x2 partitions")
    return doc


def test_high_priority_workload_becoming_pending_is_flagged(
    dev_doc: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    new = _pending(dev_doc, "vllm-decode")
    report = document.diff_report(dev_doc, new, "dev")
    assert report["highPriorityPending"] == ["vllm-decode"]
    assert report["markdown"].splitlines()[3].startswith("> **Warning:** high-priority workload `vllm-decode`")
    old_path, new_path, out = tmp_path / "old.json", tmp_path / "new.json", tmp_path / "diff.json"
    old_path.write_text(document.dumps(dev_doc))
    new_path.write_text(document.dumps(new))
    args = ["diff", str(old_path), str(new_path), "--json", str(out)]
    assert main(args) == 0
    assert main([*args, "--fail-on-pending-high-priority"]) == PENDING_HIGH_PRIORITY_EXIT
    assert "vllm-decode" in capsys.readouterr().err
    assert json.loads(out.read_text())["highPriorityPending"] == ["vllm-decode"]
    # Already pending before: not a change this diff makes.
    assert document.diff_report(new, new, "dev")["highPriorityPending"] == []


def test_a_base_without_impact_facts_says_what_it_cannot_compare(dev_doc: dict[str, Any]) -> None:
    old = copy.deepcopy(dev_doc)
    del old["impact"]
    report = document.diff_report(old, _doc({"tpu": {"cubes": 3}, "reservation": {"subBlocks": None}}), "dev")
    assert report["missing"] == ["base"] and report["complete"] is False
    assert "the base plan carries no impact data" in report["markdown"].splitlines()[2]
    assert "| TPU chips in use | n/a | 64 of 192 |" in report["markdown"]
    assert "TPU pool `cube-3` added" in report["tpuCost"]["reasons"]
