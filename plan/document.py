"""A plan as a stable, sorted, machine-readable document, and the diff of two of them.

The document keys resources by their logical address (component path, type,
name), not by URN, so renaming a stack does not make every resource look new.
Secrets are masked before anything is written, so neither a document nor a
diff can leak one.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import yaml

from domain import reservation_health
from plan import impact, render
from plan.changes import field_changes
from plan.engine import SECRET_PLACEHOLDER, PlanResult, Resource, mask
from plan.manifests import is_kubernetes_object
from settings import capacity
from settings.model import StackConfig

FORMAT_VERSION = 1


def address(resource: Resource, by_urn: Mapping[str, Resource]) -> str:
    """`component/child/.../type::name`: stable across stacks and runs."""
    parts = [f"{resource.type}::{resource.name}"]
    parent = by_urn.get(resource.parent)
    while parent is not None:
        parts.append(parent.name)
        parent = by_urn.get(parent.parent)
    return "/".join(reversed(parts))


def _clean(value: Any) -> Any:
    """Masked, JSON-safe and with whole floats back as the integers they were."""
    value = mask(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def document(result: PlanResult, config: StackConfig) -> dict[str, Any]:
    by_urn = result.by_urn()
    resources = {}
    for resource in result.resources:
        deps = sorted(address(by_urn[d], by_urn) for d in resource.dependencies if d in by_urn)
        resources[address(resource, by_urn)] = {
            "type": resource.type,
            "name": resource.name,
            "kubernetes": is_kubernetes_object(resource),
            "inputs": _clean(resource.inputs),
            "dependsOn": deps,
        }
    outputs = {
        name: (SECRET_PLACEHOLDER if out.secret else _clean(out.value) if out.known else "(known after apply)")
        for name, out in sorted(result.outputs.items())
    }
    return {
        "format": FORMAT_VERSION,
        "stack": result.stack,
        "preview": result.preview,
        "resources": dict(sorted(resources.items())),
        "outputs": outputs,
        "capacity": _clean(asdict(capacity.capacity(config))),
        # What the change costs, for `diff`: TPU use, admission, time to serving, policy verdicts.
        "impact": _clean(impact.facts(result, config, lambda urn: address(by_urn[urn], by_urn))),
        # Only when a reservation snapshot was read: documents of plans without one stay as they were.
        **({"reservation": result.reservation} if result.reservation else {}),
    }


def empty(stack: str) -> dict[str, Any]:
    """The plan of a stack that does not exist (at that revision): nothing, and nothing in use."""
    return {
        "format": FORMAT_VERSION,
        "stack": stack,
        "resources": {},
        "outputs": {},
        "capacity": {},
        "impact": impact.empty(),
    }


def dumps(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 80 else text[:77] + "..."


def _yaml_diff(old: Any, new: Any, label: str) -> list[str]:
    before = yaml.safe_dump(old, sort_keys=True).splitlines()
    after = yaml.safe_dump(new, sort_keys=True).splitlines()
    return list(difflib.unified_diff(before, after, f"a/{label}", f"b/{label}", lineterm="", n=2))


# Kubernetes YAML shown for added and removed objects: folded when longer than this many lines,
# cut at the second, and no more than the third in all (a pull-request comment holds 65536).
YAML_FOLD_LINES = 12
YAML_MAX_LINES = 150
YAML_BUDGET_CHARS = 30_000  # shared with the diffs of changed resources
WHOLE_OBJECTS = "`python -m plan --stack STACK` writes every object as YAML under build/plan/STACK/"
LONG_STRING = 240  # a script or a file in a ConfigMap: its first lines, and how long it is


def _abbreviated(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _abbreviated(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_abbreviated(v) for v in value]
    if isinstance(value, str) and len(value) > LONG_STRING:
        head = value[:LONG_STRING].rsplit("\n", 1)[0] if "\n" in value[:LONG_STRING] else value[:LONG_STRING]
        return f"{head}\n... ({len(value) - len(head)} more characters)"
    return value


def _resource_yaml(res: Mapping[str, Any], key: str, budget: list[int]) -> list[str]:
    text = yaml.safe_dump(_abbreviated(res.get("inputs")), sort_keys=True).rstrip().splitlines()
    name = key.rsplit("::", 1)[-1]
    if budget[0] <= 0:
        return [f"  (YAML of `{name}` left out to keep the comment short; {WHOLE_OBJECTS})"]
    if len(text) > YAML_MAX_LINES:
        text = [*text[:YAML_MAX_LINES], f"# ... {len(text) - YAML_MAX_LINES} more lines"]
    budget[0] -= sum(len(line) + 1 for line in text)
    block = ["", "```yaml", *text, "```", ""]
    if len(text) <= YAML_FOLD_LINES:
        return block
    return [
        "",
        f"<details><summary>YAML of <code>{name}</code> ({len(text)} lines)</summary>",
        *block,
        "</details>",
        "",
    ]


def _resource_lines(key: str, res: Mapping[str, Any], symbol: str, budget: list[int]) -> list[str]:
    settings = render.settings_text(str(res.get("type", "")), res.get("inputs") or {})
    lines = [f"- `{symbol}` `{key}`" + (f": `{settings}`" if settings else "")]
    if res.get("kubernetes"):
        lines += _resource_yaml(res, key, budget)
    return lines


def _changed_lines(key: str, before: Mapping[str, Any], after: Mapping[str, Any], budget: list[int]) -> list[str]:
    """One changed resource, folded: a YAML diff for Kubernetes objects, else a field table."""
    body: list[str] = []
    rows = field_changes(before, after)
    if before.get("kubernetes") and after.get("kubernetes"):
        # The object as YAML, then what else changed (its dependencies).
        rows = [row for row in rows if not row[0].startswith("inputs.") and row[0] != "inputs"]
        if before["inputs"] != after["inputs"]:
            label = key.rsplit("::", 1)[-1]
            body += ["```diff", *_yaml_diff(before["inputs"], after["inputs"], label), "```"]
            body += [""] if rows else []
    if rows:
        body += ["| field | before | after |", "|---|---|---|"]
        body += [_change_row(path, was, now) for path, was, now in rows]
    size = sum(len(line) + 1 for line in body)
    if size > budget[0]:
        body = [f"({size} characters of diff left out to keep the comment short; {WHOLE_OBJECTS})"]
    else:
        budget[0] -= size
    return [f"<details><summary><code>~ {key}</code></summary>", "", *body, "", "</details>", ""]


def _without_dependencies(res: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in res.items() if key != "dependsOn"}


def _rewired_lines(keys: list[str], old_res: Mapping[str, Any], new_res: Mapping[str, Any]) -> list[str]:
    """One folded list: each resource and the dependencies it gained or lost (often one new object
    that many depend on, e.g. a NetworkPolicy per new serving group)."""
    rows = ["| resource | dependencies gained | lost |", "|---|---|---|"]
    for key in keys:
        was, now = old_res[key].get("dependsOn") or [], new_res[key].get("dependsOn") or []
        came = ", ".join(f"`{d.rsplit('::', 1)[-1]}`" for d in now if d not in was) or "-"
        gone = ", ".join(f"`{d.rsplit('::', 1)[-1]}`" for d in was if d not in now) or "-"
        rows.append(f"| `{key}` | {came} | {gone} |")
    return [f"<details><summary>{len(keys)} resources</summary>", "", *rows, "", "</details>", ""]


def _change_row(path: str, was: Any, now: Any) -> str:
    if path == "dependsOn" and isinstance(was, list) and isinstance(now, list):
        gone = ", ".join(f"`{d}`" for d in was if d not in now) or "-"
        came = ", ".join(f"`{d}`" for d in now if d not in was) or "-"
        return f"| `{path}` | {gone} | {came} |"
    return f"| `{path}` | `{_short(was)}` | `{_short(now)}` |"


def diff_report(old: Mapping[str, Any], new: Mapping[str, Any], title: str) -> dict[str, Any]:
    """The diff as data (for `diff --json`): what changes, what it costs, and its Markdown."""
    old_res, new_res = old.get("resources", {}), new.get("resources", {})
    added = sorted(new_res.keys() - old_res.keys())
    removed = sorted(old_res.keys() - new_res.keys())
    differ = sorted(k for k in old_res.keys() & new_res.keys() if old_res[k] != new_res[k])
    # A resource whose only change is its dependencies gets no step: the engine records the new
    # edges and the preview shows it unchanged (the day-2 recipes compare this count with the real
    # engine's preview, tests/operations.py). Counted apart, so "to change" is what `up` touches.
    rewired = [k for k in differ if _without_dependencies(old_res[k]) == _without_dependencies(new_res[k])]
    changed = [k for k in differ if k not in rewired]
    output_changes = field_changes(old.get("outputs", {}), new.get("outputs", {}))
    capacity_changes = field_changes(old.get("capacity", {}), new.get("capacity", {}))
    report = impact.compare(old, new)
    same_impact = not (old.get("impact") and new.get("impact")) or old["impact"] == new["impact"]
    reservation_lines = _reservation_lines(old.get("reservation") or [], new.get("reservation") or [])
    noop = not (added or removed or differ or output_changes or capacity_changes) and same_impact
    noop = noop and old.get("reservation") == new.get("reservation")
    lines = [f"### {title}", ""]
    if noop:
        lines.append("No changes.")
        lines += reservation_lines
    else:
        lines += [*impact.headline(report), ""]
        lines.append(
            f"**{len(added)} to add, {len(changed)} to change, {len(removed)} to remove** "
            f"(desired state from the offline plan; secrets masked)"
            + (f"; {len(rewired)} more only depend on other resources now, which `up` records without a step"
               if rewired else "")
        )  # fmt: skip
        lines.append("")
        lines += impact.markdown(report)
        budget = [YAML_BUDGET_CHARS]
        for heading, keys, symbol, side in (("Added", added, "+", new_res), ("Removed", removed, "-", old_res)):
            if keys:
                lines += [f"#### {heading}", ""]
                for key in keys:
                    lines += _resource_lines(key, side[key], symbol, budget)
                lines.append("")
        if changed:
            lines += ["#### Changed", ""]
            for key in changed:
                lines += _changed_lines(key, old_res[key], new_res[key], budget)
        if rewired:
            lines += ["#### New dependencies only", ""]
            lines += _rewired_lines(rewired, old_res, new_res)
        for heading, rows in (("Stack outputs", output_changes), ("Capacity", capacity_changes)):
            if rows:
                lines += [f"#### {heading}", "", "| field | before | after |", "|---|---|---|"]
                lines += [f"| `{path}` | `{_short(was)}` | `{_short(now)}` |" for path, was, now in rows]
                lines.append("")
        lines += reservation_lines
    text = "\n".join(lines).rstrip() + "\n"
    return {
        "format": FORMAT_VERSION,
        "title": title,
        "stack": new.get("stack") or old.get("stack"),
        "noop": noop,
        "summary": {"add": len(added), "change": len(changed), "remove": len(removed), "rewired": len(rewired)},
        "added": added,
        "removed": removed,
        "changed": changed,
        "rewired": rewired,
        **report,
        "markdown": text,
    }


def _reservation_lines(old: list[Mapping[str, Any]], new: list[Mapping[str, Any]]) -> list[str]:
    """The bound sub-blocks as the head's snapshot has them, and what moved since the base's."""
    if not new:
        return []
    before = [reservation_health.from_row(r) for r in old]
    after = [reservation_health.from_row(r) for r in new]
    lines = ["", "#### Reservation (from the snapshot)", "", "| sub-block | health | free/used/hosts | maintenance |"]
    lines.append("|---|---|---|---|")
    for r in after:
        lines.append(f"| `{r.sub_block}` | {r.health} | {r.free}/{r.in_use}/{r.count} | {r.maintenance} |")
    moved = reservation_health.changes(before, after)
    due = [f"{r.sub_block}: maintenance {r.maintenance}" for r in after if r.maintenance.due and not before]
    if moved or due:
        lines += ["", *[f"- **{line}**" for line in moved + due]]
    return [*lines, ""]


def diff_markdown(old: Mapping[str, Any], new: Mapping[str, Any], title: str) -> str:
    """A pull-request comment: what the change costs, then what is added, removed and changed."""
    text: str = diff_report(old, new, title)["markdown"]
    return text
