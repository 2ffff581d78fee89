"""Offline plan: `python -m plan --stack dev` prints what the stack would create.

Needs no Pulumi CLI and no cloud credentials: it runs this program under the
Pulumi SDK's mock runtime with the stack file's configuration.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from plan import engine, manifests, render
from settings.loader import ConfigError, load


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m plan", description=__doc__)
    parser.add_argument("--stack", default="dev", help="stack name: reads Pulumi.<stack>.yaml (default dev)")
    parser.add_argument(
        "--preview",
        action="store_true",
        help="plan a brand-new stack: values only the cloud knows stay unknown, as in `pulumi preview`",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="where to write the Kubernetes objects as YAML (default build/plan/<stack>)",
    )
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", category=DeprecationWarning)

    path = engine.stack_file(args.stack)
    if not path.exists():
        print(f"error: no stack file {path.name} in {path.parent}", file=sys.stderr)
        return 2
    raw, secret_keys = engine.read_stack_config(path)
    try:
        config = load(raw, stack=args.stack, project=raw.get("gcp:project"), secret_keys=secret_keys)
    except ConfigError as err:
        print(f"error in {path.name}: {err}", file=sys.stderr)
        return 2
    result = engine.run(raw, stack=args.stack, secret_keys=secret_keys, preview=args.preview)
    out = Path(args.out) if args.out else engine.ROOT / "build" / "plan" / args.stack
    manifests.write(result, out)
    shown = out.relative_to(engine.ROOT) if out.is_relative_to(engine.ROOT) else out
    sys.stdout.write(render.render(result, config, manifests_dir=str(shown)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
