"""`make flake-check`: run the plane modules a change touches several times, one core held busy.

A plane test that can fail by timing is a defect (CONTRIBUTING.md, The flake rule). A fresh CI
machine has two cores and the suite keeps both busy (two plane groups side by side, or the Go
builds and the tests without them), so a wait that passes on an idle machine can read too early
there. This runs each selected module RUNS times in a row (default 3), each run a fresh pytest
process on one worker, while a load generator spins on one core at normal priority, and prints one
line per module: runs, failures, the slowest run, and the logs of the failed ones.

Which modules: those of the plane groups (tests/suite_order.py: their `pytestmark`, or a
test's mark, names `cp.XDIST_GROUP` or `cp.LATE_XDIST_GROUP`) that changed since BASE (default origin/main, committed,
staged, unstaged or untracked), or that import, directly or through other modules of `tests/`, a
module of `tests/` that changed (a stand-in, the plane, a story's helper). `--all` takes every
plane module; names on the command line take those.

Exit status: 0 when every run passed (or no plane module is affected), 1 when a run failed, 2 when
the modules could not be chosen (a bad BASE, an unknown module).
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The mark a plane module carries (tests/control_plane.py XDIST_GROUP, LATE_XDIST_GROUP).
PLANE_MARK = re.compile(
    r"^\s*(?:pytestmark\s*=\s*|@)pytest\.mark\.xdist_group\(\s*cp\.(?:LATE_)?XDIST_GROUP\s*\)", re.MULTILINE
)


@dataclass(frozen=True)
class Run:
    module: str
    index: int
    passed: bool
    seconds: float
    log: Path


def plane_modules(root: Path) -> list[str]:
    """Every test module of a plane group, as a path relative to `root` (tests/test_x.py)."""
    return sorted(
        str(path.relative_to(root))
        for path in (root / "tests").glob("test_*.py")
        if PLANE_MARK.search(path.read_text(encoding="utf-8"))
    )


def _test_imports(root: Path, module: str) -> set[str]:
    """The modules of `tests/` that `module` (a path relative to `root`) imports, as paths."""
    tree = ast.parse((root / module).read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    found = set()
    for name in names:
        if not name.startswith("tests."):
            continue
        path = Path(*name.split("."))
        for candidate in (path.with_suffix(".py"), path / "__init__.py"):
            if (root / candidate).is_file():
                found.add(str(candidate))
    return found


def affected(root: Path, changed: Iterable[str], modules: Sequence[str]) -> list[str]:
    """The modules among `modules` that changed, or import (transitively, within `tests/`) a
    changed module of `tests/`."""
    changed = set(changed)
    closures: dict[str, set[str]] = {}

    def closure(module: str) -> set[str]:
        if module not in closures:
            closures[module] = {module}
            for imported in _test_imports(root, module):
                closures[module] |= closure(imported)
        return closures[module]

    return [module for module in modules if closure(module) & changed]


def _git(*args: str) -> list[str]:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"flake-check: git {' '.join(args)} failed: {done.stderr.strip()}")
    return [line for line in done.stdout.splitlines() if line]


def changed_since(base: str) -> set[str]:
    """Files changed since `base`: committed after the merge base, staged, unstaged, untracked."""
    return {
        *_git("diff", "--name-only", f"{base}...HEAD"),
        *_git("diff", "--name-only", "HEAD"),
        *_git("ls-files", "--others", "--exclude-standard"),
    }


def _load() -> subprocess.Popen[bytes]:
    """One core held busy at normal priority, as the other half of a CI machine is."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def run_module(module: str, index: int, logs: Path, pytest_args: Sequence[str]) -> Run:
    log = logs / f"{Path(module).stem}.{index}.log"
    started = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", module, "-q", *pytest_args],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, check=False,
        )  # fmt: skip
    return Run(module, index, done.returncode == 0, time.monotonic() - started, log)


def table(runs: Sequence[Run]) -> str:
    """One line per module: runs, failures, the slowest run, the failed runs' logs."""
    lines = [f"{'module':<40} {'runs':>4} {'failed':>6} {'slowest':>9}  failed logs"]
    for module in dict.fromkeys(r.module for r in runs):
        own = [r for r in runs if r.module == module]
        failed = [r for r in own if not r.passed]
        slowest = max(r.seconds for r in own)
        logs = " ".join(str(r.log) for r in failed)
        lines.append(f"{module:<40} {len(own):>4} {len(failed):>6} {slowest:>7.0f} s  {logs}".rstrip())
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flake-check", description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="plane modules to run (default: those a change touches)")
    parser.add_argument("--runs", type=int, default=int(os.environ.get("RUNS", "3")), help="runs per module (3)")
    parser.add_argument("--base", default=os.environ.get("TPU_SLICING_BASE") or "origin/main")
    parser.add_argument("--all", action="store_true", help="every plane module")
    parser.add_argument("--no-load", action="store_true", help="do not hold a core busy")
    parser.add_argument("--logs", type=Path, default=ROOT / "build" / "flake-check")
    args, pytest_args = parser.parse_known_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, not {args.runs}")
    planes = plane_modules(ROOT)
    if args.modules:
        unknown = [m for m in args.modules if m not in planes]
        if unknown:
            print(f"flake-check: not a plane module: {', '.join(unknown)} (plane modules: {', '.join(planes)})")
            return 2
        chosen = list(args.modules)
    elif args.all:
        chosen = planes
    else:
        chosen = affected(ROOT, changed_since(args.base), planes)
        if not chosen:
            print(f"flake-check: no plane module changed since {args.base}, nor any module of tests/ one imports")
            return 0
    args.logs.mkdir(parents=True, exist_ok=True)
    load = None if args.no_load else _load()
    runs = []
    try:
        for module in chosen:
            for index in range(1, args.runs + 1):
                run = run_module(module, index, args.logs, pytest_args)
                runs.append(run)
                verdict = "passed" if run.passed else f"FAILED (log: {run.log})"
                print(f"flake-check: {module} run {index}/{args.runs} {verdict} in {run.seconds:.0f} s", flush=True)
    finally:
        if load is not None:
            load.kill()
            load.wait()
    print(table(runs))
    return 0 if all(r.passed for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
