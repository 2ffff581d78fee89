"""An upstream NetworkPolicy matcher's verdicts: cyclonus, run on the program's policies.

`make controlplane` builds github.com/mattfenwick/cyclonus at the pin in
tools/controlplane/cyclonus/go.mod into the plane's cache. Its `analyze --mode query-traffic`
evaluates networking.k8s.io/v1 NetworkPolicies offline (cyclonus v0.5.6 pkg/cli/analyze.go): it reads
one policy per file from `--policy-path` (pkg/kube/read.go) and a JSON list of traffic from
`--traffic-path` (pkg/matcher/traffic.go: a source and a destination, each an address and, for a
pod, its labels, namespace and the namespace's labels; a protocol and a port with its name), and
prints one table per traffic ending in an "IS ALLOWED?" row of TRUE or FALSE, in order
(pkg/cli/policy.go). A peer without pod details is outside the cluster: only `ipBlock` rules match it.

What it cannot show: how GKE Dataplane V2 enforces the same policies (the enforcer is closed);
cyclonus implements the API reference's semantics, which Dataplane V2 follows.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from contracts import network_policies as np
from tests import control_plane as cp
from tests.network_reachability import Pod, _relation

VERDICT = re.compile(r"^\|\s*IS ALLOWED\?\s*\|\s*(TRUE|FALSE)\s*\|", re.MULTILINE)


class JudgeError(RuntimeError):
    pass


def binary() -> Path:
    path = cp.cache_dir() / "bin" / "cyclonus"
    if not path.is_file():
        raise JudgeError(f"{path} missing: run `make controlplane`")
    return path


def _peer(pod: Pod) -> dict[str, Any]:
    if not pod.namespace:
        return {"IP": pod.address}
    return {
        "Internal": {
            "PodLabels": dict(pod.labels),
            "NamespaceLabels": {np.NAMESPACE_NAME_LABEL: pod.namespace},
            "Namespace": pod.namespace,
        },
        "IP": pod.address,
    }


def verdicts(policies: Sequence[Mapping[str, Any]], traffic: Sequence[tuple[Pod, Pod, int]]) -> list[bool]:
    """cyclonus's verdict on each (source, destination, TCP port) of `traffic`, in order."""
    with tempfile.TemporaryDirectory(prefix="tpu-slicing-netpol-") as folder:
        work = Path(folder)
        (work / "policies").mkdir()
        for index, policy in enumerate(policies):
            # JSON is YAML; one object per file, as cyclonus reads them.
            (work / "policies" / f"{index:04d}.yaml").write_text(json.dumps(policy))
        queries = [
            {
                "Source": _peer(source),
                "Destination": _peer(target),
                "Protocol": "TCP",
                "ResolvedPort": port,
                "ResolvedPortName": target.ports.get(port, ""),
            }
            for source, target, port in traffic
        ]
        (work / "traffic.json").write_text(json.dumps(queries))
        done = subprocess.run(
            [str(binary()), "analyze", "--mode", "query-traffic", "--policy-path", str(work / "policies"),
             "--traffic-path", str(work / "traffic.json")],
            capture_output=True, text=True, check=False, timeout=600,
        )  # fmt: skip
    found = VERDICT.findall(done.stdout)
    if done.returncode != 0 or len(found) != len(queries):
        raise JudgeError(
            f"cyclonus exited {done.returncode} with {len(found)} verdicts for {len(queries)} queries: "
            f"{done.stderr[-2000:]}"
        )
    return [verdict == "TRUE" for verdict in found]


def reachable(policies: Sequence[Mapping[str, Any]], sources: Sequence[Pod], targets: Sequence[Pod]) -> set[str]:
    """As tests/network_reachability.py `reachable`, with cyclonus deciding each flow."""
    traffic = [
        (source, target, port)
        for target in targets
        for source in sources
        if source is not target
        for port in sorted(target.ports)
    ]
    return {
        f"{_relation(source, target)} -> {target.role}:{port}"
        for (source, target, port), allowed in zip(traffic, verdicts(policies, traffic), strict=True)
        if allowed
    }
