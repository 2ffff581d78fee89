"""Stand-in `pulumi-resource-command` 1.2.1 (`command:local:Command` only) for the real-engine tests.

Like the real provider it runs `create` on create, `update` (or `create`) on update and
`delete` on delete through the interpreter (default `/bin/sh -c`), in `dir`, with
`environment` added, and records `stdout` and `stderr`; a non-zero exit fails the step.

What it cannot show: the real provider's input validation, `assetPaths`/`archivePaths`,
`logging` modes, stdin, and its exact replacement rules (the SDK's `triggers` replace-on-change
is applied by the engine, not by this stand-in, so that part is real).
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

from pulumi.runtime.proto import provider_pb2

from tests.standins.provider import StandInProvider, run, to_dict, to_struct

COMMAND_TOKEN = "command:local:Command"


# The engine sends a secret input wrapped in this signature object (the provider accepts secrets,
# sdk/go/common/resource/sig/sig.go); the command must see the plain value.
SECRET_SIG = "4dabf18193072939515e22adb298388d"


def plain(value: Any) -> Any:
    if isinstance(value, dict):
        if SECRET_SIG in value:
            return plain(value.get("value"))
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def _run(script: str, inputs: dict[str, Any]) -> tuple[str, str]:
    inputs = plain(inputs)
    interpreter = inputs.get("interpreter") or ["/bin/sh", "-c"]
    env = {**os.environ, **{k: str(v) for k, v in (inputs.get("environment") or {}).items()}}
    done = subprocess.run(
        [*interpreter, script], cwd=inputs.get("dir") or None, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"command exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done.stdout, done.stderr


def compute(token: str, name: str, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if token != COMMAND_TOKEN:
        raise NotImplementedError(f"the command stand-in only runs {COMMAND_TOKEN}, not {token}")
    stdout, stderr = _run(plain(inputs["create"]), inputs) if inputs.get("create") else ("", "")
    return (f"{name}-command", {**inputs, "stdout": stdout, "stderr": stderr})


class CommandStandIn(StandInProvider):
    def Update(self, request: Any, context: Any) -> Any:  # noqa: N802
        if request.preview:
            return provider_pb2.UpdateResponse(properties=request.news)
        news = to_dict(request.news)
        script = news.get("update") or news.get("create")
        stdout, stderr = _run(plain(script), news) if script else ("", "")
        return provider_pb2.UpdateResponse(properties=to_struct({**news, "stdout": stdout, "stderr": stderr}))

    def Delete(self, request: Any, context: Any) -> Any:  # noqa: N802
        state = to_dict(request.properties)
        if state.get("delete"):
            _run(plain(state["delete"]), state)
        return super().Delete(request, context)


if __name__ == "__main__":
    run(CommandStandIn("1.2.1", compute))
