"""The Pulumi CLI's rules for `Pulumi.yaml` and stack configuration, as a fast check.

A model of what pulumi v3.274.0 does on every project load and before every update, written
from its source; the real-engine tests (`tests/test_real_engine.py`) run the real CLI on the
same files, so a rule this module gets wrong is caught there too.

- sdk/go/common/workspace/project.go, `RewriteShorthandConfigValues`: under `config:`, a string,
  integer, boolean or list is shorthand; it becomes `default:` for a key in the project's
  namespace and `value:` for any other key. A mapping is always a declaration.
- same file, `Project.Validate` and `configKeyIsNamespacedByProject`: a key is the project's when it
  has no `:` or starts with `<name>:`. Not both `default` and `value`; a typed array needs
  `items`; a typed default must have its type. A key outside the namespace takes no `type`, no
  `default`, and must have `value`.
- pkg/workspace/config.go, `mergeConfig`: a project key with neither `default` nor `value` that the
  stack does not set is missing, and all missing keys fail the update together; defaults and
  values are merged into the stack's config unencrypted.
- same file, `validateStackConfigValue`: a `secret: true` key must hold a `secure:` value (so a
  declared default for it always fails), and a typed key's value must have its type
  (`ValidateConfigValue` in project.go: integers may be whole floats or digit strings, booleans
  may be "true"/"false").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

TYPES = ("string", "integer", "boolean", "array", "object")


class ProjectError(ValueError):
    """The CLI refuses the project file."""


class StackError(ValueError):
    """The CLI refuses the stack's configuration."""


@dataclass(frozen=True)
class Declaration:
    key: str
    type: str | None
    default: Any
    value: Any
    secret: bool
    items: Any


def _own(project: str, key: str) -> bool:
    return ":" not in key or key.startswith(project + ":")


def _full(project: str, key: str) -> str:
    return key if ":" in key else f"{project}:{key}"


def _type_ok(type_name: str, value: Any) -> bool:  # noqa: PLR0911 - one branch a type, as in project.go
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "integer":
        if isinstance(value, bool):
            return False
        if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
            return True
        return isinstance(value, str) and value.lstrip("-").isdigit()
    if type_name == "boolean":
        return isinstance(value, bool) or value in ("true", "false")
    if type_name == "object":
        return isinstance(value, dict)
    if type_name == "array":
        return isinstance(value, list)
    return False


def declarations(project: Mapping[str, Any]) -> dict[str, Declaration]:
    """Apply shorthand rewriting and `Project.Validate` to a parsed `Pulumi.yaml`."""
    name = project["name"]
    found: dict[str, Declaration] = {}
    for key, given in (project.get("config") or {}).items():
        raw = given
        if isinstance(raw, str | int | bool | list):
            raw = {"default": raw} if _own(name, key) else {"value": raw}
        if not isinstance(raw, dict):
            raise ProjectError(f"Configuration key '{key}' has a value the CLI cannot read: {raw!r}")
        decl = Declaration(
            key=key,
            type=raw.get("type"),
            default=raw.get("default"),
            value=raw.get("value"),
            secret=bool(raw.get("secret")),
            items=raw.get("items"),
        )
        if decl.default is not None and decl.value is not None:
            raise ProjectError(f"project config '{key}' cannot have both a 'default' and 'value' attribute")
        if _own(name, key):
            if decl.type is not None and decl.type not in TYPES:
                raise ProjectError(f"Configuration key '{key}' has an unknown type '{decl.type}'")
            if decl.type == "array" and decl.items is None:
                raise ProjectError(
                    f"The configuration key '{key}' declares an array but does not specify the underlying "
                    "type via the 'items' attribute"
                )
            if decl.type is not None and decl.default is not None and not _type_ok(decl.type, decl.default):
                raise ProjectError(
                    f"The default value specified for configuration key '{key}' is not of the expected type "
                    f"'{decl.type}'"
                )
        else:
            if decl.type is not None:
                raise ProjectError(
                    f"Configuration key '{key}' is not namespaced by the project and should not define a type"
                )
            if decl.default is not None:
                raise ProjectError(
                    f"Configuration key '{key}' is not namespaced by the project and should not define a default "
                    "value. Did you mean to use the 'value' attribute instead of 'default'?"
                )
            if decl.value is None:
                raise ProjectError(f"Configuration key '{key}' is namespaced and must provide an attribute 'value'")
        found[key] = decl
    return found


def merged_config(project: Mapping[str, Any], stack: str, stack_file: Mapping[str, Any]) -> dict[str, Any]:
    """The stack's config after `mergeConfig` and validation, or the CLI's error."""
    name = project["name"]
    decls = declarations(project)
    config: dict[str, Any] = {_full(name, k): v for k, v in (stack_file.get("config") or {}).items()}
    missing = []
    merged_unencrypted: set[str] = set()
    for key in sorted(decls):
        decl = decls[key]
        full = _full(name, key)
        if full in config:
            continue
        if decl.value is None and decl.default is None:
            if _own(name, key):
                missing.append(key)
            continue
        config[full] = decl.default if decl.default is not None else decl.value
        merged_unencrypted.add(full)
    if missing:
        listed = ", ".join(f"'{k if ':' in k else _full(name, k)}'" for k in missing)
        raise StackError(f"Stack '{stack}' is missing configuration value{'s' if len(missing) > 1 else ''} {listed}")
    for key in sorted(decls):
        decl = decls[key]
        full = _full(name, key)
        if full not in config or decl.type is None:
            continue
        value = config[full]
        secure = isinstance(value, dict) and set(value) == {"secure"} and full not in merged_unencrypted
        if decl.secret and not secure:
            raise StackError(f"Stack '{stack}' with configuration key '{key}' must be encrypted as it's secret")
        if not secure and not _type_ok(decl.type, value):
            raise StackError(f"Stack '{stack}' with configuration key '{key}' must be of type '{decl.type}'")
    return config
