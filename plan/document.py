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

from infra import capacity
from plan.engine import SECRET_PLACEHOLDER, PlanResult, Resource, mask
from plan.manifests import is_kubernetes_object
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
    }


def dumps(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    if isinstance(value, list) and value and any(isinstance(v, dict | list) for v in value):
        flat = {}
        for index, item in enumerate(value):
            flat.update(_flatten(item, f"{prefix}[{index}]"))
        return flat
    return {prefix: value}


def field_changes(old: Any, new: Any) -> list[tuple[str, Any, Any]]:
    """(path, old, new) for every leaf that differs; missing leaves are None."""
    before, after = _flatten(old), _flatten(new)
    return [
        (path, before.get(path), after.get(path))
        for path in sorted(before.keys() | after.keys())
        if before.get(path) != after.get(path)
    ]


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 80 else text[:77] + "..."


def _yaml_diff(old: Any, new: Any, label: str) -> list[str]:
    before = yaml.safe_dump(old, sort_keys=True).splitlines()
    after = yaml.safe_dump(new, sort_keys=True).splitlines()
    return list(difflib.unified_diff(before, after, f"a/{label}", f"b/{label}", lineterm="", n=2))


def diff_markdown(old: Mapping[str, Any], new: Mapping[str, Any], title: str) -> str:
    """A pull-request comment: what is added, removed and changed, per resource and field."""
    old_res, new_res = old.get("resources", {}), new.get("resources", {})
    added = sorted(new_res.keys() - old_res.keys())
    removed = sorted(old_res.keys() - new_res.keys())
    changed = sorted(k for k in old_res.keys() & new_res.keys() if old_res[k] != new_res[k])
    lines = [f"### {title}", ""]
    lines.append(
        f"**{len(added)} to add, {len(changed)} to change, {len(removed)} to remove** "
        f"(desired state from the offline plan; secrets masked)"
    )
    lines.append("")
    for heading, keys, symbol in (("Added", added, "+"), ("Removed", removed, "-")):
        if keys:
            lines += [f"#### {heading}", ""]
            lines += [f"- `{symbol}` `{key}`" for key in keys]
            lines.append("")
    if changed:
        lines += ["#### Changed", ""]
        for key in changed:
            lines.append(f"<details><summary><code>~ {key}</code></summary>")
            lines.append("")
            before, after = old_res[key], new_res[key]
            if before.get("kubernetes") and after.get("kubernetes"):
                lines += ["```diff", *_yaml_diff(before["inputs"], after["inputs"], key.rsplit("::", 1)[-1]), "```"]
            else:
                lines += ["| field | before | after |", "|---|---|---|"]
                for path, was, now in field_changes(before, after):
                    lines.append(f"| `{path}` | `{_short(was)}` | `{_short(now)}` |")
            lines += ["", "</details>", ""]
    output_changes = field_changes(old.get("outputs", {}), new.get("outputs", {}))
    capacity_changes = field_changes(old.get("capacity", {}), new.get("capacity", {}))
    for heading, rows in (("Stack outputs", output_changes), ("Capacity", capacity_changes)):
        if rows:
            lines += [f"#### {heading}", "", "| field | before | after |", "|---|---|---|"]
            lines += [f"| `{path}` | `{_short(was)}` | `{_short(now)}` |" for path, was, now in rows]
            lines.append("")
    if not (added or removed or changed or output_changes or capacity_changes):
        lines.append("No changes.")
    return "\n".join(lines).rstrip() + "\n"
