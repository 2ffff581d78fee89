"""The layout's rules, read from the imports of every module (issue 16's picture of the tree)."""

from __future__ import annotations

import ast
import re
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
# The benchmark's runs on the pinned inference-perf image (`versions.benchmarkImage`), which ships
# google-cloud-storage; `benchmark` is domain/benchmark.py, shipped beside it in its ConfigMap.
IMAGE_PACKAGES = {"slice_check.py": {"jax", "numpy"}, "benchmark_run.py": {"benchmark", "google"}}


@pytest.mark.parametrize("program", POD_PROGRAMS, ids=lambda p: p.name)
def test_pod_programs_use_only_what_their_image_ships(program: Path) -> None:
    """Each runs alone from a ConfigMap: nothing installed for it, nothing from this project."""
    outside = imported(program) - set(sys.stdlib_module_names) - {"__future__"}
    assert outside == IMAGE_PACKAGES.get(program.name, set()), f"{program.name} imports {sorted(outside)}"


def test_the_pod_programs_are_where_their_components_ship_them_from() -> None:
    from k8s.slicing_checks import PROGRAM
    from workloads.benchmark_job import PROGRAM as BENCHMARK_PROGRAM
    from workloads.saxml import PUBLISH_SCRIPT
    from workloads.smoke_job import SCRIPT, WATCH_SCRIPT

    assert sorted({PROGRAM, PUBLISH_SCRIPT, SCRIPT, WATCH_SCRIPT, BENCHMARK_PROGRAM}) == POD_PROGRAMS


def test_what_the_benchmark_job_ships_beside_its_program_needs_only_the_standard_library() -> None:
    from workloads.benchmark_job import RESULT_MODULE

    outside = imported(RESULT_MODULE) - set(sys.stdlib_module_names) - {"__future__"}
    assert outside == set(), f"{RESULT_MODULE.name} imports {sorted(outside)}"


# The layers, from pure to wired (docs/architecture.md draws them; CONTRIBUTING.md "Layout rules").
# A module imports its own package and the layers above it in this list, never a later one, and
# never another package of its own layer: the component packages meet only in the composition.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("domain",),  # the TPU domain: catalog, topology, admission, metric and release catalogs
    ("settings",),  # what a stack asks for, validated
    ("contracts",),  # object base, labels, ports, pod security, NetworkPolicies: what components share
    ("infra", "k8s", "workloads", "observability"),  # components: Google Cloud, cluster, serving, watching
    ("backends",),  # the composition: the platform and one module per serving backend
    ("__main__", "plan"),  # the entry point and the offline plan that runs it
    ("operate",),  # commands that act on real stacks through the engine (the fleet rollout)
)
# Beside the layers: the policy pack reads the same pins as the settings and only the plan runs it
# offline; the pod programs run alone from a ConfigMap (their own test above); tests and benchmarks
# may use anything.
BESIDE = {"policy": {"domain", "settings"}, "pods": set()}
UNCHECKED = {"tests", "benchmarks"}
EXTRA = {"plan": {"policy"}}


def allowed(package: str) -> set[str]:
    """The project packages a module of `package` may import."""
    if package in BESIDE:
        return {package, *BESIDE[package]}
    (rank,) = (i for i, layer in enumerate(LAYERS) if package in layer)
    return {package, *(p for layer in LAYERS[:rank] for p in layer), *EXTRA.get(package, set())}


PACKAGES = {p for layer in LAYERS for p in layer} | set(BESIDE)
PROJECT = PACKAGES | UNCHECKED


