"""Read a `Pulumi.<stack>.yaml` the way the Pulumi CLI reads it, so the plan sees what `pulumi up` sees.

The CLI parses stack files with go-yaml v3 (YAML 1.2 core schema): `22:00` and `yes` are strings,
not the sexagesimal integer 1320 and the boolean PyYAML's YAML 1.1 makes of them; a repeated key
is an error ("mapping key ... already defined"). A config key without a namespace belongs to the
project (sdk/go/common/resource/config/key.go, `ParseKey` via the project's default namespace),
and a namespace one letter away from the project's is a typo the CLI would pass on silently.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

import yaml

PROJECT = "tpu-slicing"


class StackFileError(ValueError):
    pass


class CliLoader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2 core-schema scalars and duplicate keys refused."""


CliLoader.yaml_implicit_resolvers = {}
_RESOLVERS = [
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", list("-+0123456789")),
    (
        "tag:yaml.org,2002:float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        list("-+.0123456789"),
    ),
]
for _tag, _pattern, _first in _RESOLVERS:
    CliLoader.add_implicit_resolver(_tag, re.compile(_pattern), _first)


def _int_1_2(loader: CliLoader, node: yaml.ScalarNode) -> int:
    text = str(loader.construct_scalar(node))
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text)  # decimal only: a leading 0 is not octal in YAML 1.2


def _mapping_without_duplicates(loader: CliLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise StackFileError(
                f"line {key_node.start_mark.line + 1}: key {key!r} is given twice (first on line {seen[key]}); "
                "the Pulumi CLI refuses the file: keep one"
            )
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


CliLoader.add_constructor("tag:yaml.org,2002:int", _int_1_2)
CliLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def parse(text: str) -> dict[str, Any]:
    try:
        document = yaml.load(text, Loader=CliLoader)
    except yaml.YAMLError as err:
        raise StackFileError(f"not valid YAML: {err}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise StackFileError("a stack file is a mapping with a `config:` key")
    return document


def config_keys(config: dict[str, Any], project: str = PROJECT) -> dict[str, Any]:
    """The config mapping with every key as the CLI reads it: bare keys in the project's namespace."""
    found: dict[str, Any] = {}
    for key, value in config.items():
        if not isinstance(key, str):
            raise StackFileError(f"config key {key!r} is not a string")
        namespace, sep, rest = key.partition(":")
        full = key if sep else f"{project}:{key}"
        if sep and namespace != project and difflib.SequenceMatcher(None, namespace, project).ratio() >= 0.8:
            raise StackFileError(
                f"config key {key!r}: namespace {namespace!r} is not {project!r} (a typo is ignored by the "
                f"program, so the setting would silently not apply); allowed: {project}:{rest}"
            )
        if full in found:
            raise StackFileError(f"config key {full!r} is given twice (once without its namespace)")
        found[full] = value
    return found


def read(path: Path, project: str = PROJECT) -> dict[str, Any]:
    """The `config:` mapping of a stack file, keys namespaced, values as the CLI parses them."""
    try:
        document = parse(path.read_text())
        return config_keys(document.get("config") or {}, project)
    except StackFileError as err:
        raise StackFileError(f"{path.name}: {err}") from None
