"""`python -m operate rollout`: preview every stack, then apply them in waves, canary first
(operate/rollout.py). Needs the Pulumi CLI and each stack's backend and credentials, as `pulumi up`.
Before its first step it runs the fleet's check (`make stacks`, plan/stacks.py) on every stack file
and refuses to start on an invalid one or on stacks that contradict each other."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from operate import rollout
from plan import stacks

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m operate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    roll = sub.add_parser("rollout", help="preview all, then up in waves, canary first")
    roll.add_argument(
        "--stack",
        action="append",
        default=[],
        help="this stack (repeatable; default: every stack file's stack that exists in the backend)",
    )
    roll.add_argument("--create", action="store_true", help="create a named stack the backend does not hold")
    roll.add_argument("--canary", help="applied first and alone (default: the first stack by name)")
    roll.add_argument("--parallel", type=int, default=2, help="stacks previewed or applied at once (default 2)")
    roll.add_argument("--keep-going", action="store_true", help="after a failed wave, go on with the next")
    args = parser.parse_args(argv)
    known = sorted(stacks.stack_files())
    # Every stack file, not only those chosen: a chosen stack may contradict one already up.
    lines, problems = stacks.report(ROOT)
    if problems:
        print("\n".join(lines), file=sys.stderr)
        print("error: the stacks contradict each other or do not load (above); nothing was previewed", file=sys.stderr)
        return 2
    configs, _ = stacks.load_stacks(ROOT)
    try:
        deployed = rollout.deployed_stacks(ROOT)
    except Exception as err:  # the CLI could not list the backend: say so, run nothing
        print(f"error: cannot list the stacks of the backend ({' '.join(str(err).split())[:300]})", file=sys.stderr)
        return 2
    try:
        chosen = rollout.targets(
            known, deployed, {name: c.project for name, c in configs.items()}, args.stack, args.create
        )
    except rollout.TargetError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        outcomes = rollout.rollout(
            rollout.AutomationRunner(ROOT, create=args.create),
            chosen,
            canary=args.canary,
            parallel=args.parallel,
            keep_going=args.keep_going,
        )
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print("\n".join(rollout.table(outcomes)))
    for failure in rollout.failures(outcomes):
        print(f"\n{failure}")
    return 0 if all(o.result == "succeeded" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
