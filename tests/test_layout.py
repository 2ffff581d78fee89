"""The layout's rules, read from the imports of every module (issue 16's picture of the tree)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
POD_PROGRAMS = sorted(p for p in (ROOT / "pods").glob("*.py") if p.name != "__init__.py")


def imported(path: Path) -> set[str]:
    """Top-level names of every module `path` imports (absolute imports only: none is relative)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            names.add((node.module or "").split(".")[0])
    return names


# What each program's image brings besides the standard library: the slice check runs on the
# pinned JAX TPU image (`versions.jaxTpuImage`); the others on plain python:*-slim.
IMAGE_PACKAGES = {"slice_check.py": {"jax", "numpy"}}


@pytest.mark.parametrize("program", POD_PROGRAMS, ids=lambda p: p.name)
def test_pod_programs_use_only_what_their_image_ships(program: Path) -> None:
    """Each runs alone from a ConfigMap: nothing installed for it, nothing from this project."""
    outside = imported(program) - set(sys.stdlib_module_names) - {"__future__"}
    assert outside == IMAGE_PACKAGES.get(program.name, set()), f"{program.name} imports {sorted(outside)}"


def test_the_pod_programs_are_where_their_components_ship_them_from() -> None:
    from k8s.slicing_checks import PROGRAM
    from workloads.saxml import PUBLISH_SCRIPT
    from workloads.smoke_job import SCRIPT

    assert sorted({PROGRAM, PUBLISH_SCRIPT, SCRIPT}) == POD_PROGRAMS


# The pure TPU domain: no Pulumi, and only each other (tests/test_topology.py and friends test
# them without any engine). Issue 16 moves them into a package of their own; until then they are
# named here.
DOMAIN = {
    "domain.topology",
    "domain.admission",
    "domain.metric_catalog",
    "domain.gke_versions",
    "domain.inference_releases",
}
PROJECT = {
    "domain",
    "infra",
    "k8s",
    "workloads",
    "backends",
    "settings",
    "plan",
    "policy",
    "pods",
    "tests",
    "benchmarks",
}


def project_imports(path: Path) -> set[str]:
    """Dotted project modules `path` imports ("domain.topology", "k8s", ...)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] in PROJECT}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PROJECT:
            module = node.module or ""
            # `from domain import topology` imports the module domain.topology.
            submodules = {f"{module}.{a.name}" for a in node.names if module_path(f"{module}.{a.name}").exists()}
            found |= submodules or {module}
    return found


def module_path(name: str) -> Path:
    return ROOT / (name.replace(".", "/") + ".py")


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).glob("*.py"))


@pytest.mark.parametrize("module", sorted(DOMAIN))
def test_the_domain_imports_no_pulumi_and_only_itself(module: str) -> None:
    path = module_path(module)
    assert not {n for n in imported(path) if n.startswith("pulumi")}, module
    assert project_imports(path) <= DOMAIN, module


def test_settings_depend_on_the_domain_only() -> None:
    for path in sources("settings"):
        others = {m for m in project_imports(path) if not m.startswith("settings")}
        assert others <= DOMAIN, (path.name, others - DOMAIN)
        if path.name != "loader.py":  # the one module that reads the Pulumi config
            assert not {n for n in imported(path) if n.startswith("pulumi")}, path.name


@pytest.mark.parametrize("package", ["infra", "k8s", "workloads"])
def test_components_never_reach_up_to_the_composition(package: str) -> None:
    """Dependencies run from pure to wired: components never import the backends that compose
    them, the plan that runs the program, or the tests."""
    for path in sources(package):
        upward = {m for m in project_imports(path) if m.split(".")[0] in {"backends", "plan", "tests", "policy"}}
        assert upward == set(), (path, upward)


def test_backends_are_registered_and_compose_components_only() -> None:
    from backends import REGISTRY
    from settings.model import Backend

    assert set(REGISTRY) == set(Backend)
    for path in sources("backends"):
        assert not {m for m in project_imports(path) if m.split(".")[0] in {"plan", "tests", "policy"}}, path


def test_the_entry_point_only_composes() -> None:
    """`__main__.py` loads, composes and exports: no branch per serving backend."""
    text = (ROOT / "__main__.py").read_text()
    assert "Backend." not in text
    assert len(text.splitlines()) < 260
