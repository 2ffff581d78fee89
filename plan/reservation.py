"""The reservation check a platform engineer runs first: `python -m plan reservation --stack dev`
(`make reservation STACK=dev`).

It prints the block a stack binds, one row per sub-block (cube): its health, hosts free/used of its
count, which stacks of this repository bind it (every `Pulumi.<stack>.yaml`) and its maintenance,
as xpk's capacity check lists healthy and fitting sub-blocks (AI-Hypercomputer/xpk
src/xpk/core/reservation.py). Then what `pulumi up` would say of the stack's own new pools
(domain/reservation_health.py, the same judgement infra/reservation.py makes).

Where the reading comes from, in order: `--snapshot FILE`, the stack's `reservation.snapshot`, or
gcloud when it is installed and signed in (`gcloud compute reservations sub-blocks list ...
--format=json`, the same JSON a snapshot holds); without any, the bound sub-blocks are listed as not
read, with the command that captures a snapshot.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

from domain import bounded_input
from domain import reservation_health as rh
from plan import engine, stacks
from settings.model import StackConfig


def holders(configs: dict[str, StackConfig], reservation: str, block: str) -> dict[str, list[str]]:
    """sub-block -> the stacks that bind it; a stack bound to the whole block is listed under "*"."""
    found: dict[str, list[str]] = defaultdict(list)
    for name, config in sorted(configs.items()):
        r = config.reservation
        if r is None or r.name != reservation or r.block != block:
            continue
        for sub_block in r.sub_blocks or ["*"]:
            found[sub_block].append(name)
    return dict(found)


def capture_command(config: StackConfig) -> list[str]:
    r = config.reservation
    assert r is not None and r.block is not None
    return [
        *("gcloud", "compute", "reservations", "sub-blocks", "list", r.name),
        f"--block-name={r.block}",
        f"--zone={config.zone}",
        f"--project={config.reservation_project}",
        "--format=json",
    ]


def pools_command(config: StackConfig) -> list[str]:
    """What lists the stack's running node pools, in the JSON `--pools` reads."""
    return [
        *("gcloud", "container", "node-pools", "list"),
        f"--cluster={config.names.cluster}",
        f"--location={config.location}",
        f"--project={config.project}",
        "--format=json",
    ]


def own_pools(text: str, source: str, config: StackConfig) -> dict[str, tuple[str, int]]:
    """The stack's TPU pools that run, from `gcloud container node-pools list --format=json` (GKE's
    NodePool: `name`, `initialNodeCount`, `config.reservationAffinity.values`): each pool's name ->
    (where it is bound: a sub-block's name, or "*" for the whole block; its hosts). Only the pools
    this stack names (settings: `pool_names`)."""
    try:
        listed = bounded_input.load_json(text)
    except bounded_input.InputError as err:
        raise rh.SnapshotError(f"node pools {source} {err}; list them with {' '.join(pools_command(config))}") from None
    if not isinstance(listed, list) or not all(isinstance(p, dict) and p.get("name") for p in listed):
        raise rh.SnapshotError(
            f"node pools {source}: not a list of node pools; list them with {' '.join(pools_command(config))}"
        )
    names = set(config.pool_names())
    found: dict[str, tuple[str, int]] = {}
    for pool in listed:
        if pool["name"] not in names:
            continue
        hosts = int(pool.get("initialNodeCount") or 0)
        values = ((pool.get("config") or {}).get("reservationAffinity") or {}).get("values") or []
        for value in values:
            where = str(value).rsplit("/reservationSubBlocks/", 1)
            found[str(pool["name"])] = (where[1] if len(where) == 2 else "*", hosts)
    return found


def _live_pools(config: StackConfig) -> tuple[str, str] | None:
    if shutil.which("gcloud") is None:
        return None
    done = subprocess.run(pools_command(config), capture_output=True, text=True, check=False, timeout=120)
    return (done.stdout, "gcloud (live)") if done.returncode == 0 else None


