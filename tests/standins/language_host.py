"""Stand-in `pulumi-language-python` for the real-engine tests.

The real host's module (`sdk/python/cmd/pulumi-language-python`, pulumi/pulumi) is not served
by the module proxy here. This one does, for `preview`, `up` and `destroy`, what the real host
does (main.go at the newest stored commit, and its exec script at v3.274.0):

- GetRequiredPackages: every installed distribution that ships a `pulumi-plugin.json` (or is
  named `pulumi-*`), except pulumi-policy, as a resource plugin at the version it names;
- Run: `<venv>/bin/python` (the `virtualenv` option, relative to the project root; a missing
  venv is an error, as in the real host) runs `python_exec.py` with the real host's flags and
  the config in PULUMI_CONFIG / PULUMI_CONFIG_SECRET_KEYS;
- RunPlugin for a policy pack: `<pack>/<virtualenv>/bin/python -u -m pulumi.policy` in the pack's
  folder, its stdout streamed back so the engine reads the pack's port from it.

What it cannot show: the real host's venv creation and dependency installation (`pulumi
install`), toolchains other than pip (uv, poetry), type checking before a run, its policy
proxy (which hands the pack PULUMI_PROJECT/STACK/CONFIG at start; this one passes them from
the environment it is given), and debugger attach.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import empty_pb2
from pulumi.runtime.proto import language_pb2, language_pb2_grpc, plugin_pb2

from tests.standins import program_zygote
from tests.standins.serve import plugin_main

VERSION = "3.274.0"
EXEC = Path(__file__).with_name("python_exec.py")
SKIPPED = {"pulumi-policy", "pulumi-esc-sdk"}

# Lists, from inside the program's virtualenv, each distribution's pulumi-plugin.json.
LIST_PLUGINS = r"""
import importlib.metadata as md, json, re
found = []
for dist in md.distributions():
    name = re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower()
    plugin = None
    for f in dist.files or []:
        if f.name == "pulumi-plugin.json" and f.parent.name and "/" not in str(f.parent):
            plugin = json.loads(f.read_text())
            break
    if plugin is None and not name.startswith("pulumi-"):
        continue
    found.append({"package": name, "version": dist.version, "plugin": plugin})
print(json.dumps(found))
"""


def _venv_python(info: Any) -> str:
    venv = dict(info.options.items()).get("virtualenv") if info.options else None
    if not venv:
        return os.environ.get("PULUMI_PYTHON_CMD", "python3")
    path = Path(venv) if Path(venv).is_absolute() else Path(info.root_directory) / venv
    python = path / "bin" / "python"
    if not python.exists():
        raise FileNotFoundError(
            f"The 'virtualenv' option in Pulumi.yaml is set to {venv!r}, but {path} doesn't exist; "
            "create it (make .venv/.runtime) or run `pulumi install`"
        )
    return str(python)


def _python_or_abort(info: Any, context: Any) -> str:
    try:
        return _venv_python(info)
    except FileNotFoundError as err:
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))
        raise  # abort raises; this keeps the type checker informed


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(extra)
    return env


class LanguageHost(language_pb2_grpc.LanguageRuntimeServicer):
    def __init__(self, engine: str):
        self.engine = engine

    def GetPluginInfo(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC names
        return plugin_pb2.PluginInfo(version=VERSION)

    def GetRequiredPackages(self, request: Any, context: Any) -> Any:  # noqa: N802
        python = _python_or_abort(request.info, context)
        done = subprocess.run(
            [python, "-c", LIST_PLUGINS], capture_output=True, text=True, env=_child_env({}), check=False
        )
        if done.returncode != 0:
            context.abort(grpc.StatusCode.INTERNAL, done.stderr)
        packages = []
        for entry in json.loads(done.stdout):
            plugin = entry["plugin"] or {}
            if entry["package"] in SKIPPED or plugin.get("resource") is False:
                continue
            version = plugin.get("version") or entry["version"]
            packages.append(
                plugin_pb2.PackageDependency(
                    name=plugin.get("name") or entry["package"].removeprefix("pulumi-"),
                    kind="resource",
                    version=version if version.startswith("v") else f"v{version}",
                    server=plugin.get("server", ""),
                )
            )
        return language_pb2.GetRequiredPackagesResponse(packages=packages)

    def Run(self, request: Any, context: Any) -> Any:  # noqa: N802
        python = _python_or_abort(request.info, context)
        flags = {
            "monitor": request.monitor_address,
            "engine": self.engine,
            "project": request.project,
            "root_directory": request.info.root_directory,
            "stack": request.stack,
            "pwd": request.pwd,
            "dry_run": "true" if request.dryRun else "false",
            "parallel": str(request.parallel),
            "organization": request.organization,
        }
        argv = [python, str(EXEC)]
        for flag, value in flags.items():
            if value or flag in ("dry_run", "parallel"):
                argv += [f"--{flag}", value]
        argv += [request.info.entry_point or request.program, *request.args]
        env = _child_env(
            {
                "PULUMI_CONFIG": json.dumps(dict(request.config)),
                "PULUMI_CONFIG_SECRET_KEYS": json.dumps(list(request.configSecretKeys)),
            }
        )
        # A fresh interpreter, or the same run forked from one that has the SDKs imported already
        # (tests/standins/program_zygote.py says what that cannot show).
        zygote = os.environ.get(program_zygote.ENV)
        code = program_zygote.run(zygote, argv, env) if zygote else None
        if code is None:
            code = subprocess.run(argv, env=env, check=False).returncode
        if code == 0:
            return language_pb2.RunResponse()
        if code == 32:
            return language_pb2.RunResponse(bail=True)
        return language_pb2.RunResponse(error=f"program exited with non-zero exit code: {code}")

    def RunPlugin(self, request: Any, context: Any) -> Any:  # noqa: N802
        pack = Path(request.info.program_directory or request.program)
        # A pack's virtualenv is relative to the pack's folder, not the project's.
        info = type("Info", (), {"options": request.info.options, "root_directory": str(pack)})()
        python = _python_or_abort(info, context)
        env = _child_env(dict(item.split("=", 1) for item in request.env if "=" in item))
        proc = subprocess.Popen(
            [python, "-u", "-m", "pulumi.policy", *request.args, str(pack)],
            cwd=pack,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, errs = proc.stdout, proc.stderr
        assert out is not None and errs is not None
        errors: list[bytes] = []
        reader = threading.Thread(target=lambda: errors.extend(iter(errs.readline, b"")), daemon=True)
        reader.start()
        context.add_callback(proc.kill)
        # read1: forward what the pack printed as soon as it printed it (the engine waits for the port).
        for chunk in iter(lambda: out.read1(4096), b""):  # type: ignore[attr-defined]
            yield language_pb2.RunPluginResponse(stdout=chunk)
        code = proc.wait()
        reader.join(timeout=5)
        if errors:
            yield language_pb2.RunPluginResponse(stderr=b"".join(errors))
        yield language_pb2.RunPluginResponse(exitcode=code)

    def About(self, request: Any, context: Any) -> Any:  # noqa: N802
        return language_pb2.AboutResponse(executable=sys.executable, version=VERSION)

    def Cancel(self, request: Any, context: Any) -> Any:  # noqa: N802
        return empty_pb2.Empty()


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    engine = args[-1] if args else ""
    plugin_main(lambda server: language_pb2_grpc.add_LanguageRuntimeServicer_to_server(LanguageHost(engine), server))


if __name__ == "__main__":
    main()
