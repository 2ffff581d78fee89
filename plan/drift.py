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
stack (`--issue FILE`: title, body, and whether there is anything to report).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
            event = json.loads(line)
        except ValueError:
            raise ReportError(f"line {number} is not JSON: not the output of `pulumi policy analyze --json`") from None
        if "policyEvent" in event:
            policy = event["policyEvent"]
            found.append(
                Violation(
                    str(policy.get("resourceUrn", "")),
                    str(policy.get("policyName", "")),
                    str(policy.get("enforcementLevel", "")),
                    str(policy.get("message", "")).strip().splitlines()[-1] if policy.get("message") else "",
                )
            )
        elif "summaryEvent" in event:
            result = event["summaryEvent"].get("result")
    return found, result


def markdown(stack: str, changes: Sequence[Drifted], found: Sequence[Violation]) -> str:
    lines = [f"## Stack `{stack}`: {len(changes)} resource(s) drifted, {len(found)} policy violation(s)", ""]
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
    if not changes and not found:
        lines.append("No drift, no violation.")
    return "\n".join(lines).rstrip() + "\n"


def command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m plan drift", description=__doc__)
    parser.add_argument("--stack", required=True)
    parser.add_argument("--preview", type=Path, required=True, help="the output of `pulumi preview --refresh --json`")
    parser.add_argument("--policy", type=Path, required=True, help="the output of `pulumi policy analyze --json`")
    parser.add_argument("--summary", type=Path, help="append the Markdown here (the job summary)")
    parser.add_argument("--issue", type=Path, help="write the issue (title, label, body, report) here as JSON")
    args = parser.parse_args(argv)
    try:
        try:
            preview = json.loads(args.preview.read_text())
        except ValueError:
            raise ReportError("not JSON: not the output of `pulumi preview --json`") from None
        if not isinstance(preview, Mapping):
            raise ReportError("not a JSON object: not the output of `pulumi preview --json`")
        changes = drifted(preview)
    except (ReportError, OSError) as err:
        raise SystemExit(f"error: {args.preview}: {err}") from None
    try:
        found, _ = violations(args.policy.read_text().splitlines())
    except (ReportError, OSError) as err:
        raise SystemExit(f"error: {args.policy}: {err}") from None
    text = markdown(args.stack, changes, found)
    print(text, end="")
    if args.summary is not None:
        with args.summary.open("a") as summary:
            summary.write(text)
    if args.issue is not None:
        issue = {
            "title": ISSUE_TITLE.format(stack=args.stack),
            "label": ISSUE_LABEL,
            "body": text,
            "report": bool(changes or found),
        }
        args.issue.write_text(json.dumps(issue, indent=2) + "\n")
    return 0