def _live(config: StackConfig) -> tuple[str, str] | None:
    """(the JSON gcloud printed, where from), or None when gcloud is missing or cannot read it."""
    if shutil.which("gcloud") is None:
        return None
    done = subprocess.run(capture_command(config), capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        return None
    return done.stdout, "gcloud (live)"


def report(
    stack: str,
    config: StackConfig,
    configs: dict[str, StackConfig],
    snapshot: Path | None,
    pools: Path | None = None,
) -> list[str]:
    r = config.reservation
    if r is None or r.block is None:
        return [f"stack {stack} binds no reservation block: nothing to read"]
    source: tuple[str, str] | None = None
    path = snapshot or (engine.ROOT / r.snapshot if r.snapshot else None)
    if path is not None:
        try:
            source = (bounded_input.read_text(path), str(path))
        except bounded_input.InputError as err:
            raise rh.SnapshotError(f"reservation snapshot {path} {err}") from None
    else:
        source = _live(config)
    bound = list(r.sub_blocks or [])
    if source is None:
        readings = [rh.not_read(name) for name in bound]
        origin = "nothing: no snapshot and no gcloud; capture one with " + " ".join(capture_command(config))
    else:
        snap = rh.read_snapshot(source[0], source[1], r.name, r.block)
        readings = list(snap.readings) + [
            rh.not_read(n) for n in bound if n not in {x.sub_block for x in snap.readings}
        ]
        origin = source[1]
    held = holders(configs, r.name, r.block)
    lines = [
        f"reservation {r.name} block {r.block} in {config.zone} ({config.reservation_project}), read from {origin}"
    ]
    lines += rh.table(readings, held)
    if "*" in held:
        lines.append(f"bound to the whole block (GKE picks the sub-blocks): {', '.join(held['*'])}")
    hosts = config.tpu.vms_per_cube
    # The pools the stack already runs are never created again, so `pulumi up` judges none of them
    # (infra/reservation.py): neither does this, once it knows which run.
    running: dict[str, tuple[str, int]] | None = None
    try:
        listing = (bounded_input.read_text(pools), str(pools)) if pools is not None else _live_pools(config)
    except bounded_input.InputError as err:
        raise rh.SnapshotError(f"node pools {pools} {err}") from None
    if listing is not None:
        running = own_pools(listing[0], listing[1], config)
    else:
        lines.append(
            "the stack's running pools were not read: a pool it already runs is judged here as if new; give "
            f"--pools FILE ({' '.join(pools_command(config))})"
        )
    if r.sub_blocks:
        on = {where: (name, hosts_held) for name, (where, hosts_held) in (running or {}).items()}
        kept = [b for b in bound if b in on]
        for sub_block in kept:
            pool_name, pool_hosts = on[sub_block]
            lines.append(
                f"stack {stack}: sub-block {sub_block}: its pool {pool_name} runs there ({pool_hosts} hosts), "
                "not created again"
            )
        new = [b for b in bound if b not in kept]
        mine = [x for x in readings if x.sub_block in new]
        no_go = [rh.Window(w.start, w.end) for w in r.maintenance_no_go or []]
        verdict = rh.judge("tpu-slicing:reservation.subBlocks", mine, hosts, no_go=no_go, accepted=dict(r.accept or {}))
        if new:
            lines.append(f"stack {stack}: a new pool of {hosts} hosts on each of {', '.join(new)}:")
            lines += [f"  refused: {line}" for line in verdict.refusals.values()]
            if not verdict.refusals:
                lines.append("  no refusal" + ("" if all(x.read for x in mine) else " (not every sub-block was read)"))
    else:
        pools_run = len([1 for where, _ in (running or {}).values() if where == "*"])
        new_pools = max(config.tpu.cubes - pools_run, 0)
        if pools_run:
            lines.append(f"stack {stack}: {pools_run} of its pools run on the block, not created again")
        line = rh.block_refusal("tpu-slicing:reservation.block", r.block, readings, hosts * new_pools)
        if new_pools:
            lines.append(f"stack {stack}: {new_pools} new pools of {hosts} hosts on the block: {line or 'no refusal'}")
    return lines


def command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m plan reservation",
        description="The block a stack binds: each sub-block's health, free and used hosts, the stacks that "
        "bind it and its maintenance; then whether the stack's new pools would be refused.",
    )
    parser.add_argument("--stack", default="dev")
    parser.add_argument(
        "--snapshot",
        type=Path,
        default=None,
        help="a file of `gcloud compute reservations sub-blocks list ... --format=json` "
        "(default: the stack's reservation.snapshot, else gcloud when installed)",
    )
    parser.add_argument(
        "--pools",
        type=Path,
        default=None,
        help="a file of `gcloud container node-pools list ... --format=json`: the pools the stack runs, "
        "judged as kept, not new (default: gcloud when installed)",
    )
    args = parser.parse_args(argv)
    configs, problems = stacks.load_stacks()
    if args.stack not in configs:
        wrong = [str(p) for p in problems if args.stack in p.stacks]
        raise SystemExit(f"error: stack {args.stack}: " + ("; ".join(wrong) or "no such stack file"))
    print("\n".join(report(args.stack, configs[args.stack], configs, args.snapshot, args.pools)))
    return 0
