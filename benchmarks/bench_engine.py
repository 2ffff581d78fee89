"""Benchmark: a real `pulumi preview` of the dev stack against a one-resource program and the offline plan.

One run, four measurements (each the median of three after one warm-up), on a brand-new stack:
the real CLI previewing the dev stack (program, language host, Kubernetes provider, stand-in
GCP and Command providers; policy pack off and on), the same CLI previewing
`benchmarks/one_resource` (the engine's fixed cost), and the offline plan of the dev stack in
preview mode. Prints seconds and ratios; no thresholds. Needs `make engine`.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.engine import Engine  # noqa: E402 - after the path is set


def timed(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-engine-") as tmp:
        engine = Engine.create(Path(tmp))
        ws = engine.workspace("project")
        ws.pulumi("stack", "init", "dev")
        ws.pulumi("config", "set", "gcp:project", "example-tpu-project", "--stack", "dev")
        one = Path(tmp) / "one"
        shutil.copytree(ROOT / "benchmarks" / "one_resource", one)
        (one / ".venv").symlink_to(ROOT / ".venv")
        engine.run(one, "stack", "init", "one")

        def median(fn: object) -> float:
            timed(fn)  # warm: plugin installs, byte-compiled modules, file-system caches
            return sorted(timed(fn) for _ in range(3))[1]

        dev = median(lambda: ws.pulumi("preview", "--stack", "dev"))
        dev_policy = median(lambda: ws.pulumi("preview", "--stack", "dev", "--policy-pack", "policy"))
        single = median(lambda: engine.run(one, "preview", "--stack", "one"))
        offline = median(
            lambda: subprocess.run(
                [sys.executable, "-m", "plan", "--stack", "dev", "--preview"], cwd=ROOT, capture_output=True, check=True
            )
        )
    print(f"real preview, dev stack:                   {dev:7.1f} s")
    print(f"real preview, dev stack with policy pack:  {dev_policy:7.1f} s")
    print(f"real preview, one-resource program:        {single:7.1f} s")
    print(f"offline plan, dev stack (preview mode):    {offline:7.1f} s")
    print(f"ratio dev / one-resource:                  {dev / single:7.2f}")
    print(f"ratio dev with policy / dev:               {dev_policy / dev:7.2f}")
    print(f"ratio offline plan / real preview:         {offline / dev:7.2f}")


if __name__ == "__main__":
    main()
