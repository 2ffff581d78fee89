"""Roll a change out to many stacks: preview them all, then `pulumi up` in waves, canary first.

Pulumi's Automation API (`pulumi.automation`, the SDK the program pins) drives the same CLI a person
runs, one local-program workspace per stack of this repository: no shell loop around the CLI, and
each stack's result as data.

Which stacks (`targets`): by default those of this repository's stack files that exist in the
backend the CLI is logged in to, never one merely committed (the examples with the placeholder
project would be previewed, fail, and hold every other stack back); `--stack` names them. A stack
is selected, never created, unless `--create` (a typo must not make a stack); a stack whose
`gcp:project` is the examples' placeholder is refused before anything runs.

The rules:
1. Every selected stack is previewed, at most `parallel` at once, with the policy pack. If one
   preview fails, nothing is applied.
2. The canary (`--canary`, or the first stack by name) is applied alone. `pulumi up` ends only when
   its smoke test has been served through the gateway (the smoke Job), so a canary whose `up`
   succeeds has served a request; if it fails, no other stack is touched.
3. The rest follow in waves of at most `parallel` stacks; after a wave with a failure the next
   waves are skipped, unless `keep_going`.
Each step's outcome (operation, resource changes, seconds, result) goes into the summary table. An
interrupted rollout (Ctrl-C reaches the CLIs in the foreground process group, which cancel as a
person's Ctrl-C does) leaves each stack in a state the README's Troubleshooting recovers.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

POLICY_PACK = "policy"
# A failed step's message in the summary table: its start (the resource) and its end (the verdict);
# the whole text is the outcome's `detail`, printed below the table.
MESSAGE_HEAD, MESSAGE_TAIL = 300, 500


@dataclass(frozen=True)
class Outcome:
    stack: str
    operation: str  # "preview" or "up"
    result: str  # "succeeded", "failed" or "skipped"
    changes: Mapping[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    message: str = ""
    detail: str = ""  # a failure's whole text, where `message` is its one-line start and end


# The project the committed example stacks name (and the workflows' DEPLOYABLE scripts skip).
PLACEHOLDER_PROJECT = "example-tpu-project"


class TargetError(ValueError):
    """The stacks asked for cannot be rolled out: one line, nothing has run."""


def targets(
    files: Sequence[str],
    deployed: Sequence[str],
    projects: Mapping[str, str | None],
    chosen: Sequence[str] = (),
    create: bool = False,
) -> list[str]:
    """The stacks to roll out: `chosen`, else every stack file's stack that exists in the backend
    (`deployed`); each must have a stack file, exist unless `create`, and name a real project."""
    unknown = sorted(set(chosen) - set(files))
    if unknown:
        raise TargetError(f"no stack file for {', '.join(unknown)}; allowed: {', '.join(sorted(files))}")
    picked = sorted(set(chosen) if chosen else set(files) & set(deployed))
    if not picked:
        raise TargetError(
            "no stack of this repository exists in the backend you are logged in to "
            f"(stack files: {', '.join(sorted(files))}); name them with --stack, and --create to make new ones"
        )
    missing = [stack for stack in picked if stack not in deployed]
    if missing and not create:
        raise TargetError(
            f"{', '.join(missing)} not in the backend you are logged in to; allowed: a stack that exists "
            "(`pulumi stack ls`), or --create to make it"
        )
    placeholders = [stack for stack in picked if projects.get(stack) in (None, "", PLACEHOLDER_PROJECT)]
    if placeholders:
        raise TargetError(
            f"{', '.join(placeholders)}: gcp:project is the example's placeholder ({PLACEHOLDER_PROJECT!r}) or unset; "
            "allowed: a stack file that names your project"
        )
    return picked


def deployed_stacks(work_dir: Path, env: Mapping[str, str] | None = None, cli_root: Path | None = None) -> list[str]:
    """The stacks of this project in the backend the CLI is logged in to (`pulumi stack ls`)."""
    from pulumi import automation

    command = automation.PulumiCommand(root=str(cli_root)) if cli_root is not None else None
    workspace = automation.LocalWorkspace(work_dir=str(work_dir), env_vars=dict(env or {}), pulumi_command=command)
    return sorted(summary.name.rsplit("/", 1)[-1] for summary in workspace.list_stacks())


class Runner(Protocol):
    def preview(self, stack: str) -> Mapping[str, int]: ...

    def up(self, stack: str) -> Mapping[str, int]: ...


def waves(stacks: Sequence[str], canary: str | None, parallel: int) -> list[list[str]]:
    """The canary alone, then the others by name, at most `parallel` at a time."""
    if parallel < 1:
        raise ValueError(f"parallel {parallel}: allowed: at least 1")
    if not stacks:
        return []
    chosen = canary if canary is not None else sorted(stacks)[0]
    if chosen not in stacks:
        raise ValueError(f"canary {chosen!r} is not one of the stacks ({', '.join(sorted(stacks))})")
    rest = sorted(s for s in stacks if s != chosen)
    return [[chosen], *(rest[i : i + parallel] for i in range(0, len(rest), parallel))]


Step = Callable[[str], Mapping[str, int]]


def _timed(operation: str, stack: str, step: Step) -> Outcome:
    started = time.monotonic()
    try:
        changes = step(stack)
    except Exception as err:  # one stack's failure is its outcome, not the rollout's end
        detail = str(err).strip()
        message = " ".join(detail.split())
        if len(message) > MESSAGE_HEAD + MESSAGE_TAIL:
            message = f"{message[:MESSAGE_HEAD]} … {message[-MESSAGE_TAIL:]}"
        return Outcome(stack, operation, "failed", {}, time.monotonic() - started, message, detail)
    return Outcome(stack, operation, "succeeded", dict(changes), time.monotonic() - started)


def _each(
    operation: str, stacks: Sequence[str], step: Callable[[str], Mapping[str, int]], parallel: int
) -> list[Outcome]:
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(stacks)))) as pool:
        return list(pool.map(lambda stack: _timed(operation, stack, step), stacks))


def preview_all(runner: Runner, stacks: Sequence[str], parallel: int = 2) -> list[Outcome]:
    """Rule 1: every stack previewed, at most `parallel` at once."""
    return _each("preview", sorted(stacks), runner.preview, parallel)


def rollout(
    runner: Runner, stacks: Sequence[str], *, canary: str | None = None, parallel: int = 2, keep_going: bool = False
) -> list[Outcome]:
    planned = waves(stacks, canary, parallel)
    outcomes = preview_all(runner, stacks, parallel)
    failed = [o.stack for o in outcomes if o.result == "failed"]
    if failed:
        reason = f"not applied: the preview of {', '.join(failed)} failed"
        return outcomes + [Outcome(s, "up", "skipped", message=reason) for wave in planned for s in wave]
    for index, wave in enumerate(planned):
        done = _each("up", wave, runner.up, parallel)
        outcomes += done
        broken = [o.stack for o in done if o.result == "failed"]
        if broken and (index == 0 or not keep_going):
            what = f"the canary {broken[0]}" if index == 0 else ", ".join(broken)
            reason = f"not applied: {what} failed"
            outcomes += [Outcome(s, "up", "skipped", message=reason) for later in planned[index + 1 :] for s in later]
            break
    return outcomes


def failures(outcomes: Sequence[Outcome]) -> list[str]:
    """Each failed step's whole text, for below the table."""
    return [f"{o.stack} {o.operation}: {o.detail}" for o in outcomes if o.result == "failed" and o.detail]


