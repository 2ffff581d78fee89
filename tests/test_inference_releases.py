"""The pinned inference-extension CRD files and the Command that applies them, against the
release's own files (the Go module `sigs.k8s.io/gateway-api-inference-extension` at the tag,
checked to be the pinned commit; tests/standins/curl.py serves the same files to the Command)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from domain.inference_releases import RELEASES, InferenceExtensionRelease
from k8s.inference_crds import apply_script
from tests.standins import curl

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("release", RELEASES.values(), ids=lambda r: r.version)
def test_every_pinned_checksum_is_the_release_files(release: InferenceExtensionRelease) -> None:
    folder = curl.release_dir(release)
    for crd_file in release.files:
        assert hashlib.sha256((folder / crd_file.path).read_bytes()).hexdigest() == crd_file.sha256, crd_file.path


def _bin(tmp_path: Path, kubectl: str, curl_body: str | None = None) -> dict[str, str]:
    """PATH with the curl stand-in (or a curl that writes `curl_body`) and a scripted kubectl."""
    tools = tmp_path / "bin"
    tools.mkdir()
    if curl_body is None:
        command = f'PYTHONPATH="{ROOT}" exec "{sys.executable}" -m tests.standins.curl "$@"'
    else:
        command = f'while [ "$1" != -o ]; do shift; done; printf %s {curl_body!r} > "$2"'
    (tools / "curl").write_text(f"#!/bin/sh\n{command}\n")
    (tools / "kubectl").write_text(f'#!/bin/sh\necho "kubectl $*" >> {tmp_path}/kubectl.log\n{kubectl}\n')
    for tool in tools.iterdir():
        tool.chmod(0o755)
    return {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}", "KUBECONFIG_DATA": "{}"}


def _run(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/bash", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False)


def test_the_wait_for_gkes_crd_has_a_deadline_and_says_why(tmp_path: Path) -> None:
    """A cluster where GKE never installs the InferencePool CRD fails the apply; before, `pulumi up` hung."""
    env = _bin(tmp_path, 'case "$3" in get) exit 1;; esac; exit 0') | {"CRD_WAIT_SECONDS": "1"}
    done = _run(apply_script(RELEASES["v1.5.0"]), env)
    assert done.returncode == 1, done.stderr
    assert "inferencepools.inference.networking.k8s.io is not installed after 1 s" in done.stderr
    assert "Gateway API" in done.stderr
    assert "apply --server-side" in (tmp_path / "kubectl.log").read_text()  # the owned files were applied


def test_every_applied_file_is_checked_before_anything_is_applied(tmp_path: Path) -> None:
    env = _bin(tmp_path, "exit 0", curl_body="apiVersion: v1\nkind: Tampered\n")
    done = _run(apply_script(RELEASES["v1.5.0"]), env)
    assert done.returncode != 0 and "FAILED" in done.stdout + done.stderr
    assert not (tmp_path / "kubectl.log").exists()


def test_the_upstream_files_apply_and_the_wait_ends_when_the_crd_exists(tmp_path: Path) -> None:
    env = _bin(tmp_path, "exit 0") | {"CRD_WAIT_SECONDS": "1"}
    done = _run(apply_script(RELEASES["v1.5.0"]), env)
    assert done.returncode == 0, done.stderr
    log = (tmp_path / "kubectl.log").read_text()
    assert "get crd/inferencepools.inference.networking.k8s.io" in log and "wait --for=condition=Established" in log
