"""The programs the tests build are the releases a user's `pulumi up` runs, or docs/testing.md says how not.

A user's engine downloads the Kubernetes provider at the version the Python SDK is (requirements.txt),
so that pin must be the release whose commit `make engine` builds (tools/engine/kubernetes/RELEASE
records the tag of the one commit the Go module proxy serves). The controllers the tests run are
built from the modules at the tags the program's charts install; the CLI is the one the workflows
install. The table "What the tests run, and what `pulumi up` runs" of docs/testing.md lists each program
with both versions, and is checked here against the pins, so a bump that leaves it stale fails.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import yaml

from settings.model import Versions

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tools"


def _requirement(name: str) -> str:
    found = re.search(rf"^{re.escape(name)}==(\S+)$", (ROOT / "requirements.txt").read_text(), flags=re.M)
    assert found, name
    return found.group(1)


def _module_version(gomod: Path, module: str) -> str:
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(module)} (\S+)", gomod.read_text(), flags=re.M)
    assert found, f"{module} in {gomod}"
    return found.group(1)


def _release() -> tuple[str, str]:
    tag, commit = (TOOLS / "engine" / "kubernetes" / "RELEASE").read_text().split()
    return tag, commit


def _table() -> dict[str, list[str]]:
    page = (ROOT / "docs" / "testing.md").read_text()
    section = page.split("### What the tests run, and what `pulumi up` runs\n", 1)[1].strip("\n").split("\n\n", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| program")]
    return {cells[0]: cells[1:] for cells in ([c.strip() for c in row.strip("|").split("|")] for row in rows)}


def test_the_sdk_pin_is_the_release_of_the_provider_commit_the_tests_build() -> None:
    tag, commit = _release()
    pseudo = _module_version(
        TOOLS / "engine" / "kubernetes" / "go.mod", "github.com/pulumi/pulumi-kubernetes/provider/v4"
    )
    assert pseudo.rsplit("-", 1)[1] == commit[:12], (pseudo, commit)
    assert f"v{_requirement('pulumi-kubernetes')}" == tag
    assert f"pulumi_kubernetes=={tag[1:]}" in (ROOT / "constraints.txt").read_text().splitlines()


def test_the_installed_sdk_is_the_pinned_one() -> None:
    # The plugin version the engine asks for comes from the installed SDK (its pulumi-plugin.json).
    assert metadata.version("pulumi-kubernetes") == _requirement("pulumi-kubernetes")


def test_the_controllers_the_tests_build_are_the_chart_versions_the_program_installs() -> None:
    pins = Versions()
    crd_versions: dict[str, set[str]] = {}
    for line in (TOOLS / "crds" / "pins.tsv").read_text().splitlines():
        if line and not line.startswith("#"):
            component, version = line.split("\t")[:2]
            crd_versions.setdefault(component, set()).add(version)
    for name, module in {
        "kueue": "sigs.k8s.io/kueue",
        "jobset": "sigs.k8s.io/jobset",
        "lws": "sigs.k8s.io/lws",
    }.items():
        chart = "v" + str(getattr(pins, name)).removeprefix("v")
        assert _module_version(TOOLS / "controlplane" / name / "go.mod", module) == chart, name
        # pins.tsv also holds a neighbour release of some, so the CRD validator is not tuned to one.
        assert chart in crd_versions.get(name, {chart}), name


def test_the_cli_the_tests_build_is_the_one_the_workflows_install() -> None:
    built = _module_version(TOOLS / "engine" / "pulumi" / "go.mod", "github.com/pulumi/pulumi/pkg/v3").removeprefix("v")
    installed = set()
    for workflow in (ROOT / ".github" / "workflows").glob("*.yml"):
        for job in (yaml.safe_load(workflow.read_text()).get("jobs") or {}).values():
            for step in job.get("steps") or []:
                if "pulumi-version" in (step.get("with") or {}):
                    installed.add(str(step["with"]["pulumi-version"]))
    assert installed == {built}


def test_the_docs_table_names_the_pinned_versions_and_every_difference() -> None:
    table = _table()
    tag, commit = _release()
    cli = _module_version(TOOLS / "engine" / "pulumi" / "go.mod", "github.com/pulumi/pulumi/pkg/v3")
    helm = _module_version(TOOLS / "engine" / "kubernetes" / "go.mod", "helm.sh/helm/v3")
    kubernetes = _module_version(TOOLS / "controlplane" / "kubernetes" / "go.mod", "k8s.io/kubernetes")
    pins = Versions()
    expected = {
        "`pulumi` CLI and engine": (cli, cli),
        "`pulumi-resource-kubernetes`": (f"{tag} (`{commit[:12]}`)", tag),
        "Helm, inside that provider": (helm, helm),
        "Kueue, JobSet, LeaderWorkerSet": (
            f"v{pins.kueue}, v{pins.jobset}, {pins.lws}",
            f"v{pins.kueue}, v{pins.jobset}, {pins.lws}",
        ),
        "Kubernetes control plane": (kubernetes, kubernetes.rsplit(".", 1)[0]),
    }
    for program, (tested, shipped) in expected.items():
        assert program in table, f"docs/testing.md table has no row for {program}"
        row = table[program]
        assert tested in row[0] and shipped in row[1], (program, row)
    for program, (tested_cell, _, difference) in table.items():
        same = program in expected and expected[program][0].split(" ")[0] == expected[program][1]
        # A stand-in, or another version than users get, is a difference and must be named.
        if not same or "stand-in" in tested_cell:
            assert difference and not difference.startswith("none"), f"{program}: no difference named"
