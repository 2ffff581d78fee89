"""The real Pulumi engine on this machine: a local backend, the CLI `make engine` built, and plugins.

`Engine` owns a PULUMI_HOME with the real Kubernetes provider and the stand-ins of
`tests/standins/` installed through the CLI's own `pulumi plugin install --file`; `Workspace` is
a copy of this project where stacks are created and previewed, so the committed stack files are
never touched. Nothing here talks to a network: the backend is a folder (`file://`), secrets use
a passphrase, plugin downloads are turned off.

Run a real preview of a stack by hand (docs/testing.md, "Real engine, offline"):
    make real-preview STACK=dev
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests import control_plane
from tests.standins import program_zygote

ROOT = Path(__file__).resolve().parent.parent
ENGINE_DIR = Path(os.environ.get("TPU_SLICING_ENGINE", Path.home() / ".cache" / "tpu-slicing" / "engine"))
PASSPHRASE = "tpu-slicing-test-passphrase"
# Left out of a workspace copy: caches, build output and the virtualenvs (linked instead).
SKIPPED = {
    ".git",
    ".venv",
    "venv",
    "build",
    "__pycache__",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
}
STANDINS = {
    # plugin name, version the SDK asks for, module of the stand-in
    "gcp": ("10.2.0", "tests.standins.gcp_provider"),
    "command": ("1.2.1", "tests.standins.command_provider"),
}


class EngineMissingError(RuntimeError):
    pass


_ZYGOTE = contextlib.ExitStack()
atexit.register(_ZYGOTE.close)


def _program_zygote(standin_host: bool) -> dict[str, str]:
    """The environment that points the stand-in host at this process's program zygote, started on
    first use (tests/standins/program_zygote.py): one per test process, ended when it exits."""
    python = ROOT / ".venv" / "bin" / "python"
    if not standin_host or not python.exists():
        return {}
    if not hasattr(_program_zygote, "path"):
        folder = Path(_ZYGOTE.enter_context(tempfile.TemporaryDirectory(prefix="tsz-", dir="/tmp")))
        _program_zygote.path = _ZYGOTE.enter_context(program_zygote.running(folder / "socket", python))  # type: ignore[attr-defined]
    return {program_zygote.ENV: _program_zygote.path}  # type: ignore[attr-defined]


def _pinned(requirement: str) -> str:
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if line.startswith(f"{requirement}=="):
            return line.split("==", 1)[1].strip()
    raise LookupError(requirement)


def _wrapper(path: Path, module: str) -> Path:
    """An executable that starts a stand-in with this checkout's virtualenv."""
    path.parent.mkdir(parents=True, exist_ok=True)
    python = ROOT / ".venv" / "bin" / "python"
    # -P: the engine starts plugins in the project folder, whose own copy of tests/ must not
    # shadow this checkout's stand-ins (tests/test_bare_project.py runs an older tree).
    path.write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec "{python}" -P -m {module} "$@"\n')
    path.chmod(0o755)
    return path


