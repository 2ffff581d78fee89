"""What the real host's `pulumi-language-python-exec` does: configure the SDK, run the program.

Follows sdk/python/cmd/pulumi-language-python-exec (pulumi v3.274.0): the same flags, config
from PULUMI_CONFIG / PULUMI_CONFIG_SECRET_KEYS, a fresh event loop, the program run inside
`run_in_stack`, and exit codes 0 (done), 1 (RunError) and 32 (error already reported).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import runpy
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor

import pulumi
import pulumi.runtime

BAIL = 32  # the host reports this exit code as a bail: the error was already shown


def main() -> int:
    parser = argparse.ArgumentParser()
    for flag in ("project", "stack", "parallel", "dry_run", "pwd", "monitor", "engine", "tracing"):
        parser.add_argument(f"--{flag}")
    parser.add_argument("--organization")
    parser.add_argument("--root_directory")
    parser.add_argument("PROGRAM")
    parser.add_argument("ARGS", nargs="*")
    args = parser.parse_args()

    pulumi.runtime.set_all_config(pulumi.runtime.get_config_env(), pulumi.runtime.get_config_secret_keys_env())
    parallel = int(args.parallel or 0)
    pulumi.runtime.configure(
        pulumi.runtime.Settings(
            project=args.project,
            stack=args.stack,
            monitor=args.monitor,
            engine=args.engine,
            parallel=parallel,
            dry_run=args.dry_run == "true",
            organization=args.organization,
            root_directory=args.root_directory,
        )
    )
    sys.argv = [args.PROGRAM, *args.ARGS]
    if args.pwd:
        os.chdir(args.pwd)
    loop = asyncio.new_event_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=max(parallel, 1) * 4))
    asyncio.set_event_loop(loop)
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    try:

        def program() -> None:
            runpy.run_path(args.PROGRAM, run_name="__main__")

        loop.run_until_complete(pulumi.runtime.run_in_stack(program))
        return 0
    except pulumi.RunError as err:
        pulumi.log.error(str(err))
        return 1
    except Exception:  # report every failure of the program, as the real script does
        pulumi.log.error("Program failed with an unhandled exception:\n" + traceback.format_exc())
        return BAIL
    finally:
        loop.close()
        sys.stdout.flush()
        sys.stderr.flush()


if __name__ == "__main__":
    sys.exit(main())
