"""The reservation offline: `python -m plan` judges the stack's new pools against a snapshot with the
same hooks `pulumi up` runs, says when it could not read it, refuses a malformed or foreign snapshot in
one line, and `python -m plan reservation` prints the block's table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from plan.__main__ import main

RESERVATION = "example-tpu7x-reservation"
LINK = (
    "https://www.googleapis.com/compute/v1/projects/example-tpu-project/zones/us-central1-ai1a/reservations/"
    "{reservation}/reservationBlocks/block-0/reservationSubBlocks/{name}"
)


def sub_block(
    name: str, health: str = "HEALTHY", in_use: int = 0, reservation: str = RESERVATION, **extra: Any
) -> dict:
    """One entry as `gcloud compute reservations sub-blocks list --format=json` prints it (compute/v1
    ReservationSubBlock)."""
    return {
        "kind": "compute#reservationSubBlock",
        "name": name,
        "count": 16,
        "inUseCount": in_use,
        "status": "READY",
        "healthInfo": {"healthStatus": health},
        "selfLink": LINK.format(reservation=reservation, name=name),
        **extra,
    }


def snapshot(tmp_path: Path, *entries: dict) -> Path:
    path = tmp_path / "sub-blocks.json"
    path.write_text(json.dumps(list(entries)))
    return path


def err_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error:")]
    assert len(lines) == 1, lines
    return lines[0]


def test_a_degraded_bound_sub_block_fails_the_plan_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = snapshot(tmp_path, sub_block("sub-block-0"), sub_block("sub-block-1", "DEGRADED"))
    out = tmp_path / "plan"
    assert main(["--stack", "dev", "--out", str(out), "--reservation-snapshot", str(path)]) == 2
    line = err_line(capsys)
    assert line.startswith("error: tpu-slicing:reservation.subBlocks: sub-block sub-block-1 is DEGRADED.")
    assert "tpu-slicing:reservation.accept: {sub-block-1: <reason>}" in line


def test_a_full_bound_sub_block_fails_the_plan_naming_free_and_needed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = snapshot(tmp_path, sub_block("sub-block-0", in_use=4), sub_block("sub-block-1"))
    assert main(["--stack", "dev", "--out", str(tmp_path / "plan"), "--reservation-snapshot", str(path)]) == 2
    assert "sub-block sub-block-0 has 12 free hosts of 16 (4 in use), a pool needs 16" in err_line(capsys)


def test_a_healthy_free_block_plans_and_an_unread_one_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    path = snapshot(tmp_path, sub_block("sub-block-0"), sub_block("sub-block-1"))
    assert main(["--stack", "dev", "--out", str(tmp_path / "a"), "--reservation-snapshot", str(path)]) == 0
    assert "was not read" not in caplog.text
    assert "sub-block-1  HEALTHY  16/0/16" in capsys.readouterr().out
    assert main(["--stack", "dev", "--out", str(tmp_path / "b")]) == 0
    assert "block block-0 was not read (sub-block-0, sub-block-1)" in caplog.text


@pytest.mark.parametrize(
    ("entries", "says"),
    [
        ("[{", "not JSON"),
        (json.dumps([sub_block("sub-block-0", reservation="someone-elses")]), "is in reservation someone-elses"),
    ],
)
def test_a_malformed_or_foreign_snapshot_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], entries: str, says: str
) -> None:
    path = tmp_path / "s.json"
    path.write_text(entries)
    assert main(["--stack", "dev", "--out", str(tmp_path / "plan"), "--reservation-snapshot", str(path)]) == 2
    assert says in err_line(capsys)


def test_the_reservation_command_prints_the_blocks_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    maintenance = {
        "maintenancePendingCount": 16,
        "upcomingGroupMaintenance": {
            "windowStartTime": "2026-09-18T00:00:00Z",
            "windowEndTime": "2026-09-30T00:00:00Z",
        },
    }
    path = snapshot(
        tmp_path,
        sub_block("sub-block-0"),
        sub_block("sub-block-1", reservationSubBlockMaintenance=maintenance),
        sub_block("sub-block-2", "DEGRADED"),
        sub_block("sub-block-3", in_use=16),
    )
    assert main(["reservation", "--stack", "dev", "--snapshot", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split() for line in out if line.startswith("sub-block-")}
    assert rows["sub-block-0"][:4] == ["sub-block-0", "HEALTHY", "16/0/16", "dev"]
    assert rows["sub-block-2"][:4] == ["sub-block-2", "DEGRADED", "16/0/16", "dev-b"]
    assert rows["sub-block-3"][:4] == ["sub-block-3", "HEALTHY", "0/16/16", "dev-b"]
    assert "due 2026-09-18T00:00Z..2026-09-30T00:00Z" in " ".join(rows["sub-block-1"])
    assert out[-1] == "  no refusal"


def test_the_diff_shows_the_bound_sub_blocks_and_calls_out_what_moved(tmp_path: Path) -> None:
    from plan import document, engine

    def doc(*entries: dict, existing: frozenset[tuple[str, str]] = frozenset()) -> dict:
        config, secret_keys = engine.read_stack_config(engine.stack_file("dev"))
        read = snapshot(tmp_path, *entries)
        result = engine.run(config, stack="dev", secret_keys=secret_keys, snapshot=read, existing=existing)
        from settings.loader import load

        return document.document(
            result, load(config, stack="dev", project=config["gcp:project"], secret_keys=secret_keys)
        )

    window = {"windowStartTime": "2026-09-18T00:00:00Z", "windowEndTime": "2026-09-30T00:00:00Z"}
    base = doc(sub_block("sub-block-0"), sub_block("sub-block-1"))
    with pytest.raises(engine.HookRefusedError, match="sub-block-1 is DEGRADED"):  # a new stack: refused
        doc(sub_block("sub-block-0"), sub_block("sub-block-1", "DEGRADED"))
    # The head of a diff runs nothing the base creates (plan/__main__.py diff): the pool is kept.
    created = frozenset((r["type"], r["name"]) for r in base["resources"].values())
    head = doc(
        sub_block("sub-block-0"),
        sub_block(
            "sub-block-1",
            "DEGRADED",
            reservationSubBlockMaintenance={"maintenancePendingCount": 16, "upcomingGroupMaintenance": window},
        ),
        existing=created,
    )
    text = document.diff_markdown(base, head, "dev")
    assert "#### Reservation (from the snapshot)" in text
    assert "| `sub-block-0` | HEALTHY | 16/0/16 | none |" in text
    assert "- **sub-block-1: HEALTHY → DEGRADED**" in text
    assert "- **sub-block-1: maintenance due 2026-09-18T00:00Z..2026-09-30T00:00Z (16 pending, 0 ongoing)**" in text


def test_pools_bound_to_the_whole_block_are_judged_on_its_healthy_free_hosts(tmp_path: Path) -> None:
    from plan import engine

    config, secret_keys = engine.read_stack_config(engine.stack_file("dev"))
    reservation = json.loads(config["tpu-slicing:reservation"])
    del reservation["subBlocks"]  # GKE picks the sub-blocks: two cubes need 32 healthy free hosts
    config["tpu-slicing:reservation"] = json.dumps(reservation)
    # 16 free in sub-block-0, sub-block-1 DEGRADED (not counted), sub-block-2 full.
    read = snapshot(
        tmp_path, sub_block("sub-block-0"), sub_block("sub-block-1", "DEGRADED"), sub_block("sub-block-2", in_use=16)
    )
    with pytest.raises(engine.HookRefusedError) as refused:
        engine.run(config, stack="dev", secret_keys=secret_keys, snapshot=read)
    assert str(refused.value).startswith(
        "tpu-slicing:reservation.block: block block-0 has 16 free hosts in HEALTHY sub-blocks "
        "(sub-block-1 not HEALTHY, not counted), the stack's new pools need 32."
    )
    read = snapshot(tmp_path, sub_block("sub-block-0"), sub_block("sub-block-1"), sub_block("sub-block-2", in_use=16))
    assert engine.run(config, stack="dev", secret_keys=secret_keys, snapshot=read).reservation


def node_pools(tmp_path: Path, bound: dict[str, str]) -> Path:
    """`gcloud container node-pools list --format=json` of a running stack (container/v1 NodePool):
    pool name -> the reservation path its affinity names."""
    path = tmp_path / "node-pools.json"
    listed = [
        {
            "name": name,
            "initialNodeCount": 16,
            "config": {
                "machineType": "tpu7x-standard-4t",
                "reservationAffinity": {
                    "consumeReservationType": "SPECIFIC_RESERVATION",
                    "key": "compute.googleapis.com/reservation-name",
                    "values": [where],
                },
            },
        }
        for name, where in bound.items()
    ]
    path.write_text(json.dumps([{"name": "default-pool", "initialNodeCount": 1, "config": {}}, *listed]))
    return path


def test_a_running_stack_is_judged_as_pulumi_up_judges_it_its_own_pools_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The dev stack runs its two pools, which fill its two sub-blocks: `pulumi up` creates neither
    again and refuses nothing (infra/reservation.py); before, this command printed two refusals."""
    from tests.conftest import config_with

    names = config_with().pool_names()
    block = "projects/example-tpu-project/reservations/example-tpu7x-reservation/reservationBlocks/block-0"
    read = snapshot(tmp_path, sub_block("sub-block-0", in_use=16), sub_block("sub-block-1", in_use=16))
    running = node_pools(tmp_path, {names[0]: f"{block}/reservationSubBlocks/sub-block-0",
                                    names[1]: f"{block}/reservationSubBlocks/sub-block-1"})  # fmt: skip
    assert main(["reservation", "--stack", "dev", "--snapshot", str(read), "--pools", str(running)]) == 0
    out = capsys.readouterr().out
    assert "refused" not in out, out
    assert f"sub-block sub-block-0: its pool {names[0]} runs there (16 hosts), not created again" in out
    # Without the running pools, it says it could not tell, and judges both pools as new.
    assert main(["reservation", "--stack", "dev", "--snapshot", str(read)]) == 0
    out = capsys.readouterr().out
    assert "the stack's running pools were not read" in out and out.count("refused:") == 2, out


