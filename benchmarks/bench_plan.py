"""Benchmark: evaluating the dev stack under mocks vs. importing the SDK modules it uses.

Runs two fresh interpreters in one go: one only imports the SDK modules the
program touches, the other imports them and evaluates the dev stack (first run
and warm re-runs). Prints the times and their ratios; no thresholds, no asserts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

IMPORTS = """
import time, json, warnings
warnings.filterwarnings("ignore")
t0 = time.perf_counter()
import pulumi, pulumi_gcp as gcp, pulumi_kubernetes as kubernetes, pulumi_command as command, yaml, pydantic
# pulumi_gcp loads lazily: touch every class the program uses so the import is complete.
used = (gcp.compute.Network, gcp.compute.Subnetwork, gcp.compute.Firewall, gcp.compute.ResourcePolicy,
        gcp.compute.PreviewFeature, gcp.container.Cluster, gcp.container.NodePool, gcp.projects.Service,
        gcp.projects.IAMMember, gcp.serviceaccount.Account, gcp.storage.BucketIAMMember,
        gcp.storage.Bucket, gcp.serviceaccount.IAMMember, gcp.organizations.get_project_output,
        kubernetes.Provider, kubernetes.helm.v3.Release, kubernetes.core.v1.Namespace, kubernetes.apps.v1.Deployment,
        kubernetes.rbac.v1.Role, kubernetes.batch.v1.Job,
        kubernetes.admissionregistration.v1.MutatingWebhookConfiguration, command.local.Command)
t1 = time.perf_counter()
"""

EVALUATE = (
    IMPORTS
    + """
from plan import engine
t2 = time.perf_counter()
engine.run_stack("dev")
t3 = time.perf_counter()
warm = []
for _ in range(5):
    s = time.perf_counter(); engine.run_stack("dev"); warm.append(time.perf_counter() - s)
print(json.dumps({"imports": t1 - t0, "first": t3 - t2, "warm": sorted(warm)[2]}))
"""
)


def run(code: str) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


FLEET = """
import time, json, warnings
warnings.filterwarnings("ignore")
from plan import engine, fleet, stacks
fleet.report()  # imports and caches warmed, as the plan's own first run
t0 = time.perf_counter(); fleet.report(); t1 = time.perf_counter()
names = sorted(stacks.stack_files())
t2 = time.perf_counter()
for name in names:
    engine.run_stack(name)
t3 = time.perf_counter()
print(json.dumps({"fleet": t1 - t0, "one_by_one": t3 - t2, "stacks": len(names)}))
"""


def main() -> None:
    bare = run(IMPORTS + "print(json.dumps({'imports': t1 - t0}))")
    full = run(EVALUATE)
    print(f"SDK imports (bare interpreter):        {bare['imports'] * 1000:8.0f} ms")
    print(f"dev stack, first evaluation:           {full['first'] * 1000:8.0f} ms")
    print(f"dev stack, warm evaluation (median/5): {full['warm'] * 1000:8.0f} ms")
    print(f"ratio first evaluation / imports:      {full['first'] / bare['imports']:8.2f}")
    print(f"ratio warm evaluation / imports:       {full['warm'] / bare['imports']:8.2f}")
    fleet = run(FLEET)
    print(f"fleet table, {fleet['stacks']:.0f} stacks:                {fleet['fleet'] * 1000:8.0f} ms")
    print(f"planning them one by one:              {fleet['one_by_one'] * 1000:8.0f} ms")
    print(f"ratio one by one / fleet table:        {fleet['one_by_one'] / fleet['fleet']:8.2f}")


if __name__ == "__main__":
    main()
