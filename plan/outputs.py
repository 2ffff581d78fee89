"""Where the plan's commands may write: never onto the checkout, never outside the folder given.

Every path a command writes (`--json`, `--output`, `--mermaid`, `--dot`, `--image`, `--out`) is
judged where it resolves, symbolic links followed, before anything is planned:

- never onto a file git tracks, in this checkout or any other repository, and never into a
  repository's `.git`; the one exception is a generated file of `GENERATED`, and only from the
  command that generates it (`make docs`, `make schema`);
- never onto a file named as Pulumi names its project, stack, policy-pack and plugin files
  (`PULUMI_FILE`), tracked or not, new or not, `--force` or not: Pulumi would read it as configuration;
- never over an existing file the plan did not write, or one changed since it did, unless `--force`:
  what the plan wrote is known from its records in build/plan-outputs/ (`record`), one per file with the
  sha256 of what it wrote, so a file written by hand, by another tool or edited after the plan is kept;
- a file is a new or regular file, never a folder, a FIFO or a device; its folder must exist,
  except under the checkout's `build/` (the plan's own, ignored by git), which is created;
- an `--out` folder holds no file git tracks and is not the checkout or a folder above it; each
  object file goes directly into it (`inside`).

A refusal is one line naming the option, the path and what is allowed.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from plan.engine import ROOT


def _build() -> Path:
    """The plan's own folder, where it resolves (build/ may be a link to a larger disk)."""
    return (ROOT / "build").resolve()


@dataclass(frozen=True)
class Generator:
    """The one command that regenerates a tracked file: `python -m plan <command> --stack <stack> <option>`."""

    command: str
    stack: str | None  # None: the command reads no stack
    option: str
    target: str = "docs"  # the make target that runs it

    def __str__(self) -> str:
        stack = f" --stack {self.stack}" if self.stack is not None else ""
        return f"`python -m plan {self.command}{stack} {self.option} ...` (make {self.target})"


# Tracked files the plan regenerates on purpose; tests/test_plan_review.py fails when one is stale.
GENERATED: Mapping[str, Generator] = {
    "docs/dev-graph.mmd": Generator("graph", "dev", "--mermaid"),
    "docs/dev-graph.svg": Generator("graph", "dev", "--image"),
    "docs/stack-file.schema.json": Generator("schema", None, "--out", target="schema"),
    "docs/configuration-reference.md": Generator("schema", None, "--reference", target="schema"),
}


class OutputError(ValueError):
    pass


# The names Pulumi reads as a project, stack, policy-pack or plugin file: `Pulumi` (or PulumiPolicy,
# PulumiPlugin) with one of encoding.Exts, `.json`, `.yaml`, `.yml`, and a stack file is
# `Pulumi.<stack><the project file's extension>` (pulumi/pulumi sdk/go/common/workspace/paths.go,
# ProjectStackPath and findProjectInDir; sdk/go/common/encoding/marshal.go, Exts).
PULUMI_FILE = re.compile(r"Pulumi(Policy|Plugin)?(\.[^/]*)?\.(json|yaml|yml)", re.IGNORECASE)


def _ledger() -> Path:
    """Where the plan records what it wrote: one file per output, named by its path's hash."""
    return _build() / "plan-outputs"


def _record_of(path: Path) -> Path:
    return _ledger() / f"{hashlib.sha256(str(path).encode()).hexdigest()[:32]}.sha256"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def record(path: Path) -> None:
    """Note that the plan wrote `path` as it is now (`sha256sum` format), replacing any earlier record."""
    entry = _record_of(path)
    entry.parent.mkdir(parents=True, exist_ok=True)
    partial = entry.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(f"{_digest(path)}  {path}\n")
    partial.replace(entry)


def _written_by_plan(path: Path) -> str | None:
    """None when the plan wrote `path` as it is; otherwise why it is not the plan's."""
    try:
        recorded = _record_of(path).read_text().split("  ", 1)
    except OSError:
        return "exists and the plan did not write it"
    if len(recorded) != 2 or recorded[1].rstrip("\n") != str(path) or recorded[0] != _digest(path):
        return "was changed since the plan wrote it"
    return None


