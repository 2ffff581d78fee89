"""Offline plan: what a stack would create, without a Pulumi CLI or cloud credentials.

    python -m plan [--stack dev] [--preview] [--out DIR] [--json FILE] [--force] [--benchmark RESULT.json]
                   [--unhealthy-cube N]
    python -m plan diff [--stack dev] --base REV [--head REV] [--json FILE] [--fail-on-pending-high-priority]
                        [--trust-revision] [--force]          (or: diff OLD.json NEW.json)
    python -m plan graph [--stack dev] [--mermaid FILE] [--dot FILE] [--image FILE.svg] [--force]
    python -m plan stacks
    python -m plan schema [--out FILE] [--reference FILE.md] [--force]
    python -m plan benchmark compare BEFORE.json AFTER.json
    python -m plan fleet [--stack NAME ...]
    python -m plan drift --stack NAME --preview PREVIEW.json --policy ANALYZE.ndjson [--summary F] [--issue F]

It runs this program under the Pulumi SDK's mock runtime with the stack file's
configuration. A stack name is one the Pulumi CLI accepts; no command writes onto a file git
tracks, a Pulumi project or stack file, or outside the folder it was given, nor over a file it did
not write unless --force (plan/outputs.py, docs/review.md "Where the plan writes"). `diff --base`
and `--head` run the code of another git revision (docs/review.md "What a change costs").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import warnings
from importlib import metadata
from pathlib import Path
from typing import Any

import pulumi

from domain import bounded_input, reservation_health
from plan import (
    benchmark,
    document,
    drift,
    engine,
    fleet,
    graph,
    manifests,
    outputs,
    render,
    reservation,
    stacks,
    unhealthy,
)
from settings import esc_environment
from settings.loader import ConfigError, load
from settings.model import StackConfig
from settings.reference import configuration_reference
from settings.schema import stack_file_schema
from settings.stack_file import StackFileError, check_stack_name

COMMANDS = ("diff", "graph", "stacks", "schema", "reservation", "benchmark", "fleet", "drift")


FORCE_HELP = (
    "overwrite an existing file (or object file under --out) that the plan did not write or that was changed "
    "since; never a file git tracks or a Pulumi project or stack file"
)


def _stack(name: str) -> str:
    """A `--stack` the Pulumi CLI accepts, refused in one line otherwise (before any path is made of it)."""
    try:
        check_stack_name(name)
    except StackFileError as err:
        raise SystemExit(f"error: --stack: {err}") from None
    if name in (".", ".."):
        # The CLI accepts them, but build/plan/<stack> would then be build/plan itself or build/.
        raise SystemExit(
            f"error: --stack: stack name {name!r} names no folder of its own for build/plan/<stack>; "
            "allowed: a name with at least one letter, digit, '-' or '_'"
        )
    return name


def _revision(revision: str | None, option: str) -> str | None:
    """A git revision, never an option in disguise: git would read `--output=...` as one."""
    if revision is not None and (not revision or revision.startswith("-")):
        raise SystemExit(
            f"error: {option} {revision!r} is not a revision; allowed: a commit, branch or tag, e.g. origin/main"
        )
    return revision


# Whose code `diff --base/--head` runs without --trust-revision: what is in the history of the
# checkout (HEAD: its code is what runs this command already) or of origin's default branch
# (refs/remotes/origin/HEAD, as `git clone` sets it, else origin/main), which only the project's
# maintainers merge into. Never a ref because it exists: a pull request fetched into a local branch
# (`git fetch origin pull/1/head:pr-1`) or under refs/remotes/origin/ (`origin/pr/1`, a fetch refspec
# away) is a stranger's code until a person has read it, and then runs with --trust-revision. Nor
# tags (`git fetch` follows a fork's tags by itself), other remotes, FETCH_HEAD or a bare commit.
DEFAULT_BRANCH_FALLBACK = "refs/remotes/origin/main"


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=engine.ROOT, capture_output=True, text=True, check=False)


def _default_branch() -> str | None:
    """origin's default branch as this clone knows it: refs/remotes/origin/HEAD's target, else origin/main."""
    pointed = _git("symbolic-ref", "--quiet", "refs/remotes/origin/HEAD")
    ref = pointed.stdout.strip() if pointed.returncode == 0 else DEFAULT_BRANCH_FALLBACK
    return ref if _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").returncode == 0 else None


def _trusted(revision: str, option: str) -> None:
    """Refuse (one line) a revision whose code `diff` would run unless HEAD's or origin's default
    branch's history holds it."""
    found = _git("rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    if found.returncode:
        _tree(revision)  # a revision git cannot read: the usual refusal
        raise SystemExit(
            f"error: {option} {revision!r} is a tree, not a commit, so no history can vouch for the code it would "
            "run; allowed: a commit in HEAD's history or origin's default branch, or --trust-revision once you "
            "have read its code"
        )
    commit = found.stdout.strip()
    default = _default_branch()
    for trusted in ("HEAD", default):
        if trusted and not _git("merge-base", "--is-ancestor", commit, trusted).returncode:
            return
    where = default.removeprefix("refs/remotes/") if default else "origin's default branch (not fetched)"
    raise SystemExit(
        f"error: {option} {revision!r} ({commit[:12]}) is neither in HEAD's history nor in {where}, and `plan diff` "
        "would run its code; allowed: a revision one of those holds, or --trust-revision once you have read its code"
    )


def _document_file(path: str) -> dict[str, Any]:
    try:
        loaded = bounded_input.load_json(bounded_input.read_text(Path(path)))
    except bounded_input.InputError as err:
        raise SystemExit(f"error: cannot read the plan document {path}: it {err}") from None
    if not isinstance(loaded, dict):
        raise SystemExit(f"error: {path} is not a plan document (a JSON object from `python -m plan --json`)")
    return loaded


def _load(stack: str) -> tuple[dict[str, Any], list[str], StackConfig]:
    path = engine.stack_file(stack)
    if not path.exists():
        raise SystemExit(f"error: no stack file {path.name} in {path.parent}")
    try:
        raw, secret_keys = engine.read_stack_config(path)
    except StackFileError as err:
        print(f"error in {err}", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        config = load(raw, stack=stack, project=raw.get("gcp:project"), secret_keys=secret_keys)
    except ConfigError as err:
        print(f"error in {path.name}: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    return raw, secret_keys, config


def show(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m plan", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stack", default="dev", help="stack name: reads Pulumi.<stack>.yaml (default dev)")
    parser.add_argument(
        "--preview",
        action="store_true",
        help="plan a brand-new stack: values only the cloud knows stay unknown, as in `pulumi preview`",
    )
    parser.add_argument(
        "--out", default=None, help="where to write the Kubernetes objects as YAML (default build/plan/<stack>)"
    )
    parser.add_argument("--json", default=None, help="also write the plan as a sorted JSON document to this file")
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)
    parser.add_argument(
        "--reservation-snapshot",
        type=Path,
        default=None,
        help="read the reservation from this file of `gcloud compute reservations sub-blocks list ... "
        "--format=json` (default: the stack's reservation.snapshot; without one it is not read)",
    )
    parser.add_argument(
        "--unhealthy-cube",
        type=int,
        default=None,
        metavar="N",
        help="add the admission preview with cube N's hosts unhealthy (cordoned, tainted or NotReady)",
    )
    parser.add_argument(
        "--benchmark",
        type=Path,
        default=None,
        help="a result.json of the benchmark Job: adds the cost of a million output tokens at each measured rate",
    )
    args = parser.parse_args(argv)
    measured = benchmark.read(args.benchmark) if args.benchmark is not None else None
    stack = _stack(args.stack)
    given = Path(args.out) if args.out else engine.ROOT / "build" / "plan" / stack
    out = outputs.folder(given)
    if not args.out and out != (engine.ROOT / "build" / "plan").resolve() / stack:
        raise SystemExit(f"error: build/plan/{stack} leads to {out}; allowed: the plan's own folder under build/plan")
    json_path = outputs.file(args.json, "--json", force=args.force) if args.json else None
    raw, secret_keys, config = _load(stack)
    if args.unhealthy_cube is not None and (refused := unhealthy.problem(config, args.unhealthy_cube)):
        raise SystemExit(f"error: {refused}")
    result = engine.run(
        raw, stack=stack, secret_keys=secret_keys, preview=args.preview, snapshot=args.reservation_snapshot
    )
    try:
        # The default folder is the plan's own (under build/); a folder given with --out is
        # written only when it is empty or an earlier plan's.
        manifests.write(result, out, owned=not args.out, force=args.force)
    except manifests.NotOwnedError as err:
        raise SystemExit(f"error: {err}") from None
    if json_path is not None:
        outputs.write_text(json_path, document.dumps(document.document(result, config)))
    shown = given.relative_to(engine.ROOT) if given.is_relative_to(engine.ROOT) else given
    sys.stdout.write(render.render(result, config, manifests_dir=str(shown)))
    if args.unhealthy_cube is not None:
        sys.stdout.write("\n" + "\n".join(unhealthy.lines(config, args.unhealthy_cube)) + "\n")
        sys.stdout.write("\n" + "\n".join(unhealthy.failure_lines(config, args.unhealthy_cube)) + "\n")
    if measured is not None:
        sys.stdout.write("\n" + "\n".join(benchmark.cost_lines(config, measured)) + "\n")
    return 0


# Plan documents of git trees, by tree hash and environment: a tree plans the same every time.
CACHE = engine.ROOT / "build" / "plan-cache"
_CACHE_DISTRIBUTIONS = ("pulumi", "pulumi-gcp", "pulumi-kubernetes", "pulumi-command", "pulumi-policy", "pydantic")


def _cache_key(tree: str, stack: str) -> str:
    parts = [tree, stack, str(document.FORMAT_VERSION), sys.version]
    for dist in _CACHE_DISTRIBUTIONS:
        try:
            parts.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist}=-")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _tree(revision: str) -> str:
    found = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{revision}^{{tree}}"],
        cwd=engine.ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode:
        raise SystemExit(f"error: cannot read revision {revision!r}: not a commit or tree in this repository")
    return found.stdout.strip()


def _opened_environments() -> str:
    """$TPU_SLICING_ESC_VALUES with absolute paths ("" when unset); refused in one line when malformed."""
    try:
        given = esc_environment.locations_from(os.environ)
    except esc_environment.EscValuesError as err:
        raise SystemExit(f"error: {err}") from None
    return " ".join(f"{name}={path.absolute()}" for name, path in given.items())


class _PlanAt:
    """Plan `stack` as the code and stack file were at a git revision (read-only: no checkout).

    The plan runs in a child process started at once, so that two revisions (or a revision and
    the working tree) are planned side by side; `document()` waits for it. A tree planned before
    (same tree hash, stack and installed SDKs) is read from build/plan-cache/ unless `cache` is off.
    """

    def __init__(self, revision: str, stack: str, *, cache: bool = True) -> None:
        self.revision, self.stack = revision, stack
        self.tree = _tree(revision)
        # Opened ESC environments are not in the tree: a plan made with them is never cached, and
        # the child, which runs in another folder, is handed their files' absolute paths.
        opened = _opened_environments()
        cache = cache and not opened
        self._cached = CACHE / f"{_cache_key(self.tree, stack)}.json" if cache else None
        self._process: subprocess.Popen[str] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._missing = False
        if self._cached and self._cached.exists():
            return
        self._tmp = tempfile.TemporaryDirectory()
        tmp = Path(self._tmp.name)
        self._target = tmp / "plan.json"
        archive = subprocess.run(
            ["git", "archive", "--format=tar", self.tree], cwd=engine.ROOT, capture_output=True, check=False
        )
        if archive.returncode:
            self._tmp.cleanup()
            raise SystemExit(f"error: cannot read revision {revision!r}: {archive.stderr.decode().strip()}")
        tar_path = tmp / "tree.tar"
        tar_path.write_bytes(archive.stdout)
        tree = tmp / "tree"
        with tarfile.open(tar_path) as tar:
            tar.extractall(tree, filter="data")
        if not (tree / f"Pulumi.{stack}.yaml").exists():
            self._missing = True
            return
        command = [sys.executable, "-m", "plan", "--stack", stack, "--out", str(tmp / "objects")]
        self._process = subprocess.Popen(
            [*command, "--json", str(self._target)],
            cwd=tree,
            env=os.environ | {esc_environment.VARIABLE: opened} if opened else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def document(self) -> dict[str, Any]:
        if self._tmp is None and self._cached is not None:
            cached: dict[str, Any] = json.loads(self._cached.read_text())
            return cached
        try:
            if self._missing or self._process is None:
                return document.empty(self.stack)
            stdout, stderr = self._process.communicate()
            if self._process.returncode or not self._target.exists():
                hint = " (that revision predates `python -m plan --json`)" if "--json" in stderr else ""
                raise SystemExit(f"error: planning {self.stack} at {self.revision} failed{hint}:\n{stderr or stdout}")
            text = self._target.read_text()
            if self._cached is not None:
                self._cached.parent.mkdir(parents=True, exist_ok=True)
                partial = self._cached.with_suffix(f".{os.getpid()}.tmp")
                partial.write_text(text)
                partial.replace(self._cached)
            loaded: dict[str, Any] = json.loads(text)
            return loaded
        finally:
            if self._tmp is not None:
                self._tmp.cleanup()


def _document_at(revision: str, stack: str) -> dict[str, Any]:
    return _PlanAt(revision, stack).document()


def _current_document(stack: str, existing: frozenset[tuple[str, str]] = frozenset()) -> dict[str, Any]:
    if not engine.stack_file(stack).exists():
        return document.empty(stack)
    raw, secret_keys, config = _load(stack)
    return document.document(engine.run(raw, stack=stack, secret_keys=secret_keys, existing=existing), config)


def _created(doc: dict[str, Any]) -> frozenset[tuple[str, str]]:
    """(type, name) of every resource a plan document creates."""
    return frozenset((str(r.get("type")), str(r.get("name"))) for r in (doc.get("resources") or {}).values())


# Exit status of `diff --fail-on-pending-high-priority` when a high-priority workload becomes pending.
PENDING_HIGH_PRIORITY_EXIT = 3


def diff(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m plan diff",
        description="Markdown diff of two plans, with what the change costs (TPU use, admission, time to "
        "serving, policy verdicts): two JSON documents, or a stack at two git revisions (the head defaults "
        "to the working tree). A revision is planned by RUNNING THAT REVISION'S OWN CODE (read with git "
        "archive, run with python -m plan in a child process, with your environment), as checking it out "
        "and running make plan would; so a revision that no local branch, no branch of origin and not HEAD "
        "reaches is refused unless --trust-revision.",
    )
    parser.add_argument("documents", nargs="*", help="OLD.json NEW.json")
    parser.add_argument("--stack", default="dev")
    parser.add_argument(
        "--base", help="git revision to compare against, e.g. origin/main (its code runs: see --trust-revision)"
    )
    parser.add_argument(
        "--head", help="git revision to compare (default: the working tree; its code runs: see --trust-revision)"
    )
    parser.add_argument(
        "--trust-revision",
        action="store_true",
        help="run the code of a --base/--head that no local branch, no branch of origin and not HEAD reaches "
        "(e.g. a fetched pull request): only after reading it",
    )
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)
    parser.add_argument("--output", help="write the Markdown here instead of stdout")
    parser.add_argument(
        "--json",
        dest="json_out",
        metavar="FILE",
        help="also write the diff as JSON (noop, tpuCost, usage, workloads, highPriorityPending, policy, ...)",
    )
    parser.add_argument(
        "--no-cache", action="store_true", help="plan every revision again (not from build/plan-cache/)"
    )
    parser.add_argument(
        "--fail-on-pending-high-priority",
        action="store_true",
        help=f"exit {PENDING_HIGH_PRIORITY_EXIT} when the change makes a high-priority workload pending "
        "(after writing everything)",
    )
    args = parser.parse_args(argv)
    stack = _stack(args.stack)
    base_revision, head_revision = _revision(args.base, "--base"), _revision(args.head, "--head")
    written = {
        option: outputs.file(path, option, force=args.force)
        for option, path in (("--output", args.output), ("--json", args.json_out))
        if path is not None
    }
    outputs.distinct(written)
    if args.documents:
        if len(args.documents) != 2 or args.base:
            parser.error("give OLD.json NEW.json, or --base REV")
        old, new = (_document_file(p) for p in args.documents)
        title = f"Plan diff: {args.documents[0]} -> {args.documents[1]}"
    else:
        if not base_revision:
            parser.error("give OLD.json NEW.json, or --base REV")
        if not args.trust_revision:
            for option, revision in (("--base", base_revision), ("--head", head_revision)):
                if revision is not None:
                    _trusted(revision, option)
        base = _PlanAt(base_revision, stack, cache=not args.no_cache)
        head = None
        if head_revision and _tree(head_revision) != base.tree:
            head = _PlanAt(head_revision, stack, cache=not args.no_cache)
        planned: dict[str, Any] | None = None  # None: the head is the base's tree, which plans the same
        try:
            if head is not None:
                planned = head.document()
        finally:
            old = base.document()  # waits for (and cleans up after) the base's plan either way
        if head is None and not head_revision:
            # What the base already creates runs in the head: as `pulumi up` would, the head's plan
            # runs no before_create hook for it (a pool on a sub-block that turned DEGRADED is kept).
            planned = _current_document(stack, existing=_created(old))
        new = old if planned is None else planned
        title = f"Plan diff for stack `{stack}`: {base_revision} -> {head_revision or 'working tree'}"
    report = document.diff_report(old, new, title)
    text = report["markdown"]
    if "--output" in written:
        outputs.write_text(written["--output"], text)
    else:
        sys.stdout.write(text)
    if "--json" in written:
        outputs.write_text(written["--json"], json.dumps(report, indent=2, sort_keys=True) + "\n")
    if args.fail_on_pending_high_priority and report["highPriorityPending"]:
        names = ", ".join(report["highPriorityPending"])
        print(f"error: the change makes high-priority workload(s) pending: {names}", file=sys.stderr)
        return PENDING_HIGH_PRIORITY_EXIT
    return 0


def fleet_command(argv: list[str]) -> int:
    """`fleet`: the table (plan/fleet.py); `fleet --diff BASE`: one Markdown report of every stack's
    plan diff against BASE, each stack's headline first, for one pull-request comment instead of N."""
    parser = argparse.ArgumentParser(prog="python -m plan fleet", description=fleet.__doc__)
    parser.add_argument("--stack", action="append", default=[], help="only this stack (repeatable; default: all)")
    parser.add_argument(
        "--diff", metavar="BASE", help="the fleet's plan diff against this git revision (its code runs)"
    )
    parser.add_argument("--trust-revision", action="store_true", help="as for `diff`")
    parser.add_argument("--output", help="write the Markdown here instead of stdout")
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)
    args = parser.parse_args(argv)
    if args.diff is None:
        lines, wrong = fleet.report(only=args.stack)
        print("\n".join(lines))
        return 1 if wrong else 0
    base_revision = _revision(args.diff, "--diff")
    assert base_revision is not None
    if not args.trust_revision:
        _trusted(base_revision, "--diff")
    written = outputs.file(args.output, "--output", force=args.force) if args.output else None
    reports = []
    for name in args.stack or sorted(stacks.stack_files()):
        stack = _stack(name)
        old = _PlanAt(base_revision, stack, cache=True).document()
        new = _current_document(stack, existing=_created(old))
        reports.append((stack, document.diff_report(old, new, f"Stack `{stack}`")))
    text = fleet.diff_markdown(f"{base_revision} -> working tree", reports)
    if written is not None:
        outputs.write_text(written, text)
    else:
        sys.stdout.write(text)
    return 0


