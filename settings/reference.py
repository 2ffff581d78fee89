"""The configuration reference, generated: every key a stack file may set, with its type, default,
allowed values and the refused classes (settings/refusals.py) whose message names it.

Made from the same JSON Schema editors use (settings/schema.py), so the page, the schema and the
model cannot disagree; `make schema` writes docs/configuration-reference.md and
tests/test_schema.py fails when the committed page is stale. The hand-written contract in
docs/configuration.md says why each rule exists; this page says what each key takes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from settings.loader import NAMESPACE
from settings.refusals import REFUSED_CLASSES
from settings.schema import stack_file_schema

HEADER = """# Configuration reference (generated)

Generated from the settings model by `make schema`; do not edit (docs/configuration.md is the
contract in prose). Keys are under the `tpu-slicing:` namespace of `Pulumi.<stack>.yaml`; a
nested key is written with dots, as `pulumi config set --path` takes it. **Refused** names the
classes of `settings/refusals.py` whose example sets the key (a class such as a floating tag
applies to every key of its kind, its example shows one); find a class's rule by its name in the
`REFUSED` rows of `settings/rules_*.py`.

| key | type | default | allowed | refused |
|---|---|---|---|---|
"""


def _resolve(node: Mapping[str, Any], definitions: Mapping[str, Any]) -> Mapping[str, Any]:
    while "$ref" in node:
        node = {**definitions[node["$ref"].rsplit("/", 1)[-1]], **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _branches(node: Mapping[str, Any], definitions: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    node = _resolve(node, definitions)
    options = node.get("anyOf") or node.get("oneOf")
    if not options:
        return [node]
    return [branch for option in options for branch in _branches(option, definitions)]


def _type(branches: list[Mapping[str, Any]]) -> str:
    names = []
    for branch in branches:
        if "enum" in branch or "const" in branch:
            name = "string" if branch.get("type") in (None, "string") else str(branch["type"])
        elif branch.get("type") == "array":
            name = "list"
        elif branch.get("type") == "object" or "properties" in branch:
            name = "mapping"
        else:
            name = str(branch.get("type", "any"))
        if name not in names:
            names.append(name)
    return " or ".join(names)


def _allowed(branches: list[Mapping[str, Any]]) -> str:
    found = []
    for branch in branches:
        if "enum" in branch:
            found.append(", ".join(f"`{v}`" for v in branch["enum"]))
        if "const" in branch:
            found.append(f"`{branch['const']}`")
        if "pattern" in branch:
            found.append(f"matches `{branch['pattern']}`")
        bounds = [
            f"{word} {branch[key]}"
            for key, word in (
                ("minimum", "≥"),
                ("exclusiveMinimum", ">"),
                ("maximum", "≤"),
                ("exclusiveMaximum", "<"),
                ("minLength", "length ≥"),
                ("maxLength", "length ≤"),
                ("minItems", "items ≥"),
                ("maxItems", "items ≤"),
            )
            if key in branch
        ]
        found += bounds
        if branch.get("format"):
            found.append(f"format {branch['format']}")
        if branch.get("type") == "object" and branch.get("required") == ["secure"]:
            found.append("a Pulumi secret (`pulumi config set --secret`)")
    return "; ".join(found).replace("|", "\\|")


# Defaults the loader gives rather than the model (settings/loader.py).
LOADER_DEFAULTS = {"namePrefix": "the stack's name"}


def _default(key: str, node: Mapping[str, Any], required: bool) -> str:
    if key in LOADER_DEFAULTS:
        return LOADER_DEFAULTS[key]
    if required:
        return "required"
    if "default" not in node:
        return ""
    return f"`{json.dumps(node['default'])}`".replace("|", "\\|")


def _rows(
    prefix: str, node: Mapping[str, Any], definitions: Mapping[str, Any], required: bool
) -> Iterator[tuple[str, str, str, str]]:
    branches = _branches(node, definitions)
    yield prefix, _type(branches), _default(prefix, _resolve(node, definitions), required), _allowed(branches)
    for branch in branches:
        items = branch.get("items") if branch.get("type") == "array" else None
        if isinstance(items, Mapping) and any("properties" in b for b in _branches(items, definitions)):
            yield from _rows(f"{prefix}[]", items, definitions, False)
        for key, child in (branch.get("properties") or {}).items():
            yield from _rows(f"{prefix}.{key}", child, definitions, key in (branch.get("required") or ()))


def _refused_by_key() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for row in REFUSED_CLASSES:
        key = row.key.removeprefix(f"{NAMESPACE}:")
        found.setdefault(key, []).append(row.name)
    return found


def configuration_reference() -> str:
    schema = stack_file_schema()
    definitions = schema["$defs"]
    config = schema["properties"]["config"]
    refused = _refused_by_key()
    lines = [HEADER]
    for full_key, node in config["properties"].items():
        if not full_key.startswith(f"{NAMESPACE}:"):
            continue
        top = full_key.removeprefix(f"{NAMESPACE}:")
        for key, kind, default, allowed in _rows(top, node, definitions, full_key in config["required"]):
            names = "; ".join(sorted(refused.get(key.replace("[]", ""), [])))
            lines.append(f"| `{key}` | {kind} | {default} | {allowed} | {names} |\n")
    return "".join(lines)
