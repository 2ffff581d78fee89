"""Reviewable plans: documents and diffs, the dependency picture, time to serving, cross-stack checks."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from plan import document, engine, graph, stacks, timing
from plan.__main__ import main
from plan.engine import PlanResult
from settings.loader import load
from settings.model import StackConfig
from tests.conftest import config_with, dev_raw, merged

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.fixture(scope="module")
def dev_doc(dev_plan: PlanResult) -> dict[str, Any]:
    return document.document(dev_plan, config_with())


def test_document_is_stable_and_sorted(dev_doc: dict[str, Any]) -> None:
    again = document.document(engine.run_stack("dev"), config_with())
    assert document.dumps(dev_doc) == document.dumps(again)
    assert list(dev_doc["resources"]) == sorted(dev_doc["resources"])
    pool = dev_doc["resources"]["tpu-pools/gcp:container/nodePool:NodePool::cube-sub-block-0"]
    assert pool["inputs"]["nodeCount"] == 16 and isinstance(pool["inputs"]["nodeCount"], int)
    assert "cluster/gcp:container/cluster:Cluster::cluster" in pool["dependsOn"]
    assert dev_doc["capacity"]["chips"] == 128
    assert dev_doc["outputs"]["kubeconfig"] == "[secret]"


def test_diff_reports_added_removed_and_changed_fields(dev_doc: dict[str, Any]) -> None:
    raw, secrets = dev_raw()
    changed = merged(
        {
            "network": {"mtu": 1500},
            "tpu": {"cubes": 3},
            "reservation": {"subBlocks": None},
            "checks": {"subslicing": {"enabled": True}},
            "serving": {"prefill": {"replicas": 2}},
        },
        raw,
    )
    config = load(changed, stack="dev", project="example-tpu-project", secret_keys=secrets)
    new = document.document(engine.run(changed, stack="dev", secret_keys=secrets), config)
    text = document.diff_markdown(dev_doc, new, "dev")
    assert "#### Added" in text and "`+` `tpu-pools/gcp:container/nodePool:NodePool::cube-3`" in text
    assert "slicing-checks/kubernetes:jobset.x-k8s.io/v1alpha2:JobSet::subslicing-check" in text
    assert "| `inputs.mtu` | `8896` | `1500` |" in text
    # Kubernetes objects are shown as YAML diffs.
    assert "-  replicas: 4" in text and "+  replicas: 2" in text
    assert "| `chips` | `128` | `192` |" in text
    assert document.diff_markdown(dev_doc, copy.deepcopy(dev_doc), "dev").rstrip().endswith("No changes.")


def test_a_change_of_dependencies_alone_is_not_a_change_to_apply(dev_doc: dict[str, Any]) -> None:
    """The engine gives a resource whose only change is its dependencies no step: `make diff`
    counts it apart, so "to change" matches what `pulumi preview` plans (a replica change gave
    every router object one more NetworkPolicy to wait for: "18 to change" where the preview
    updated 2, tests/operations.py's recipe)."""
    new = copy.deepcopy(dev_doc)
    key = "router/kubernetes:apps/v1:Deployment::epp"
    new["resources"][key]["dependsOn"] = [*new["resources"][key]["dependsOn"], "extra/kubernetes:v1:Service::extra"]
    report = document.diff_report(dev_doc, new, "dev")
    assert report["summary"] == {"add": 0, "change": 0, "remove": 0, "rewired": 1}
    assert report["changed"] == [] and report["rewired"] == [key]
    assert "**0 to add, 0 to change, 0 to remove**" in report["markdown"]
    assert "1 more only depend on other resources now" in report["markdown"]
    assert f"| `{key}` | `extra` | - |" in report["markdown"]
    assert not report["noop"]


def test_diff_never_shows_secrets() -> None:
    raw, secrets = dev_raw()
    docs = []
    for token in ("hf_first_secret_value", "hf_second_secret_value"):
        changed = merged({"hfToken": token}, raw)
        keys = [*secrets, "tpu-slicing:hfToken"]
        config = load(changed, stack="dev", project="example-tpu-project", secret_keys=keys)
        docs.append(document.document(engine.run(changed, stack="dev", secret_keys=keys), config))
    text = document.diff_markdown(docs[0], docs[1], "dev") + document.dumps(docs[0]) + document.dumps(docs[1])
    assert "hf_first_secret_value" not in text and "hf_second_secret_value" not in text
    assert "[secret]" in document.dumps(docs[0])


def test_diff_command_between_documents(
    tmp_path: Path, dev_doc: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(document.dumps(dev_doc))
    edited = copy.deepcopy(dev_doc)
    del edited["resources"]["network/gcp:compute/firewall:Firewall::allow-internal"]
    new.write_text(json.dumps(edited))
    assert main(["diff", str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert "#### Removed" in out and "`-` `network/gcp:compute/firewall:Firewall::allow-internal`" in out


def test_diff_command_between_git_revisions(tmp_path: Path) -> None:
    """A throwaway repository at two revisions: the command plans each and diffs them."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(engine.ROOT), str(repo)], check=True)
    for pattern in ("*.py", "Pulumi.*.yaml"):  # the working tree's code and stacks, committed twice
        for path in engine.ROOT.rglob(pattern):
            rel = path.relative_to(engine.ROOT)
            if not any(part.startswith((".", "build")) for part in rel.parts):
                (repo / rel).parent.mkdir(parents=True, exist_ok=True)
                (repo / rel).write_bytes(path.read_bytes())
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "base", "--allow-empty"], cwd=repo, check=True)
    stack = repo / "Pulumi.dev.yaml"
    stack.write_text(stack.read_text().replace("    cubes: 2", "    cubes: 2\n  tpu-slicing:network:\n    mtu: 1500"))
    subprocess.run([*git, "commit", "-qam", "head"], cwd=repo, check=True)
    done = subprocess.run(
        [sys.executable, "-m", "plan", "diff", "--stack", "dev", "--base", "HEAD~1", "--head", "HEAD"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "| `inputs.mtu` | `8896` | `1500` |" in done.stdout
    assert "1 to change" in done.stdout


def test_dependency_picture_is_current() -> None:
    current = graph.mermaid(engine.run_stack("dev"))
    checked_in = (DOCS / "dev-graph.mmd").read_text()
    assert checked_in == current, "docs/dev-graph.mmd is stale: run `make docs` and commit it"


def test_mermaid_groups_components_and_draws_edges(dev_plan: PlanResult) -> None:
    text = graph.mermaid(dev_plan)
    assert text.startswith("flowchart LR")
    assert 'subgraph c_tpu_pools["TpuPools tpu-pools"]' in text
    ids = [graph._node_id(r) for r in dev_plan.resources]
    assert len(ids) == len(set(ids))
    pool = next(r for r in dev_plan.resources if r.name == "cube-sub-block-0")
    cluster = dev_plan.one("gcp:container/cluster:Cluster")
    assert f"{graph._node_id(pool)} --> {graph._node_id(cluster)}" in text
    assert text.count("-->") == len(graph.edges(dev_plan))
    # A dependency on a whole component is one edge to the component, not one per child.
    lws = dev_plan.one("kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet", "prefill-lws")
    slice_controller = dev_plan.one("tpu-slicing:k8s:SliceController")
    targets = {dependency.urn for dependent, dependency in graph.edges(dev_plan) if dependent is lws}
    assert slice_controller.urn in targets
    assert not any(
        urn.startswith(slice_controller.urn.rsplit("::", 1)[0] + "$") for urn in targets - {slice_controller.urn}
    )
    dot = graph.dot(dev_plan)
    assert dot.startswith("digraph stack {") and dot.count("->") == len(graph.edges(dev_plan))


def test_time_to_serving_overlaps_pools_and_controllers(dev_plan: PlanResult) -> None:
    t = timing.timeline(dev_plan)
    assert t.target.type == "kubernetes:batch/v1:Job"  # the smoke test: the first served request
    assert t.critical_seconds < t.sequential_seconds
    assert t.ratio > 1.3
    pools = [r for r in dev_plan.resources if r.name.startswith("cube-")]
    first_pool_done = min(t.finish[p.urn] for p in pools)
    for release in dev_plan.of_type("kubernetes:helm.sh/v3:Release"):
        assert t.start[release.urn] < first_pool_done, f"{release.name} waits for the TPU pools"
    # The slice controller follows the TPU pools on purpose, so that teardown removes it first
    # (tests/test_teardown.py); the serving workloads wait for the pools anyway.
    controller = dev_plan.one("kubernetes:apps/v1:Deployment", "controller-manager")
    assert t.start[controller.urn] >= first_pool_done
    # The critical path runs through a TPU pool: nothing else should be slower.
    assert any(r.name.startswith("cube-") for r, _, _ in t.path)


def test_time_to_serving_for_every_backend() -> None:
    for stack, target in (("saxml-v5e", "sax-publish"), ("jetstream-v5e", "serving-smoke-test")):
        t = timing.timeline(engine.run_stack(stack))
        assert t.target.inputs["metadata"]["name"] == target
        assert t.ratio > 1.2


def test_repository_stacks_do_not_conflict() -> None:
    lines, conflicts = stacks.report()
    assert conflicts == []
    assert {"dev", "dev-b", "saxml-v5e", "jetstream-v5e"} <= set(stacks.stack_files())
    assert any("4 cube(s) by dev-b (2), dev (2)" in line for line in lines)


def _configs(**overrides: dict[str, Any]) -> dict[str, StackConfig]:
    configs, problems = stacks.load_stacks()
    assert problems == []
    for stack, override in overrides.items():
        configs[stack] = config_with(override, stack=stack)
    return configs


def test_sub_block_claimed_twice_names_both_stacks() -> None:
    configs = _configs(
        **{"dev-b": {"reservation": {"subBlocks": ["sub-block-1", "sub-block-2"]}, "serving": {"backend": "none"}}}
    )
    messages = [str(c) for c in stacks.check(configs)]
    assert any("dev and dev-b" in m and "sub-block 'sub-block-1'" in m for m in messages), messages


def test_too_many_cubes_on_a_block() -> None:
    configs = _configs(
        **{"dev-b": {"reservation": {"subBlocks": None}, "tpu": {"cubes": 3}, "serving": {"backend": "none"}}}
    )
    messages = [str(c) for c in stacks.check(configs)]
    assert any("claim 5 cubes" in m and "holds 4" in m for m in messages), messages


def test_disagreeing_block_sizes() -> None:
    configs = _configs(
        **{"dev-b": {"reservation": {"subBlocks": None, "blockCubes": 8}, "serving": {"backend": "none"}}}
    )
    assert any("different blockCubes" in str(c) for c in stacks.check(configs))


def test_same_names_in_one_project_and_region() -> None:
    configs = _configs(
        **{
            "dev-b": {
                "namePrefix": "dev",
                "reservation": {"subBlocks": ["sub-block-2", "sub-block-3"]},
                "serving": {"backend": "none"},
            }
        }
    )
    messages = [str(c) for c in stacks.check(configs)]
    assert any("dev and dev-b" in m and "'dev-gke'" in m for m in messages), messages


def test_stacks_command_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stacks"]) == 0
    assert "no conflicts" in capsys.readouterr().out
