"""Leaf-by-leaf differences between two JSON-shaped documents: what the plan diff shows for a changed
resource (plan/document.py) and what the impact of a change reads to decide which paths moved
(plan/impact.py). One place for both, so neither imports the other."""

from __future__ import annotations

from typing import Any


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
