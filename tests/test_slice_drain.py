"""The destroy-time wait for GKE's Slices (k8s/slice_drain.py), run by bash with a scripted kubectl."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from k8s.slice_drain import drain_script


def _run(tmp_path: Path, kubectl: str, wait: str = "1") -> subprocess.CompletedProcess[str]:
    tools = tmp_path / "bin"
    tools.mkdir(exist_ok=True)
    (tools / "kubectl").write_text(f"#!/bin/sh\necho x >> {tmp_path}/calls\n{kubectl}\n")
    (tools / "kubectl").chmod(0o755)
    env = {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}", "KUBECONFIG_DATA": "{}"}
    env["SLICE_DRAIN_SECONDS"] = wait
    return subprocess.run(
        ["/bin/bash", "-c", drain_script()], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_slices_that_stay_keep_the_controller_and_say_which(tmp_path: Path) -> None:
    done = _run(tmp_path, "echo slice.accelerator.gke.io/slice-0123")
    assert done.returncode == 1
    assert "still present after 1 s" in done.stderr and "slice-0123" in done.stderr


def test_the_wait_ends_when_the_slices_are_gone(tmp_path: Path) -> None:
    # Two Slices on the first look, none on the second: the controller finalized them meanwhile.
    script = f'n=$(wc -l < {tmp_path}/calls); [ "$n" -ge 2 ] || echo slice.accelerator.gke.io/slice-0123'
    done = _run(tmp_path, script, wait="30")
    assert done.returncode == 0, done.stderr
    assert len((tmp_path / "calls").read_text().split()) == 2


def test_a_cluster_without_the_slice_resource_has_nothing_to_drain(tmp_path: Path) -> None:
    done = _run(tmp_path, "echo \"error: the server doesn't have a resource type 'slices'\" >&2; exit 1")
    assert done.returncode == 0, done.stderr


def test_other_errors_are_retried_until_the_deadline(tmp_path: Path) -> None:
    done = _run(tmp_path, "echo 'Unable to connect to the server' >&2; exit 1")
    assert done.returncode == 1 and "Unable to connect" in done.stderr
