"""The reservation read at preview and `up`, by the real engine against the GCP stand-in.

The stand-in project holds the owner's TPU7x reservation (tests/standins/reservations.py) and
answers pulumi-gcp's getReservationBlock/getReservationSubBlock from it, counting the hosts the
stack's pools take (tests/standins/gcp_project.py). A new pool is refused by its before_create hook
(infra/reservation.py) when its sub-block is DEGRADED, full, or has maintenance due inside a no-go
window; a pool the stack already runs is warned about and kept.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine import Workspace
from tests.standins import gcp_project, gcp_provider
from tests.standins.gcp_project import Project
from tests.test_real_engine import PROJECT_ID, _google_cloud_targets, _initialised, engine  # noqa: F401

pytestmark = pytest.mark.gcp_standin

NAME = "dev-new"
RESERVATION = f"projects/{PROJECT_ID}/reservations/example-tpu7x-reservation"
POOL = gcp_project.NODE_POOL


def _project(ws: Workspace) -> Project:
    return Project.at(Path(ws.env[gcp_provider.PROJECT_ENV]))


def _tpu_pools(project: Project) -> list[str]:
    names = (r["identity"].rsplit("/", 1)[-1] for r in project.resources.values() if r["token"] == POOL)
    return sorted(name for name in names if "-tpu-" in name)


def _refusal(output: str, sub_block: str) -> str:
    lines = [x for x in output.splitlines() if f"sub-block {sub_block} " in x and "Allowed:" in x]
    assert lines, output[-4000:]
    return lines[0]


def test_new_pools_are_refused_on_a_degraded_full_or_maintained_sub_block(engine) -> None:  # noqa: F811
    ws = _initialised(engine, "dev", "reservation-refused")
    project = _project(ws)
    targets = _google_cloud_targets(ws, NAME)

    # DEGRADED: `up` enables the Compute API, reads, and stops before the pool is created.
    project.set_sub_block(RESERVATION, "block-0", "sub-block-1", health="DEGRADED")
    done = ws.pulumi("up", "--yes", "--skip-preview", "--stack", NAME, *targets, check=False)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    line = _refusal(output, "sub-block-1")
    assert "tpu-slicing:reservation.subBlocks: sub-block sub-block-1 is DEGRADED" in line
    # The engine's own line names the hook and carries the refusal; the SDK's report of the failed
    # registration follows it, as for the GKE version hook (tests/test_real_engine.py).
    assert any(x.strip().startswith('error: before hook "reservation-sub-block-1"') for x in output.splitlines()), (
        output[-3000:]
    )
    assert not any(p.endswith("-tpu-sub-block-1") for p in _tpu_pools(project))
    assert [r["rule"] for r in project.refusals] == []  # GCP was never asked

    # The APIs are on now, so a preview reads too, and fails the same way.
    done = ws.pulumi("preview", "--stack", NAME, *targets, check=False)
    assert done.returncode != 0 and "sub-block-1 is DEGRADED" in done.stdout + done.stderr

    # HEALTHY but four hosts taken by hand: free against needed.
    project.set_sub_block(RESERVATION, "block-0", "sub-block-1", health="HEALTHY", in_use=4)
    done = ws.pulumi("preview", "--stack", NAME, *targets, check=False)
    assert done.returncode != 0
    assert "has 12 free hosts of 16 (4 in use), a pool needs 16" in _refusal(done.stdout + done.stderr, "sub-block-1")

    # Free again, with maintenance announced inside a no-go window: the provider's read has no
    # window (pulumi-gcp 10.2.0), so pending maintenance is refused while no-go windows are set.
    project.set_sub_block(
        RESERVATION, "block-0", "sub-block-1", in_use=0,
        maintenance_window=("2026-09-18T00:00:00Z", "2026-09-30T00:00:00Z"),
    )  # fmt: skip
    for end, moment in (("start", "2026-09-01T00:00:00Z"), ("end", "2026-10-01T00:00:00Z")):
        key = f"tpu-slicing:reservation.maintenanceNoGo[0].{end}"
        ws.pulumi("config", "set", "--path", key, moment, "--stack", NAME)
    done = ws.pulumi("preview", "--stack", NAME, *targets, check=False)
    assert done.returncode != 0
    assert "has maintenance due on 16 hosts" in _refusal(done.stdout + done.stderr, "sub-block-1")

    # Accepted with a reason: the preview passes and says what it accepted.
    ws.pulumi(
        "config", "set", "--path", "tpu-slicing:reservation.accept.sub-block-1",
        "moved before the window, ticket 123", "--stack", NAME,
    )  # fmt: skip
    done = ws.pulumi("preview", "--stack", NAME, *targets, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "accepted: moved before the window, ticket 123" in done.stdout + done.stderr


def test_a_running_stack_is_not_refused_by_its_own_pools_nor_replaced_when_a_sub_block_degrades(engine) -> None:  # noqa: F811
    ws = _initialised(engine, "dev", "reservation-running")
    project = _project(ws)
    targets = _google_cloud_targets(ws, NAME)
    # The first `up` on the bare project: the reads wait for the Compute API.
    ws.pulumi("up", "--yes", "--skip-preview", "--stack", NAME, *targets)
    assert len(_tpu_pools(project)) == 2
    # The stack's own 32 hosts are in use now; a second `up` is not refused by them.
    done = ws.pulumi("up", "--yes", "--skip-preview", "--stack", NAME, *targets, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    project.set_sub_block(RESERVATION, "block-0", "sub-block-1", health="DEGRADED")
    done, document = ws.preview_steps(NAME, *targets)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # Nothing in Google Cloud changes: only the TpuPools component's input, the health the policy pack
    # reads (infra/reservation.py `bound`), is updated in the state.
    steps = [(s["op"], s["urn"].rsplit("::", 1)[1]) for s in document["steps"] if s["op"] not in ("same", "read")]
    assert steps == [("update", "tpu-pools")]
    warnings = " ".join(" ".join(str(d.get("message", "")).split()) for d in document.get("diagnostics") or [])
    assert "sub-block sub-block-1 is DEGRADED: a pool already running there is kept" in warnings, warnings[-2000:]
