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
