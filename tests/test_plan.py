"""The offline plan command: what a newcomer sees first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from plan.__main__ import main
from plan.engine import ROOT


def test_plan_prints_tree_capacity_and_outputs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--stack", "dev"]) == 0
    out = capsys.readouterr().out
    assert "DESIRED STATE" in out and "not a diff against the cloud" in out
    assert "tpu-slicing:infra:TpuPools  tpu-pools" in out
    assert "gcp:container/nodePool:NodePool  cube-sub-block-0" in out
    assert "nodeConfig.reservationAffinity.consumeReservationType=SPECIFIC_RESERVATION" in out
    assert "workloadPolicy.acceleratorTopologyMode=PROVISION_ONLY" in out
    assert "2 cube(s) of 4x4x4 tpu7x: 32 VMs, 128 chips, 256 JAX devices, 24576 GiB HBM" in out
    assert "dev-tpu-sub-block-1 -> projects/example-tpu-project/reservations/example-tpu7x-reservation" in out
    assert "kubeconfig = [secret]" in out
    assert "totalChips = 128" in out


def test_preview_mode_shows_unknowns(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--stack", "dev", "--preview"]) == 0
    out = capsys.readouterr().out
    assert "preview (a brand-new stack)" in out
    assert "endpoint = (known after apply)" in out


def test_missing_stack_file_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--stack", "no-such-stack"]) == 2
    assert "Pulumi.no-such-stack.yaml" in capsys.readouterr().err


def test_invalid_stack_file_exits_with_the_problems(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    path = ROOT / "Pulumi.ci-invalid.yaml"
    path.write_text("config:\n  gcp:project: example-tpu-project\n  tpu-slicing:zone: nowhere\n")
    try:
        assert main(["--stack", "ci-invalid"]) == 2
    finally:
        path.unlink()
    err = capsys.readouterr().err
    assert "tpu-slicing:zone" in err and "nowhere" in err


def test_plan_out_never_deletes_a_file_it_did_not_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text("name: x\n")
    (project / "Pulumi.dev.yaml").write_text("config: {}\n")
    assert main(["--stack", "dev", "--out", str(project)]) != 0
    assert "holds a Pulumi project" in capsys.readouterr().err
    assert sorted(p.name for p in project.iterdir()) == ["Pulumi.dev.yaml", "Pulumi.yaml"]
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.yaml").write_text("mine\n")
    assert main(["--stack", "dev", "--out", str(other)]) != 0
    assert "not empty and was not written by a plan" in capsys.readouterr().err
    assert (other / "notes.yaml").read_text() == "mine\n"


def test_plan_out_replaces_only_what_an_earlier_plan_wrote(tmp_path: Path) -> None:
    out = tmp_path / "out"
    main(["--stack", "dev", "--out", str(out)])
    first = {p.name for p in out.glob("*.yaml")}
    (out / "stale--configmap--gone.yaml").write_text("x\n")
    marker = out / ".tpu-slicing-plan"
    marker.write_text(marker.read_text() + "stale--configmap--gone.yaml\n")
    main(["--stack", "dev", "--out", str(out)])
    assert {p.name for p in out.glob("*.yaml")} == first


@pytest.mark.parametrize("stack", ["dev-b", "saxml-v5e"])
def test_the_plan_is_the_same_in_every_process(stack: str, tmp_path: Path) -> None:
    """The plan and its JSON are compared across revisions in pull requests: ties (equal finish
    times, resources registered concurrently) must not flip with the hash seed or the scheduling."""
    outputs = []
    for seed in ("1", "2"):
        out = tmp_path / f"{seed}.json"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "plan",
                "--stack",
                stack,
                "--preview",
                "--json",
                str(out),
                "--out",
                str(tmp_path / seed),
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        )
        outputs.append((done.stdout.replace(str(tmp_path / seed), "OUT"), out.read_text()))
    assert outputs[0] == outputs[1]
