"""The phase table `make test` ends with (tools/ci/phase.sh records, tools/ci/phase_table.py prints)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PHASE = ROOT / "tools" / "ci" / "phase.sh"
TABLE = ROOT / "tools" / "ci" / "phase_table.py"


def _phase(tmp_path: Path, name: str, *command: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TPU_SLICING_PHASES": str(tmp_path / "phases.tsv")}
    return subprocess.run(["bash", str(PHASE), name, *command], env=env, capture_output=True, text=True, check=False)


def test_a_phase_keeps_its_command_status_and_output_and_is_recorded(tmp_path: Path) -> None:
    ok = _phase(tmp_path, "lint ruff", "sh", "-c", "echo fine")
    failed = _phase(tmp_path, "pytest", "sh", "-c", "echo broken >&2; exit 3")
    assert (ok.returncode, ok.stdout) == (0, "fine\n")
    assert (failed.returncode, failed.stderr) == (3, "broken\n")
    lines = [line.split("\t") for line in (tmp_path / "phases.tsv").read_text().splitlines()]
    assert [(name, status) for name, _, status, _ in lines] == [("lint ruff", "0"), ("pytest", "3")]
    assert all(float(seconds) >= 0 for _, seconds, _, _ in lines)


def test_without_the_variable_nothing_is_written(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TPU_SLICING_PHASES"}
    done = subprocess.run(["bash", str(PHASE), "x", "true"], cwd=tmp_path, env=env, check=False)
    assert done.returncode == 0 and list(tmp_path.iterdir()) == []


def test_the_table_totals_phases_and_lists_pytest_groups_apart(tmp_path: Path) -> None:
    phases = tmp_path / "phases.tsv"
    phases.write_text(
        "build engine\t600.000\t0\nlint mypy\t59.600\t0\npytest\t1200.000\t1\n"
        "pytest control-plane\t1100.000\t0\npytest (no group)\t900.000\t0\nbeside: go downloads\t120.000\t0\n"
    )
    out = subprocess.run([sys.executable, str(TABLE), str(phases)], capture_output=True, text=True, check=True).stdout
    rows = {line.split("  ")[0].strip(): line for line in out.splitlines() if line.strip()}
    assert "10 min 00 s" in rows["build engine"] and "exit 1" in rows["pytest"]
    assert "31 min 00 s" in rows["total"]  # 600 + 59.6 + 1200 s; the groups overlap and are not added
    assert "18 min 20 s" in rows["pytest control-plane"]
    assert "2 min 00 s" in rows["beside: go downloads"]  # in the background: not in the total either


def test_phases_run_side_by_side_total_the_clock_not_the_sum(tmp_path: Path) -> None:
    """`make test` runs the two Go builds beside each other and beside the virtualenvs and lint: the
    total is the first start to the last end, and each phase says when it started."""
    first = _phase(tmp_path, "build engine", "sh", "-c", "sleep 0.3")
    assert first.returncode == 0
    line = (tmp_path / "phases.tsv").read_text().split("\t")
    assert len(line) == 4 and abs(float(line[3]) - time.time()) < 60  # the start, seconds since the epoch
    phases = tmp_path / "side.tsv"
    phases.write_text(
        "build engine\t600.000\t0\t1000.000\nbuild controlplane\t500.000\t0\t1000.500\n"
        "lint mypy\t60.000\t0\t1001.000\npytest\t1200.000\t0\t1600.000\n"
        "pytest control-plane\t1100.000\t0\nbeside: go downloads\t120.000\t0\t999.000\n"
    )
    out = subprocess.run([sys.executable, str(TABLE), str(phases)], capture_output=True, text=True, check=True).stdout
    rows = {line.split("  ")[0].strip(): line for line in out.splitlines() if line.strip()}
    assert "30 min 00 s" in rows["total (clock)"]  # 1000 s to 2800 s, not 2360 s summed; the downloads are beside
    assert "+ 10 min 01 s" in rows["pytest"] and "+  0 min 02 s" in rows["lint mypy"]


def test_prefetch_downloads_for_every_wrapper_module_the_builds_use() -> None:
    """tools/ci/prefetch.sh lists each Go module folder the build scripts build from (all but
    gcpdata's, a data download of its own), so no build waits on downloads the others overlapped."""
    script = (ROOT / "tools" / "ci" / "prefetch.sh").read_text()
    listed = {
        line.strip().strip('"').split()[0]
        for line in script.split("PACKAGES=(", 1)[1].split(")", 1)[0].splitlines()
        if line.strip()
    }
    modules = {str(p.parent.relative_to(ROOT / "tools")) for p in (ROOT / "tools").rglob("go.mod")} - {"gcpdata"}
    assert listed == modules


UNIT = ROOT / "tools" / "ci" / "unit.sh"


def _unit(
    tmp_path: Path, *, build: int = 0, free: int = 0, built: int = 0, early: bool = False
) -> tuple[subprocess.CompletedProcess[str], str]:
    """tools/ci/unit.sh with a stand-in python and make that log what they were asked and at which
    nice value, and exit with the given statuses (the tests without a Go build, the build, the rest)."""
    tmp_path.mkdir(exist_ok=True)
    log = tmp_path / "calls.log"
    python = tmp_path / "python"
    python.write_text(
        "#!/bin/sh\n"
        f'echo "pytest nice=$(ps -o ni= -p $$ | tr -d " ") $*" >> {log}\n'
        f'case "$*" in *"not go_built"*) echo "free part ran"; exit {free};; esac\n'
        f"exit {built}\n"
    )
    make = tmp_path / "make"
    make.write_text(f'#!/bin/sh\necho "make nice=$(ps -o ni= -p $$ | tr -d " ") $*" >> {log}\nexit {build}\n')
    for tool in (python, make):
        tool.chmod(0o755)
    env = {**os.environ, "PY": str(python), "SUITE": "-n 2 --dist loadgroup", "MAKE": str(make)}
    env.pop("TPU_SLICING_PHASES", None)
    env.pop("TPU_SLICING_EARLY_BUILDS", None)
    if early:
        env["TPU_SLICING_EARLY_BUILDS"] = "1"
    (tmp_path / "tools" / "ci").mkdir(parents=True, exist_ok=True)
    for script in ("unit.sh", "phase.sh"):
        (tmp_path / "tools" / "ci" / script).write_text((ROOT / "tools" / "ci" / script).read_text())
    done = subprocess.run(
        ["bash", str(tmp_path / "tools/ci/unit.sh")], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    return done, log.read_text()


# The nice value this test runs at (it may itself run beside the builds, at nice 10): the script's
# parts are judged relative to it.
BASE = os.nice(0)
LOW = min(BASE + 10, 19)


def test_the_suite_runs_the_tests_without_a_go_build_beside_the_builds_at_low_priority(tmp_path: Path) -> None:
    done, calls = _unit(tmp_path)
    assert done.returncode == 0, done.stderr
    lines = calls.splitlines()
    free = next(line for line in lines if "not go_built" in line)
    assert free.startswith(f"pytest nice={LOW} -m pytest -n 2 --dist loadgroup -m not go_built"), free
    assert any(line.startswith(f"make nice={BASE} --no-print-directory engine controlplane") for line in lines), lines
    # The tests that run what the builds make come after the builds, at the normal priority.
    built = next(i for i, line in enumerate(lines) if line.startswith("make "))
    assert lines[built + 1 :] and any(
        line.startswith(f"pytest nice={BASE} -m pytest -n 2 --dist loadgroup -m go_built")
        for line in lines[built + 1 :]
    ), lines
    assert "free part ran" in done.stdout


def test_a_failed_build_stops_the_rest_and_still_reports_the_tests_without_one(tmp_path: Path) -> None:
    done, calls = _unit(tmp_path, build=2)
    assert done.returncode == 2
    assert "free part ran" in done.stdout
    assert not any("-m go_built" in line for line in calls.splitlines()), calls


def test_a_failed_test_without_a_go_build_fails_the_suite_after_the_rest_ran(tmp_path: Path) -> None:
    done, calls = _unit(tmp_path, free=1)
    assert done.returncode == 1
    assert any(
        line.startswith(f"pytest nice={BASE} -m pytest -n 2 --dist loadgroup -m go_built")
        for line in calls.splitlines()
    ), calls
    failed_later, _ = _unit(tmp_path / "later", built=5)
    assert failed_later.returncode == 5


def _builds(tmp_path: Path, make_body: str) -> dict[str, str]:
    """A copy of tools/ci/builds.sh in `tmp_path` and the environment to run it with a stand-in make."""
    (tmp_path / "tools" / "ci").mkdir(parents=True, exist_ok=True)
    script = tmp_path / "tools" / "ci" / "builds.sh"
    script.write_text((ROOT / "tools" / "ci" / "builds.sh").read_text())
    make = tmp_path / "make"
    make.write_text("#!/bin/sh\n" + make_body)
    make.chmod(0o755)
    env = {**os.environ, "MAKE": str(make)}
    env.pop("TPU_SLICING_PHASES", None)
    return env


def test_the_early_builds_are_waited_for_with_their_log_and_status(tmp_path: Path) -> None:
    """`start` returns with the lock held by the running builds, and `wait` ends only after them.
    The stand-in make blocks on a FIFO until this test writes to it, so the builds are still running
    at each check: a correct `wait` cannot end before the write; a broken one (no lock) ends at once."""
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    env = _builds(tmp_path, f'echo "built $*"; read line < {gate}; echo ended > {tmp_path}/ended; exit 3\n')
    script = str(tmp_path / "tools" / "ci" / "builds.sh")
    subprocess.run(["bash", script, "start"], env=env, capture_output=True, text=True, timeout=60, check=True)
    held = subprocess.run(["flock", "-n", str(tmp_path / "build" / "builds.lock"), "true"], check=False)
    assert held.returncode == 1, "the builds run without holding build/builds.lock"
    waiting = subprocess.Popen(["bash", script, "wait"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            waiting.wait(timeout=0.5)  # still blocked: the builds have not ended
    finally:
        with open(gate, "w") as release:  # the builds end (also when the check above failed)
            release.write("go\n")
    out, _ = waiting.communicate(timeout=60)
    assert waiting.returncode == 3
    assert "built --no-print-directory engine controlplane" in out
    assert (tmp_path / "ended").read_text() == "ended\n"


def test_waiting_for_builds_that_were_never_started_fails(tmp_path: Path) -> None:
    env = _builds(tmp_path, "exit 0\n")
    done = subprocess.run(
        ["bash", str(tmp_path / "tools/ci/builds.sh"), "wait"], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    assert "left no status" in done.stderr


def test_the_suite_waits_for_the_builds_make_test_started(tmp_path: Path) -> None:
    (tmp_path / "tools" / "ci").mkdir(parents=True)
    builds = tmp_path / "tools" / "ci" / "builds.sh"
    log = tmp_path / "calls.log"
    builds.write_text(f'#!/bin/sh\necho "builds.sh $*" >> {log}\nexit 4\n')
    done, calls = _unit(tmp_path, early=True)
    assert done.returncode == 4
    assert "builds.sh wait" in calls and not any(line.startswith("make ") for line in calls.splitlines()), calls