def _git_lists(folder: Path, *pathspec: str) -> bool:
    """True when git, run in `folder`, lists a tracked file for `pathspec` (every file below when empty).
    Outside a repository, or without git, nothing is tracked."""
    try:
        done = subprocess.run(
            ["git", "--literal-pathspecs", "-C", str(folder), "ls-files", "-z", "--", *pathspec],
            capture_output=True,
            check=False,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and bool(done.stdout)


def _resolved(path: str | Path, option: str) -> Path:
    resolved = Path(path).resolve()
    if ".git" in resolved.parts:
        raise OutputError(f"{option} {path}: is inside a git repository's .git folder; allowed: a path outside it")
    return resolved


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def file(path: str | Path, option: str, *, generator: Generator | None = None, force: bool = False) -> Path:
    """Where `option` may write `path`: its resolved form; OutputError when it may not.

    `force`: overwrite an existing file the plan did not write (never a tracked or a Pulumi file)."""
    resolved = _resolved(path, option)
    named = f"{option} {path}"
    if resolved.is_dir():
        raise OutputError(f"{named}: is a folder; allowed: a file name")
    if resolved.exists() and not resolved.is_file():
        raise OutputError(f"{named}: is not a regular file; allowed: a new or regular file")
    parent = resolved.parent
    if not parent.is_dir() and not resolved.is_relative_to(_build()):
        what = "is not a folder" if parent.exists() else "does not exist"
        raise OutputError(f"{named}: the folder {parent} {what}; allowed: a file in an existing folder or under build/")
    relative = _shown(resolved)
    if generator is not None and GENERATED.get(relative) == generator:
        return resolved  # the committed generated file, rewritten by its own generator (make docs/schema)
    if parent.is_dir() and _git_lists(parent, resolved.name):
        also = f"; {relative} is regenerated only by {GENERATED[relative]}" if relative in GENERATED else ""
        raise OutputError(
            f"{named}: {relative} is a file git tracks, and the plan never writes onto the checkout (--force or not); "
            f"allowed: a path git does not track, e.g. under build/{also}"
        )
    if PULUMI_FILE.fullmatch(resolved.name):
        raise OutputError(
            f"{named}: {relative} is named as a Pulumi project or stack file, which Pulumi would read as "
            "configuration; the plan never writes one (--force or not); allowed: another file name, e.g. under build/"
        )
    if resolved.exists() and not force:
        why = _written_by_plan(resolved)
        if why is not None:
            raise OutputError(
                f"{named}: {relative} {why}; allowed: a new file, one the plan wrote, or --force to overwrite it"
            )
    return resolved


def folder(path: str | Path, option: str = "--out") -> Path:
    """Where `option` may write its objects: the resolved folder; OutputError when it may not."""
    resolved = _resolved(path, option)
    named = f"{option} {path}"
    if resolved.exists() and not resolved.is_dir():
        raise OutputError(f"{named}: is not a folder; allowed: a new or empty folder, or one a plan wrote")
    if not resolved.exists() and not resolved.parent.is_dir() and not resolved.is_relative_to(_build()):
        raise OutputError(
            f"{named}: the folder {resolved.parent} does not exist; "
            "allowed: a folder in an existing one or under build/"
        )
    if ROOT.is_relative_to(resolved):
        raise OutputError(f"{named}: holds the checkout; allowed: a folder of its own, e.g. under build/")
    if resolved.is_dir() and _git_lists(resolved):
        raise OutputError(f"{named}: holds files git tracks; allowed: a new or empty folder, or one a plan wrote")
    return resolved


def inside(directory: Path, name: str) -> Path:
    """`directory / name` for a plain file name: nothing a plan writes leaves the folder it was given."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise OutputError(f"{name!r} is not a file name of its own; the plan writes only into {directory}")
    return directory / name


def distinct(paths: Mapping[str, Path]) -> None:
    """Two outputs of one command never land on the same file."""
    seen: dict[Path, str] = {}
    for option, path in paths.items():
        if path in seen:
            raise OutputError(f"{seen[path]} and {option} both write {path}; allowed: one file for each")
        seen[path] = option


def write_text(path: Path, text: str) -> None:
    """Write a file `file()` allowed, and record it as the plan's; under build/ its folders are created."""
    if path.is_relative_to(_build()):
        path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    record(path)
