"""The fleet table (plan/fleet.py): every stack at a glance, agreeing with each stack's own plan."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from plan import engine, fleet, impact, stacks
from tests.conftest import config_with, dev_raw, merged

PRICING = {"currency": "USD", "chipHour": {"tpu7x": {"reserved": 2.0}, "v5e": {"onDemand": 1.2}}, "source": "example"}


def test_every_committed_stack_has_its_row() -> None:
    lines, wrong = fleet.report()
    assert not wrong
    assert lines[0].split()[:2] == ["stack", "block"]
    names = sorted(stacks.stack_files())
    assert [line.split()[0] for line in lines[1 : 1 + len(names)]] == names
    # dev and dev-b share block-0, whose size both give; unpriced, it is said so.
    assert lines[1 + len(names) :] == [
        "block example-tpu7x-reservation/block-0 (dev, dev-b): not priced as one (a size and one price each)",
        "no conflicts between the stacks",
    ]


@pytest.mark.parametrize("stack", sorted(stacks.stack_files()))
def test_a_row_agrees_with_the_stacks_own_plan(stack: str) -> None:
    """The fleet runs no program; what it says of chips is what the full plan says."""
    config = config_with(stack=stack)
    facts = impact.facts(engine.run_stack(stack), config, lambda urn: urn)
    row = fleet.row(stack, config)
    assert (row.reserved, row.held) == (facts["usage"]["chips"]["total"], facts["usage"]["chips"]["inUse"])
    pending = {w["name"] for w in facts["workloads"] if w["priority"] == "high" and w["verdict"] != "admitted"}
    assert {name.split(" (")[0] for name in row.pending_high} == pending


def test_a_priced_stack_shows_its_monthly_and_idle_cost() -> None:
    row = fleet.row("dev", config_with({"pricing": PRICING}))
    hours = 730  # domain/cost.py HOURS_PER_MONTH
    assert row.monthly == f"USD {row.reserved * 2.0 * hours:,.0f}"
    assert row.idle == f"USD {(row.reserved - row.held) * 2.0 * hours:,.0f}"


def test_a_shared_block_is_priced_once_over_its_stacks() -> None:
    """dev and dev-b hold 2 cubes each of block-0 (4 cubes of 64 chips). dev's serving roles hold 64
    of its 128 chips; dev-b serves nothing and its checks hold all 128 of its own: the block's 256
    chips are 64 serving, 128 in checks, 64 idle in dev's pools, none unclaimed."""
    configs = {name: config_with({"pricing": PRICING}, stack=name) for name in ("dev", "dev-b")}
    assert fleet.block_totals(configs) == [
        "block example-tpu7x-reservation/block-0 (dev, dev-b):",
        "  the block: 256 chips, USD 373,760 a month whatever uses them",
        "       64 chips held by serving roles: USD 93,440",
        "      128 chips held by slicing checks: USD 186,880",
        "       64 chips in the stacks' pools, held by nothing: USD 93,440",
        "        0 chips in no stack's pool: USD 0",
    ]
    alone = fleet.block_totals({"dev": configs["dev"]})
    assert alone[-1] == "      128 chips in no stack's pool: USD 186,880"


def test_two_stacks_claiming_one_sub_block_are_a_conflict_and_fail(tmp_path: Path) -> None:
    for name in ("dev", "dev-b"):
        shutil.copy(engine.ROOT / f"Pulumi.{name}.yaml", tmp_path / f"Pulumi.{name}.yaml")
    text = (tmp_path / "Pulumi.dev-b.yaml").read_text()
    (tmp_path / "Pulumi.dev-b.yaml").write_text(text.replace("sub-block-2", "sub-block-0"))
    lines, wrong = fleet.report(tmp_path)
    assert wrong and any(
        line.startswith("CONFLICT dev and dev-b: reservation.subBlocks: both claim sub-block 'sub-block-0'")
        for line in lines
    )


def test_an_unknown_stack_is_refused_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "plan", "fleet", "--stack", "nope"],
        cwd=engine.ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and done.stderr.startswith("error: no stack file for nope; allowed: dev, dev-b")


def test_the_fleet_diff_puts_each_stacks_headline_first() -> None:
    from plan import document

    def documented(overrides: dict[str, object]) -> dict[str, object]:
        config = config_with(overrides)
        raw, secrets = dev_raw()
        return document.document(engine.run(merged(overrides, raw), stack="dev", secret_keys=secrets), config)

    before, after = documented({}), documented({"serving": {"decode": {"replicas": 2}}})
    same = document.diff_report(before, before, "Stack `dev-b`")
    changed = document.diff_report(before, after, "Stack `dev`")
    text = fleet.diff_markdown("origin/main -> working tree", [("dev", changed), ("dev-b", same)])
    lines = text.splitlines()
    assert lines[0] == "## Fleet plan diff: origin/main -> working tree"
    headline = changed["markdown"].split("\n")[2]
    assert lines[2] == f"- **dev**: {headline.lstrip('- ')}" and "TPU" in headline
    assert lines[3] == "- **dev-b**: No changes."
    assert "<details><summary>dev</summary>" in text and "<details><summary>dev-b</summary>" in text
    assert changed["markdown"].rstrip() in text


def test_the_fleet_diff_runs_the_base_revisions_code() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "plan", "fleet", "--diff", "HEAD", "--stack", "jetstream-v5e"],
        cwd=engine.ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:3] == [
        "## Fleet plan diff: HEAD -> working tree",
        "",
        "- **jetstream-v5e**: No changes.",
    ]