def test_a_node_pool_listing_that_is_not_one_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    read = snapshot(tmp_path, sub_block("sub-block-0"), sub_block("sub-block-1"))
    bad = tmp_path / "pools.json"
    bad.write_text('{"nodePools": []}')
    assert main(["reservation", "--stack", "dev", "--snapshot", str(read), "--pools", str(bad)]) != 0
    assert "not a list of node pools" in err_line(capsys)


def test_a_block_bound_pool_replaced_delete_first_is_judged_net_of_its_own_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both pools of a block-bound stack run (32 hosts) and 16 more are free: replacing both, each
    deleted first (infra/tpu_pools.py), gives each one's hosts back before its successor asks. Before,
    the second replacement was refused ("needs 32") although deleting first frees what it takes."""
    from plan import engine

    config, secret_keys = engine.read_stack_config(engine.stack_file("dev"))
    reservation = json.loads(config["tpu-slicing:reservation"])
    del reservation["subBlocks"]
    config["tpu-slicing:reservation"] = json.dumps(reservation)
    from tests.conftest import config_with

    names = config_with({"reservation": {"subBlocks": None}}).pool_names()  # keyed 1 and 2, not by sub-block
    read = snapshot(
        tmp_path, sub_block("sub-block-0", in_use=16), sub_block("sub-block-1", in_use=16), sub_block("sub-block-2")
    )

    def running(pools: list[str]) -> None:
        # container/v1 Cluster as the provider's getCluster answers: each running pool and its nodes.
        monkeypatch.setitem(engine.FIXED_ANSWERS, "gcp:container/getCluster:getCluster", lambda args: {
            "name": args.get("name"), "location": args.get("location"),
            "nodePools": [{"name": name, "nodeCount": 16} for name in pools],
        })  # fmt: skip

    running(names)
    assert engine.run(config, stack="dev", secret_keys=secret_keys, snapshot=read).reservation
    # A pool that does not run yet is new: its hosts are still needed, and the block has 16 free.
    running(names[:1])
    with pytest.raises(engine.HookRefusedError, match="the stack's new pools need 32"):
        engine.run(config, stack="dev", secret_keys=secret_keys, snapshot=read)
