"""The README's commands run, through the Makefile recipes they name, so the docs cannot rot."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
# Offline commands a reader is told to run; `make test` is what this suite is part of.
RUNNABLE = ("make plan", "make preview", "make graph", "make stacks", "make diff", "python -m plan")
PULUMI_SUBCOMMANDS = {"login", "stack", "config", "preview", "up", "destroy", "refresh", "cancel"}


def bash_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def recipe(target: str) -> list[str]:
    """The shell lines of a Makefile target, with make's own variables left for substitution."""
    makefile = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(makefile) if re.match(rf"^{re.escape(target)}:", line))
    lines = []
    for line in makefile[start + 1 :]:
        if not line.startswith("\t"):
            break
        lines.append(line.strip().lstrip("-"))
    return lines


def expand(line: str, variables: dict[str, str]) -> list[str]:
    for name, value in variables.items():
        # STACK and BASE reach the recipes as environment variables (the Makefile's `export`).
        line = line.replace(f"$({name})", value).replace(f"$$TPU_SLICING_{name}", shlex.quote(value))
    assert "$(" not in line and "$$" not in line, f"unknown make variable in {line!r}"
    return shlex.split(line)


def offline_commands() -> list[str]:
    return [c for c in bash_commands() if c.startswith(RUNNABLE)]


def test_readme_lists_the_two_commands_first() -> None:
    commands = bash_commands()
    assert commands[:2] == ["make plan STACK=dev", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("command", offline_commands())
def test_readme_command_runs(command: str, tmp_path: Path) -> None:
    words = shlex.split(command)
    if words[0] == "make":
        target = words[1]
        variables = {"PY": sys.executable, "STACK": "dev", "BASE": "HEAD"}
        variables |= dict(w.split("=", 1) for w in words[2:])
        invocations = [expand(line, variables) for line in recipe(target)]
    else:
        invocations = [[sys.executable, *words[1:]]]
    for invocation in invocations:
        argv = [a.replace("build/", f"{tmp_path}/") for a in invocation]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, f"{command}: {' '.join(argv)}\n{done.stderr[-2000:]}"
        assert done.stdout or argv[-1].endswith((".json", ".mmd", ".svg")), command


def test_real_cloud_commands_use_real_pulumi_subcommands() -> None:
    pulumi = [shlex.split(c) for c in bash_commands() if c.startswith("pulumi ")]
    assert pulumi, "the README shows the real-cloud path"
    assert {words[1] for words in pulumi} <= PULUMI_SUBCOMMANDS
    assert any(words[1:3] == ["config", "set"] and "--secret" in words for words in pulumi)


def test_docs_reference_existing_files() -> None:
    for document in ("README.md", "docs/architecture.md", "CONTRIBUTING.md"):
        text = (ROOT / document).read_text()
        for link in re.findall(r"\]\(([^)#:]+)\)", text):
            target = (ROOT / document).parent / link
            assert target.exists(), f"{document} links to missing {link}"


def test_the_test_command_runs_a_control_plane_group_on_one_worker(tmp_path: Path) -> None:
    """`make unit`'s pytest options keep every `xdist_group` on one worker (tests/control_plane.py
    XDIST_GROUP: one plane at a time). pytest 9.2 with pytest-xdist 3.8.0 silently spread them."""
    command = next(line for line in recipe("unit") if "pytest" in line)
    words = expand(command, {"PY": sys.executable, "PHASE": "bash tools/ci/phase.sh"})
    options = words[words.index("-m") + 2 :]  # after `python -m pytest`
    options = ["2" if word == "auto" else word for word in options]  # two workers on any machine
    log = tmp_path / "workers.log"
    for module in ("a", "b"):
        (tmp_path / f"test_{module}.py").write_text(
            "import os, pytest\n"
            "pytestmark = pytest.mark.xdist_group('plane')\n"
            "@pytest.fixture(scope='module', params=['x', 'y'])\n"
            "def plane(request):\n"
            f"    with open({str(log)!r}, 'a') as f:\n"
            "        f.write(os.environ['PYTEST_XDIST_WORKER'] + '\\n')\n"
            "def test_one(plane): pass\n"
            "def test_two(plane): pass\n"
        )
    (tmp_path / "test_free.py").write_text("".join(f"def test_{i}(): pass\n" for i in range(20)))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *options, "-p", "no:cacheprovider", "-c", "pytest.ini", "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    workers = log.read_text().split()
    assert len(workers) == 4 and len(set(workers)) == 1, workers