def graph_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m plan graph", description="The stack's dependency picture.")
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--mermaid", help="write Mermaid text here (default: print it)")
    parser.add_argument("--dot", help="write Graphviz DOT here")
    parser.add_argument("--image", help="render an SVG/PNG here with Graphviz (apt-get install graphviz)")
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)
    args = parser.parse_args(argv)
    stack = _stack(args.stack)
    # A tracked generated file (docs/dev-graph.*) is written only by the command that generates it.
    written = {
        option: outputs.file(path, option, generator=outputs.Generator("graph", stack, option), force=args.force)
        for option, path in (("--mermaid", args.mermaid), ("--dot", args.dot), ("--image", args.image))
        if path is not None
    }
    outputs.distinct(written)
    raw, secret_keys, _ = _load(stack)
    result = engine.run(raw, stack=stack, secret_keys=secret_keys)
    text = graph.mermaid(result)
    if "--mermaid" in written:
        outputs.write_text(written["--mermaid"], text)
    elif not written:
        sys.stdout.write(text)
    if "--dot" in written:
        outputs.write_text(written["--dot"], graph.dot(result))
    if "--image" in written:
        try:
            rendered = graph.render_image(graph.dot(result), written["--image"])
        except graph.RenderError as err:
            raise SystemExit(f"error: --image {args.image}: {err}") from None
        if not rendered:
            print("Graphviz `dot` is not installed (apt-get install graphviz); wrote no image", file=sys.stderr)
            return 1
        outputs.record(written["--image"])
    return 0