def project_packages(source: str, filename: str) -> dict[str, int]:
    """Top-level project packages the source imports, each with the line of its first import."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{filename}: relative import"
            names = [node.module or ""]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in PROJECT:
                found.setdefault(top, node.lineno)
    return found


def violations(package: str, source: str, filename: str) -> list[str]:
    """Imports of `source` (a module of `package`) against the direction."""
    ok = allowed(package)
    return [
        f"{filename}:{line}: {package} imports {imported}"
        for imported, line in sorted(project_packages(source, filename).items())
        if imported not in ok
    ]


def package_of(path: Path) -> str:
    relative = path.relative_to(ROOT)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def checked_modules() -> list[Path]:
    found = [ROOT / "__main__.py"]
    for package in sorted(PACKAGES - {"__main__"}):
        found += sorted(p for p in (ROOT / package).rglob("*.py") if "venv" not in p.relative_to(ROOT).parts)
    return found


def test_every_package_is_placed() -> None:
    """A new top-level package joins a layer (or the unchecked ones) before it is used."""
    on_disk = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert on_disk <= PROJECT, sorted(on_disk - PROJECT)
    assert PROJECT - {"__main__"} <= on_disk, sorted(PROJECT - {"__main__"} - on_disk)


def test_every_import_follows_the_direction() -> None:
    found = [v for path in checked_modules() for v in violations(package_of(path), path.read_text(), str(path))]
    assert found == [], "\n".join(found)


# Every kind of cross-package import the tree had before issue 16 (by the package of the module it
# was in), then one case for each remaining rule: the check must refuse each of them.
AGAINST_THE_DIRECTION = [
    ("k8s", "from workloads import jetstream"),  # k8s/pod_monitoring.py: a scrape read a workload's port
    ("k8s", "from workloads.vllm_pd import GUIDE_LABEL, ROLE_LABEL, SERVING_LABEL"),  # k8s/pod_monitoring.py
    ("k8s", "from workloads.vllm_command import POOL_PORT"),  # k8s/router.py
    ("k8s", "from infra.cluster import Cluster"),  # k8s/provider.py
    ("workloads", "from k8s.kubernetes_object import KubernetesObject"),  # every workload
    ("workloads", "from k8s.inference_gateway import http_url"),  # workloads/smoke_job.py
    ("workloads", "from infra.topology import Generation"),  # every TPU workload: the domain lived in infra/
    ("settings", "from infra import topology"),  # settings/model.py: the domain lived in infra/
    ("settings", "from k8s import inference_releases"),  # settings/model.py
    ("domain", "import settings.model"),  # the domain never reads a stack
    ("contracts", "from k8s.router import EPP_METRICS_PORT"),  # contracts are below every component
    ("observability", "from workloads import jetstream"),
    ("backends", "from plan import engine"),  # components and compositions never reach up
    ("infra", "from backends.foundation import Foundation"),
    ("plan", "import __main__"),  # siblings in the top layer
    ("policy", "from infra import cluster"),
    ("pods", "from settings import pins"),
    ("infra", "from settings.model import Backend\nfrom k8s.controllers import Controllers"),  # one bad line of two
]


@pytest.mark.parametrize(("package", "source"), AGAINST_THE_DIRECTION, ids=[s for _, s in AGAINST_THE_DIRECTION])
def test_an_import_against_the_direction_fails(package: str, source: str) -> None:
    assert violations(package, source, f"{package}/synthetic.py"), (package, source)


def test_imports_along_the_direction_pass() -> None:
    assert violations("observability", "from contracts.ports import POOL_PORT\nfrom domain import topology", "x") == []
    assert violations("backends", "from k8s.router import Router\nfrom workloads.saxml import Saxml", "x") == []
    assert violations("plan", "from policy import guardrails\nfrom backends import REGISTRY", "x") == []


def imported_pulumi(path: Path) -> set[str]:
    return {n for n in imported(path) if n.startswith("pulumi")}


@pytest.mark.parametrize("path", sorted((ROOT / "domain").glob("*.py")), ids=lambda p: p.name)
def test_the_domain_imports_no_pulumi(path: Path) -> None:
    assert not imported_pulumi(path), path.name


def test_settings_import_pulumi_only_to_read_the_config() -> None:
    for path in sorted((ROOT / "settings").glob("*.py")):
        if path.name != "loader.py":  # the one module that reads the Pulumi config
            assert not imported_pulumi(path), path.name


def test_backends_are_registered_and_only_the_registry_names_them() -> None:
    """Adding a backend is its module plus its registry entry: nothing else imports a backend."""
    from backends import REGISTRY
    from settings.model import Backend

    assert set(REGISTRY) == set(Backend)
    modules = {f"backends.{b.value.replace('-', '_')}" for b in Backend}
    assert all(module_path(m).exists() for m in modules), sorted(modules)
    for path in [ROOT / "__main__.py", *sorted(ROOT.glob("*/*.py"))]:
        if path == ROOT / "backends" / "__init__.py" or path.parent.name in UNCHECKED:
            continue
        named = {m for m in dotted_imports(path) if m in modules}
        assert named == set(), (path, named)


def dotted_imports(path: Path) -> set[str]:
    """Dotted project modules `path` imports ("backends.saxml", "k8s", ...)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            # `from backends import saxml` imports the module backends.saxml.
            found |= {f"{module}.{a.name}" for a in node.names} | {module}
    return found


