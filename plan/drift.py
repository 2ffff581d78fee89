"""The nightly drift and policy audit's report: `python -m plan drift --stack S --preview P --policy Q`.

The drift workflow (.github/workflows/drift.yml) runs, per deployable stack, with the code on main:

- `pulumi preview --refresh --expect-no-changes --json`: the CLI's preview digest (pulumi v3.274.0
  pkg/backend/display/json.go `previewDigest`: `steps`, each with `op`, `urn`, `diffReasons`,
  `replaceReasons` and `detailedDiff` (property path -> `kind`), and `changeSummary`). After a
  refresh, any step other than `same` is drift: the live cloud no longer is what main declares;
- `pulumi policy analyze --file <stack export> --policy-pack policy --json`: one JSON event per
  line (`policyEvent` with `resourceUrn`, `policyName`, `enforcementLevel`, `message`; a closing
  `summaryEvent`), the pack's verdicts on the state as it is, without running the program.

This turns both into one Markdown summary (the job summary) and the issue the workflow keeps per
stack (`--issue FILE`: title, body, whether there is anything to report, and whether the audit failed).

An audit that could not see the stack is a failure, never a clean night: the workflow passes each
command's exit status (`--preview-exit`, `--policy-exit`) and this reads them with what the commands
wrote. A preview that wrote no JSON (a login, a missing stack, a plugin: the CLI stops before the
engine), or whose digest holds an `error` diagnostic (a refresh refused with a 403, an expired
credential: json.go appends every non-ephemeral diagnostic to `diagnostics`), or that exited non-zero
with no change to explain it (`--expect-no-changes` fails only with changes: backenderr.go
`NoChangesExpectedError`); a policy run that wrote no `summaryEvent` (the pack did not load: pulumi
v3.274.0 cmd/pulumi/policy/policy_analyze.go returns before its display opens), or that failed with no
mandatory violation to explain it. Each is reported as "audit failed", and the command exits 1. A
violation that a policy exception matched (`policyEvent.exceptions`, apitype/events.go: it "doesn't
fail the operation") is listed apart and counts as none.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from domain import bounded_input
from settings import credentials

QUIET_OPS = {"same", "read", "refresh"}  # steps that change nothing (pkg/resource/deploy/step.go StepOp)
ISSUE_TITLE = "Drift: stack {stack}"
ISSUE_LABEL = "drift"


class ReportError(ValueError):
    """An input that is not what the CLI writes: one line naming the file."""


@dataclass(frozen=True)
class Drifted:
    op: str
    type: str
    name: str
    fields: tuple[str, ...]


@dataclass(frozen=True)
class Violation:
    urn: str
    policy: str
    level: str
    message: str
    exceptions: tuple[str, ...] = ()  # "<id>: <reason>" of each policy exception that matched it

    @property
    def excepted(self) -> bool:
        return bool(self.exceptions)


def _urn_parts(urn: str) -> tuple[str, str]:
    """(type, name) of `urn:pulumi:<stack>::<project>::<parent types $ type>::<name>`."""
    parts = urn.split("::")
    if len(parts) < 4:
        return urn, ""
    return parts[2].split("$")[-1], "::".join(parts[3:])


def drifted(preview: Mapping[str, Any]) -> list[Drifted]:
    steps = preview.get("steps")
    if not isinstance(steps, list):
        raise ReportError("no steps: not the JSON of `pulumi preview --json`")
    found = []
    for step in steps:
        op = str(step.get("op", ""))
        if op in QUIET_OPS:
            continue
        kind, name = _urn_parts(str(step.get("urn", "")))
        fields = sorted(step.get("detailedDiff") or {}) or [
            str(f) for f in (step.get("replaceReasons") or step.get("diffReasons") or [])
        ]
        found.append(Drifted(op, kind, name, tuple(fields)))
    return found


def violations(lines: Sequence[str]) -> tuple[list[Violation], str | None]:
    """The policy events of `pulumi policy analyze --json`, and its result (`summaryEvent.result`)."""
    found, result = [], None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = bounded_input.load_json(line)
        except bounded_input.InputError as err:
            raise ReportError(f"line {number} {err}: not the output of `pulumi policy analyze --json`") from None
        if not isinstance(event, Mapping):
            raise ReportError(f"line {number} is not a JSON object: not the output of `pulumi policy analyze --json`")
        if "policyEvent" in event:
            policy = event["policyEvent"]
            exceptions = policy.get("exceptions") or []
            found.append(
                Violation(
                    str(policy.get("resourceUrn", "")),
                    str(policy.get("policyName", "")),
                    str(policy.get("enforcementLevel", "")),
                    str(policy.get("message", "")).strip().splitlines()[-1] if policy.get("message") else "",
                    tuple(f"{e.get('id', '')}: {e.get('reason', '')}" for e in exceptions if isinstance(e, Mapping)),
                )
            )
        elif "summaryEvent" in event:
            result = event["summaryEvent"].get("result")
    return found, result


def preview_failures(preview: Mapping[str, Any] | None, exit_status: int, changes: Sequence[Drifted]) -> list[str]:
    """Why the preview could not see the stack, if it could not (the module's docstring)."""
    if preview is None:
        return [f"`pulumi preview` exited {exit_status} and wrote no preview JSON: it stopped before the engine ran "
                "(a login, a missing stack or plugin); the job log says why"]  # fmt: skip
    errors = [
        credentials.masked(str(d.get("message", "")).strip()).splitlines()
        for d in preview.get("diagnostics") or []
        if isinstance(d, Mapping) and d.get("severity") == "error"
    ]
    said = [f"`pulumi preview`: {lines[-1] if lines else '(no message)'}" for lines in errors]
    if exit_status != 0 and not said and not changes:
        said.append(
            f"`pulumi preview` exited {exit_status} with no change and no error diagnostic: the job log says why"
        )
    return said


def policy_failures(result: str | None, exit_status: int, found: Sequence[Violation]) -> list[str]:
    """Why the policy run could not judge the state, if it could not (the module's docstring)."""
    if result is None:
        return [f"`pulumi policy analyze` exited {exit_status} and wrote no summary: the policy pack did not load, "
                "or the state could not be read; the job log says why"]  # fmt: skip
    mandatory = any(v.level == "mandatory" and not v.excepted for v in found)
    if (exit_status != 0 or result != "succeeded") and not mandatory:
        return [f"`pulumi policy analyze` exited {exit_status} with result `{result}` and no mandatory violation "
                "to explain it: the analysis itself failed; the job log says why"]  # fmt: skip
    return []


def markdown(stack: str, changes: Sequence[Drifted], found: Sequence[Violation], failures: Sequence[str] = ()) -> str:
    counted = [v for v in found if not v.excepted]
    excepted = [v for v in found if v.excepted]
    lines = []
    if failures:
        lines += [f"## Stack `{stack}`: audit failed", ""]
        lines += [f"- {failure}" for failure in failures]
        lines += ["", "What follows is only what the audit could read; it is not a clean bill.", ""]
    lines += [f"## Stack `{stack}`: {len(changes)} resource(s) drifted, {len(counted)} policy violation(s)", ""]
    found = counted
    if changes:
        lines += ["| change | type | name | fields |", "| --- | --- | --- | --- |"]
        lines += [
            f"| {c.op} | `{c.type}` | `{c.name}` | {', '.join(f'`{f}`' for f in c.fields) or '-'} |" for c in changes
        ]
        lines += [
            "",
            "What is live no longer is what main declares: `pulumi up` puts it back, or a change to the stack "
            "file or the program adopts it (docs/troubleshooting.md).",
            "",
        ]
    if found:
        lines += ["| policy | level | resource | why |", "| --- | --- | --- | --- |"]
        for v in found:
            kind, name = _urn_parts(v.urn)
            lines.append(f"| `{v.policy}` | {v.level} | `{kind}` `{name}` | {v.message.replace('|', '/')} |")
        lines.append("")
    if excepted:
        lines += ["Excepted by a policy exception (not counted):", "", "| policy | resource | exception |",
                  "| --- | --- | --- |"]  # fmt: skip
        for v in excepted:
            kind, name = _urn_parts(v.urn)
            lines.append(f"| `{v.policy}` | `{kind}` `{name}` | {'; '.join(v.exceptions).replace('|', '/')} |")
        lines.append("")
    if not changes and not found and not failures:
        lines.append("No drift, no violation.")
    return "\n".join(lines).rstrip() + "\n"


def command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m plan drift", description=__doc__)
    parser.add_argument("--stack", required=True)
    parser.add_argument("--preview", type=Path, required=True, help="the output of `pulumi preview --refresh --json`")
    parser.add_argument("--preview-exit", type=int, required=True, help="the exit status of that preview")
    parser.add_argument("--policy", type=Path, required=True, help="the output of `pulumi policy analyze --json`")
    parser.add_argument("--policy-exit", type=int, required=True, help="the exit status of that analysis")
    parser.add_argument("--summary", type=Path, help="append the Markdown here (the job summary)")
    parser.add_argument("--issue", type=Path, help="write the issue (title, label, body, report, failed) here as JSON")
    args = parser.parse_args(argv)
    if args.issue is not None and args.issue.exists():
        raise SystemExit(f"error: --issue {args.issue} exists: this command writes only a new file")
    try:
        text = bounded_input.read_text(args.preview)
        try:
            preview = bounded_input.load_json(text) if text.strip() or args.preview_exit == 0 else None
        except bounded_input.InputError:
            if args.preview_exit == 0:
                raise ReportError("not JSON: not the output of `pulumi preview --json`") from None
            preview = None
        if preview is not None and not isinstance(preview, Mapping):
            raise ReportError("not a JSON object: not the output of `pulumi preview --json`")
        # A failed preview may have no steps at all (json.go: `steps,omitempty`); its diagnostics say why.
        seen = preview is not None and ("steps" in preview or args.preview_exit == 0)
        changes = drifted(preview) if seen and preview is not None else []
    except (ReportError, bounded_input.InputError) as err:
        raise SystemExit(f"error: {args.preview}: {err}") from None
    try:
        found, result = violations(bounded_input.read_text(args.policy).splitlines())
    except (ReportError, bounded_input.InputError) as err:
        raise SystemExit(f"error: {args.policy}: {err}") from None
    failures = preview_failures(preview, args.preview_exit, changes) + policy_failures(result, args.policy_exit, found)
    text = markdown(args.stack, changes, found, failures)
    print(text, end="")
    if args.summary is not None:
        with args.summary.open("a") as summary:
            summary.write(text)
    if args.issue is not None:
        issue = {
            "title": ISSUE_TITLE.format(stack=args.stack),
            "label": ISSUE_LABEL,
            "body": text,
            "report": bool(changes or any(not v.excepted for v in found) or failures),
            "failed": bool(failures),
        }
        with args.issue.open("x") as out:
            out.write(json.dumps(issue, indent=2) + "\n")
    return 1 if failures else 0