def stacks_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m plan stacks", description="Check reservation claims and names across all stack files."
    )
    parser.add_argument("--json", action="store_true", help="only print the stack names as a JSON list (CI matrix)")
    if parser.parse_args(argv).json:
        found = stacks.stack_files()
        for name, path in found.items():
            try:
                check_stack_name(name)
            except StackFileError as err:
                raise SystemExit(f"error: {path.name}: {err}") from None
        print(json.dumps(sorted(found)))
        return 0
    lines, conflicts = stacks.report()
    print("\n".join(lines))
    return 1 if conflicts else 0


def schema_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m plan schema", description="The JSON Schema of a stack file's tpu-slicing: keys."
    )
    parser.add_argument("--out", help="write it here (default: print it); make schema writes the committed copy")
    parser.add_argument("--reference", help="also write the configuration reference (Markdown) here")
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)
    args = parser.parse_args(argv)
    written = {
        option: outputs.file(
            path, option, generator=outputs.Generator("schema", None, option, target="schema"), force=args.force
        )
        for option, path in (("--out", args.out), ("--reference", args.reference))
        if path is not None
    }
    outputs.distinct(written)
    text = json.dumps(stack_file_schema(), indent=2, sort_keys=True) + "\n"
    if "--out" in written:
        outputs.write_text(written["--out"], text)
    else:
        sys.stdout.write(text)
    if "--reference" in written:
        outputs.write_text(written["--reference"], configuration_reference())
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    try:
        if argv and argv[0] in COMMANDS:
            command = {
                "diff": diff,
                "graph": graph_command,
                "stacks": stacks_command,
                "schema": schema_command,
                "reservation": reservation.command,
                "benchmark": benchmark.command,
                "fleet": fleet_command,
                "drift": drift.command,
            }[argv[0]]
            return command(argv[1:])
        return show(argv)
    except SystemExit as stop:
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
            return 2
        return int(stop.code or 0)
    except (outputs.OutputError, reservation_health.SnapshotError, pulumi.RunError) as err:
        # A RunError is what the program refused (a new pool on a sub-block the reservation cannot give
        # it): its one line, as pulumi prints it, without a traceback.
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a write the checks could not foresee (permissions, a full disk): one line
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
