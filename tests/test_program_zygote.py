"""The stand-in host's program zygote runs a script as a fresh interpreter would, only without the imports."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.standins import program_zygote

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"

# Prints what a program sees of its process, then exits with the code it is given.
SCRIPT = """
import json, os, sys
FOLDERS = set(json.loads(os.environ["FOLDERS"]))
print(json.dumps({
    "argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0], "marker": os.environ.get("MARKER"),
    "pid": os.getpid(), "pgid": os.getpgid(0), "preloaded": "pulumi_gcp.compute" in sys.modules,
    "own": sorted(m for m in sys.modules if m.split(".")[0] in FOLDERS),
}), flush=True)
if sys.argv[1] == "wait":
    sys.stdin.read()  # until the host ends
sys.exit(int(sys.argv[2]))
"""


@pytest.fixture(scope="module")
def zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not PYTHON.exists():
        pytest.skip("no .venv: run `make .venv/.dev`")
    folder = tmp_path_factory.mktemp("zygote")
    with program_zygote.running(folder / "socket", PYTHON) as path:
        yield path


def _script(folder: Path) -> Path:
    script = folder / "scripts" / "show.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(SCRIPT)
    return script


# A host: asks the zygote to run the script with its own stdio, then exits with the script's code.
HOST = """
import json, os, sys
from tests.standins import program_zygote
env = {"MARKER": "m", "FOLDERS": json.dumps(program_zygote.PROGRAM_FOLDERS)}
code = program_zygote.run(sys.argv[1], json.loads(sys.argv[2]), env)
sys.exit(99 if code is None else code)
"""


def _host(zygote: str, argv: list[str], cwd: Path, **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", HOST, zygote, json.dumps(argv)],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
        process_group=0,  # a group of its own, as the CLI starts its plugins
        **kwargs,  # type: ignore[call-overload]
    )


def test_the_program_modules_are_never_preloaded_and_the_sdk_modules_are() -> None:
    modules = program_zygote.sdk_modules()
    assert {"pulumi", "pulumi_gcp.compute", "pulumi_gcp.container", "pulumi_kubernetes.core.v1"} <= set(modules)
    assert not [m for m in modules if m.split(".")[0] in program_zygote.PROGRAM_FOLDERS], modules


def test_a_forked_run_sees_what_a_fresh_interpreter_sees(zygote: str, tmp_path: Path) -> None:
    script = _script(tmp_path)
    host = _host(zygote, [str(PYTHON), str(script), "now", "3"], tmp_path)
    out, _ = host.communicate(timeout=120)
    assert host.returncode == 3, out
    seen = json.loads(out)
    assert seen["argv"] == [str(script), "now", "3"]
    assert (seen["cwd"], seen["path0"], seen["marker"]) == (str(tmp_path), str(script.parent), "m")
    assert seen["pgid"] == host.pid  # the run is in its host's group, as a child of the host would be
    assert seen["preloaded"] and seen["own"] == [], seen


def test_a_run_of_another_interpreter_is_left_to_the_host(zygote: str, tmp_path: Path) -> None:
    base = Path(sys.base_prefix) / "bin" / "python3"  # the interpreter the virtualenv was made from
    host = _host(zygote, [str(base), str(_script(tmp_path)), "now", "0"], tmp_path)
    out, _ = host.communicate(timeout=120)
    assert (host.returncode, out) == (99, "")


def test_a_forked_run_ends_when_its_host_is_killed(zygote: str, tmp_path: Path) -> None:
    host = _host(zygote, [str(PYTHON), str(_script(tmp_path)), "wait", "0"], tmp_path, stdin=subprocess.PIPE)
    assert host.stdout is not None
    child = json.loads(host.stdout.readline())["pid"]
    os.kill(host.pid, signal.SIGKILL)
    host.wait(30)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{child}").exists() and _state(child) != "Z" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{child}").exists() or _state(child) == "Z", f"the run {child} outlived its host"


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""