def module_path(name: str) -> Path:
    return ROOT / (name.replace(".", "/") + ".py")


def test_the_entry_point_only_composes() -> None:
    """`__main__.py` loads, composes and exports: short, and no branch on the backend or platform."""
    path = ROOT / "__main__.py"
    text = path.read_text()
    assert len(text.splitlines()) <= 110
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.If | ast.IfExp | ast.Match):
            condition = ast.unparse(node.subject if isinstance(node, ast.Match) else node.test)
            assert not {"serving", "backend", "dynamic_slicing"} & set(re.findall(r"\w+", condition)), condition


def _module_name(path: Path, root: Path) -> str:
    relative = path.relative_to(root).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_graph(paths: list[Path], root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the project modules it imports, at any depth of the file (a function's import counts:
    it is a circle all the same, only hidden until the call). Imports under `if TYPE_CHECKING:` do
    not: they never run, and annotations are strings (`from __future__ import annotations`)."""
    names = {_module_name(p, root): p for p in paths}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        found: set[str] = set()
        tree = ast.parse(path.read_text(), filename=str(path))
        for guard in [n for n in ast.walk(tree) if isinstance(n, ast.If) and _type_checking(n.test)]:
            guard.body = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            found |= {t for t in targets if t in names and t != name}
        graph[name] = found
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of two or more modules (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_module_imports_itself_round_a_circle() -> None:
    """A circle (plan/document <-> plan/impact was one) means two modules are one concern split in
    two, or one holds what both need: it moves to a third (plan/changes.py)."""
    assert circles(import_graph(checked_modules())) == []


def test_the_circle_check_finds_a_hidden_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_circle_check_skips_type_checking_imports_only(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    guarded = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p import b\n"
    (tmp_path / "p" / "a.py").write_text(guarded)
    (tmp_path / "p" / "b.py").write_text("def f():\n    from p import a\n")
    files = sorted((tmp_path / "p").glob("*.py"))
    assert circles(import_graph(files, tmp_path)) == []
    (tmp_path / "p" / "a.py").write_text("from p import b\n")
    assert circles(import_graph(files, tmp_path)) == [["p.a", "p.b"]]


def test_the_repository_tracks_no_link_and_no_virtualenv() -> None:
    """A tracked symbolic link points into one machine's tree (a helper's `policy/venv` once did:
    `plan diff` then refused the revision's archive), and a virtualenv is built per checkout."""
    import subprocess

    listed = subprocess.run(
        ["git", "ls-files", "-s"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.splitlines()
    links = [line.split("\t", 1)[1] for line in listed if line.startswith("120000 ")]
    assert links == []
    assert [line for line in listed if re.search(r"(^|/)\.?venv(/|$)", line.split("\t", 1)[1])] == []