def table(outcomes: Sequence[Outcome]) -> list[str]:
    header = ("stack", "operation", "result", "changes", "seconds", "message")
    rows = [header] + [
        (
            o.stack,
            o.operation,
            o.result,
            ", ".join(f"{k} {v}" for k, v in sorted(o.changes.items())) or "-",
            f"{o.seconds:.0f}",
            o.message or "-",
        )
        for o in outcomes
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


class AutomationRunner:
    """Each stack a local-program workspace of this repository (its Pulumi.<stack>.yaml), driven through
    the Automation API with the policy pack, as deploy.yml drives the CLI."""

    def __init__(
        self,
        work_dir: Path,
        env: Mapping[str, str] | None = None,
        cli_root: Path | None = None,
        create: bool = False,
    ) -> None:
        # cli_root: the folder whose bin/pulumi to run (default: the `pulumi` on PATH). create: make a
        # stack the backend does not hold (`--create`); otherwise it is selected, or the step fails.
        self.work_dir, self.env, self.cli_root, self.create = work_dir, dict(env or {}), cli_root, create

    def _stack(self, name: str):  # type: ignore[no-untyped-def]
        from pulumi import automation

        command = automation.PulumiCommand(root=str(self.cli_root)) if self.cli_root is not None else None
        options = automation.LocalWorkspaceOptions(env_vars=self.env, pulumi_command=command)
        make = automation.create_or_select_stack if self.create else automation.select_stack
        return make(stack_name=name, work_dir=str(self.work_dir), opts=options)

    def preview(self, stack: str) -> Mapping[str, int]:
        errors = Errors()
        try:
            result = self._stack(stack).preview(policy_packs=[POLICY_PACK], on_event=errors.on_event)
        except Exception as err:
            raise RuntimeError(errors.explain("preview", err)) from None
        return {str(getattr(op, "value", op)): count for op, count in result.change_summary.items()}

    def up(self, stack: str) -> Mapping[str, int]:
        errors = Errors()
        try:
            result = self._stack(stack).up(policy_packs=[POLICY_PACK], on_event=errors.on_event)
        except Exception as err:
            raise RuntimeError(errors.explain("up", err)) from None
        if result.summary.result != "succeeded":
            raise RuntimeError(errors.explain("up", RuntimeError(f"{result.summary.result}: {result.stderr}")))
        return dict(result.summary.resource_changes or {})


_URN = re.compile(r"urn:pulumi:[^\s\"']+")
_MARKUP = re.compile(r"<\{%[^%]*%\}>")  # the CLI's colour tags in event messages (sdk/go/common/diag/colors)


def _resource(urn: str) -> str:
    """`urn:pulumi:<stack>::<project>::<parent type>$<type>::<name>` -> "<kind> <name>"."""
    head, _, name = urn.rpartition("::")
    kind = head.rpartition("::")[2].rpartition("$")[2].rpartition(":")[2]
    return f"{kind} {name}".strip()


class Errors:
    """The error diagnostics of one operation, from the engine's event stream: each names its resource,
    so a failed step says which resource failed and why (the smoke Job and its last log lines), where
    the CLI's output ends with its summary of outputs and counts."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def on_event(self, event: Any) -> None:
        diagnostic = getattr(event, "diagnostic_event", None)
        if diagnostic is None or diagnostic.severity != "error":
            return
        text = _URN.sub(lambda match: _resource(match.group(0)), _MARKUP.sub("", diagnostic.message)).strip()
        self.found.append(f"{_resource(diagnostic.urn)}: {text}" if diagnostic.urn else text)

    def explain(self, operation: str, err: Exception) -> str:
        if self.found:
            return f"pulumi {operation} failed: " + "\n".join(self.found)
        return f"pulumi {operation} failed: {str(err).strip()}"
