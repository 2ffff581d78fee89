"""`make flake-check` (tools/ci/flake_check.py): which plane modules a change touches, the load it
holds while they run, and the table it ends with."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("flake_check", ROOT / "tools" / "ci" / "flake_check.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["flake_check"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


fc = _load_tool()


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_the_plane_modules_are_those_of_the_two_plane_groups() -> None:
    planes = fc.plane_modules(ROOT)
    assert {"tests/test_cube_failure.py", "tests/test_admission_oracle.py", "tests/test_faults.py"} <= set(planes)
    assert "tests/test_plan.py" not in planes and "tests/test_flake_check.py" not in planes


def test_a_module_is_affected_by_its_own_change_and_by_a_helper_it_imports_through_another(tmp_path: Path) -> None:
    mark = "import pytest\npytestmark = pytest.mark.xdist_group(cp.LATE_XDIST_GROUP)\n"
    _tree(tmp_path, {
        "tests/__init__.py": "",
        "tests/standins/__init__.py": "",
        "tests/standins/host.py": "import os\n",
        "tests/story.py": "from tests.standins import host\n",
        "tests/test_a.py": mark + "from tests import story\n",
        "tests/test_b.py": mark + "from tests.test_a import x\n",
        "tests/test_c.py": mark + "import domain.topology\n",
        "tests/test_offline.py": "from tests.standins import host\n",
    })  # fmt: skip
    planes = fc.plane_modules(tmp_path)
    assert planes == ["tests/test_a.py", "tests/test_b.py", "tests/test_c.py"]
    assert fc.affected(tmp_path, {"tests/standins/host.py"}, planes) == ["tests/test_a.py", "tests/test_b.py"]
    assert fc.affected(tmp_path, {"tests/test_c.py", "README.md"}, planes) == ["tests/test_c.py"]
    assert fc.affected(tmp_path, {"domain/topology.py"}, planes) == []


def test_every_run_has_one_core_held_busy_and_a_failure_makes_the_exit_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads: list[subprocess.Popen[bytes]] = []
    real_load = fc._load

    def load() -> subprocess.Popen[bytes]:
        loads.append(real_load())
        return loads[-1]

    seen = []

    def run_module(module: str, index: int, logs: Path, pytest_args: list[str]) -> object:
        seen.append((module, index, loads[0].poll() is None))
        return fc.Run(module, index, index != 2, 10.0 * index, logs / f"{index}.log")

    monkeypatch.setattr(fc, "_load", load)
    monkeypatch.setattr(fc, "run_module", run_module)
    status = fc.main(["tests/test_cube_failure.py", "--runs", "3", "--logs", str(tmp_path)])
    assert status == 1
    assert seen == [("tests/test_cube_failure.py", i, True) for i in (1, 2, 3)]
    assert loads[0].poll() is not None  # the load ends with the runs


def test_the_table_gives_runs_failures_the_slowest_and_the_failed_logs() -> None:
    runs = [
        fc.Run("tests/test_a.py", 1, True, 40.2, Path("a.1.log")),
        fc.Run("tests/test_a.py", 2, False, 55.7, Path("a.2.log")),
        fc.Run("tests/test_b.py", 1, True, 12.0, Path("b.1.log")),
    ]
    rows = fc.table(runs).splitlines()
    assert rows[1].split() == ["tests/test_a.py", "2", "1", "56", "s", "a.2.log"]
    assert rows[2].split() == ["tests/test_b.py", "1", "0", "12", "s"]


def test_a_module_that_is_no_plane_module_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert fc.main(["tests/test_plan.py"]) == 2
    assert "not a plane module: tests/test_plan.py" in capsys.readouterr().out
