"""The suite's order under the Makefile's own pytest options (tests/suite_order.py): the first
plane's group first, the tests without a plane next, the late plane's group last, each group on
one worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests import suite_order
from tests.test_docs import ROOT, suite_options

MODULES = {
    # Collected in this order by name; the plugin is to move the late group to the end and the
    # first group to the front, whatever their names.
    "test_a_late.py": suite_order.LATE_PLANE_GROUP,
    "test_b_free.py": None,
    "test_c_plane.py": suite_order.PLANE_GROUP,
}


def _suite(tmp_path: Path, log: Path) -> None:
    for module, group in MODULES.items():
        mark = f"pytestmark = pytest.mark.xdist_group({group!r})\n" if group else ""
        tests = "".join(
            f"def test_{i}():\n"
            f"    with open({str(log)!r}, 'a') as f:\n"
            f'        f.write(f\'{module} {{os.environ.get("PYTEST_XDIST_WORKER", "-")}}\\n\')\n'
            for i in range(4)
        )
        (tmp_path / module).write_text(f"import os, pytest\n{mark}{tests}")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.suite_order"]\n')


def _pytest(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", *options, "-p", "no:cacheprovider", "-c", "pytest.ini", "."],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_first_plane_comes_first_and_the_late_plane_last(tmp_path: Path) -> None:
    log = tmp_path / "ran.log"
    _suite(tmp_path, log)
    done = _pytest(tmp_path, "-p", "no:xdist")
    assert done.returncode == 0, done.stdout[-2000:]
    modules = [line.split()[0] for line in log.read_text().splitlines()]
    assert modules == ["test_c_plane.py"] * 4 + ["test_b_free.py"] * 4 + ["test_a_late.py"] * 4


def test_the_test_command_queues_in_that_order_and_keeps_each_group_on_one_worker(tmp_path: Path) -> None:
    """Without `--no-loadscope-reorder` xdist would sort the units by test count (pytest-xdist
    3.8.0) and start both planes at once; the test command keeps the collection order."""
    options = suite_options()
    assert "--no-loadscope-reorder" in options and "loadgroup" in options, options
    log = tmp_path / "ran.log"
    _suite(tmp_path, log)
    done = _pytest(tmp_path, *options)
    assert done.returncode == 0, done.stdout[-2000:]
    workers: dict[str, set[str]] = {}
    for line in log.read_text().splitlines():
        module, worker = line.split()
        workers.setdefault(module, set()).add(worker)
    assert len(workers["test_c_plane.py"]) == 1 and len(workers["test_a_late.py"]) == 1, workers