@dataclass
class Engine:
    base: Path
    env: dict[str, str] = field(default_factory=dict)
    standin_language_host: bool = False

    @classmethod
    def create(cls, base: Path) -> Engine:
        pulumi = ENGINE_DIR / "bin" / "pulumi"
        kubernetes = ENGINE_DIR / "bin" / "pulumi-resource-kubernetes"
        for binary in (pulumi, kubernetes):
            if not binary.exists():
                raise EngineMissingError(f"{binary} is missing: run `make engine`")
        home, bindir = base / "home", base / "bin"
        bindir.mkdir(parents=True, exist_ok=True)
        (base / "state").mkdir(exist_ok=True)
        # The real host is used when one sits beside a real CLI; otherwise the stand-in goes on PATH.
        real_host = pulumi.resolve().parent / "pulumi-language-python"
        standin_host = not real_host.exists()
        if standin_host:
            _wrapper(bindir / "pulumi-language-python", "tests.standins.language_host")
        # Only the CLI goes on PATH: providers load from the plugin cache, as on a user's machine.
        # A hard link, not a symlink: the CLI looks for its bundled language host beside the
        # resolved binary, which is where the stand-in host is.
        try:
            os.link(pulumi.resolve(), bindir / "pulumi")
        except OSError:
            shutil.copy2(pulumi.resolve(), bindir / "pulumi")
        env = {
            **_program_zygote(standin_host),
            "PATH": os.pathsep.join([str(bindir), os.environ.get("PATH", "")]),
            "HOME": os.environ.get("HOME", str(base)),
            "PULUMI_HOME": str(home),
            "PULUMI_BACKEND_URL": f"file://{base / 'state'}",
            "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            # Never download a plugin (sdk/go/common/env/env.go, DisableAutomaticPluginAcquisition).
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_DIY_BACKEND_NO_LEGACY_WARNING": "true",
            "PULUMI_SUPPRESS_COPILOT_LINK": "true",
            "NO_COLOR": "1",
            "LANG": "C.UTF-8",
            # The CLI and its Go plugins pace their garbage collection as the plane does.
            "GOGC": control_plane.go_environ()["GOGC"],
        }
        engine = cls(base=base, env=env, standin_language_host=standin_host)
        engine.install("kubernetes", _pinned("pulumi-kubernetes"), kubernetes)
        for name, (version, module) in STANDINS.items():
            engine.install(name, version, _wrapper(base / "standins" / f"pulumi-resource-{name}", module))
        return engine

    def install(self, name: str, version: str, file: Path) -> None:
        self.run(ROOT, "plugin", "install", "resource", name, version, "--file", str(file))

    def run(self, cwd: Path, *args: str, check: bool = True, extra_env: dict[str, str] | None = None) -> Any:
        done = subprocess.run(
            ["pulumi", "--non-interactive", *args],
            cwd=cwd,
            env={**self.env, **(extra_env or {})},
            capture_output=True,
            text=True,
            check=False,
            timeout=900,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"pulumi {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done

    def workspace(self, name: str) -> Workspace:
        """A copy of this project in which stacks can be created without touching the repository."""
        dest = self.base / "projects" / name
        shutil.copytree(ROOT, dest, ignore=lambda _dir, names: [n for n in names if n in SKIPPED])
        (dest / ".venv").symlink_to(ROOT / ".venv")
        if (ROOT / "policy" / "venv").exists():
            (dest / "policy" / "venv").symlink_to(ROOT / "policy" / "venv")
        state = self.base / "state" / name  # a backend of its own: stack names never collide
        state.mkdir(parents=True)
        return Workspace(engine=self, root=dest, env={"PULUMI_BACKEND_URL": f"file://{state}"})


@dataclass
class Workspace:
    engine: Engine
    root: Path
    env: dict[str, str] = field(default_factory=dict)

    def pulumi(self, *args: str, check: bool = True, extra_env: dict[str, str] | None = None) -> Any:
        return self.engine.run(self.root, *args, check=check, extra_env={**self.env, **(extra_env or {})})

    def shell(self, line: str) -> Any:
        """Run one README command line as a person would paste it (through the shell)."""
        return subprocess.run(
            ["bash", "-c", "set -euo pipefail; " + line],
            cwd=self.root,
            env={**self.engine.env, **self.env},
            capture_output=True,
            text=True,
            check=False,
            timeout=900,
        )

    def bare_project(self, stack: str) -> Path:
        """Give `stack` a bare Google Cloud project of its own (the stand-in GCP provider's), holding
        only what the stack's owner has beforehand: the reservations of tests/standins/reservations.py
        (declared apart from the stack) and its weights bucket."""
        from plan import engine as offline
        from settings.loader import load
        from tests.standins import gcp_provider

        raw, secret_keys = offline.read_stack_config(self.root / f"Pulumi.{stack}.yaml")
        config = load(raw, stack=stack, project=raw.get("gcp:project"), secret_keys=secret_keys)
        path = self.root.parent / f"{self.root.name}.{stack}.gcp-project.json"
        gcp_provider.prepare(path, config)
        self.env[gcp_provider.PROJECT_ENV] = str(path)
        return path

    def preview_steps(self, stack: str, *extra: str) -> tuple[Any, dict[str, Any]]:
        done = self.pulumi("preview", "--stack", stack, "--diff", "--json", *extra, check=False)
        try:
            document = json.loads(done.stdout)
        except json.JSONDecodeError:
            document = {}
        return done, document


def esc_config(project: Path, stack_file: Path, environments: dict[str, str]) -> dict[str, Any]:
    """The pinned CLI's own answer (tools/engine/pulumi/escconfig): each environment opened as `pulumi
    env open NAME --format detailed` prints it, and the config `pulumi up` would hand the program for
    `stack_file`, its imports evaluated from `environments` (name to definition)."""
    binary = ENGINE_DIR / "bin" / "pulumi-escconfig"
    if not binary.exists():
        raise EngineMissingError(f"{binary} is missing: run `make engine`")
    request = {
        "project": str(project),
        "stackFile": str(stack_file),
        "stack": stack_file.name.removeprefix("Pulumi.").removesuffix(".yaml"),
        "environments": environments,
    }
    done = subprocess.run([str(binary)], input=json.dumps(request), capture_output=True, text=True, check=False)
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def readme_deploy_commands() -> list[str]:
    """The lines of the README's Deploy block, comments stripped."""
    text = (ROOT / "README.md").read_text()
    block = text.split("\n## Deploy\n", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def readme_stack(engine: Engine, stack: str, label: str, *, project: str, token: str) -> Workspace:
    """A new stack `<stack>-new` made with the README's own commands, the stack file copied first."""
    ws = engine.workspace(f"{label}-{stack}")
    substitutions = {
        "Pulumi.dev.yaml": f"Pulumi.{stack}.yaml",
        "my-block-0": f"{stack}-new",
        "my-project": project,
        "hf_...": token,
    }
    for command in readme_deploy_commands():
        if command.startswith(("pulumi login", "pulumi preview", "pulumi up", "pulumi stack output")):
            continue  # the backend is the test's; preview, up and output are what the tests check
        line = command
        for old, new in substitutions.items():
            line = line.replace(old, new)
        done = ws.shell(line)
        if done.returncode != 0:
            raise RuntimeError(f"{line}\n{done.stdout}\n{done.stderr}")
    ws.bare_project(f"{stack}-new")
    return ws


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.engine")
    parser.add_argument("command", choices=["preview"])
    parser.add_argument("--stack", default="dev")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tpu-slicing-engine-") as tmp:
        engine = Engine.create(Path(tmp))
        ws = engine.workspace("project")
        ws.pulumi("stack", "init", args.stack)
        ws.pulumi("config", "set", "--stack", args.stack, "gcp:project", "example-tpu-project")
        done = ws.pulumi("preview", "--stack", args.stack, "--diff", "--policy-pack", "policy", check=False)
        print(done.stdout)
        print(done.stderr, file=sys.stderr)
        return int(done.returncode)


if __name__ == "__main__":
    sys.exit(main())
