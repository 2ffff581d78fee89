"""The configuration a stack's ESC environments give `pulumi up`, for the offline plan.

A stack file's `environment:` imports Pulumi ESC environments; Pulumi Cloud opens them when the CLI
runs the program and the CLI merges their `pulumiConfig` into the stack's config (Pulumi v3.274.0
pkg/workspace/config.go `mergeConfig`). The offline plan cannot open them: it is handed what `pulumi
env open NAME --format detailed` (or `esc env open`) printed for each imported environment, by name
(`VARIABLE`, `make plan ESC_VALUES=...`), and merges those as the CLI does. A stack whose imports
were not all handed over is refused in one line naming the missing ones, never planned without them.

The rules, each from the pinned release, judged against that release's own code by
tests/test_esc_environment.py (tools/engine/pulumi/escconfig, the CLI's evaluator and merge):
- the stack's imports are opened as one anonymous environment importing them in order
  (sdk/go/common/workspace/project.go `Environment.Definition`), so a later import's value wins
  over an earlier one's and two objects are merged key by key (sdk/go/common/esc/eval/value.go
  `merge`);
- a `pulumiConfig` key without a namespace is the project's (pkg/workspace/config.go
  `parseConfigKey`);
- a key the stack file sets wins: an object of the stack's is merged over the environment's key by
  key, anything else replaces it (`mergeConfig`, sdk/go/common/resource/config/object.go `Merge`);
- only a secret string stays secret: a secret number or boolean reaches the program as plain
  config (pkg/workspace/config.go `toPlaintext`).
The plan never holds a secret: an environment's secret string becomes `SECRET_PLACEHOLDER`, and its
key a secret key, as a `secure:` value of the stack file does (plan/engine.py `read_stack_config`).

What it cannot do: an inline environment (`environment:` with `values:`) is evaluated by Pulumi
Cloud (interpolations, `fn::` functions), so it is refused as before.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from domain import bounded_input

# How `make plan ESC_VALUES=...` reaches every offline command (and `plan diff`'s run of the base).
VARIABLE = "TPU_SLICING_ESC_VALUES"
SECRET_PLACEHOLDER = "[secret]"
# `pulumi env open` of one environment is kilobytes; a larger file is refused before it is read.
MAX_BYTES = 1 << 20
OPEN_COMMAND = "pulumi env open {name} --format detailed"


class EscValuesError(ValueError):
    """One line: what is wrong with an opened environment or the way it was handed over."""


@dataclass(frozen=True)
class Merged:
    """The config `pulumi up` hands the program: plain values (objects as Python objects), secret
    strings as `SECRET_PLACEHOLDER`; `secret_keys` are the keys that hold a secret."""

    config: dict[str, Any]
    secret_keys: frozenset[str]


def locations(text: str) -> dict[str, Path]:
    """`NAME=FILE` pairs separated by white space (the variable's form) as a mapping; neither holds
    white space (environment names cannot; a file from `mktemp` does not)."""
    found: dict[str, Path] = {}
    for item in text.split():
        name, sep, file = item.partition("=")
        if not sep or not name or not file:
            raise EscValuesError(
                f"{VARIABLE} item {item!r} is not NAME=FILE; allowed: white-space separated pairs such as "
                f"'team/prod=/tmp/prod.json', each FILE written by `{OPEN_COMMAND.format(name='team/prod')} > FILE`"
            )
        if name in found:
            raise EscValuesError(f"{VARIABLE} names the environment {name!r} twice; allowed: each environment once")
        found[name] = Path(file)
    return found


def locations_from(environ: Mapping[str, str]) -> dict[str, Path]:
    return locations(environ.get(VARIABLE, ""))


def missing_problem(names: Sequence[str], given: Mapping[str, Path]) -> str:
    """The one line for a stack whose imports were not all handed over."""
    missing = [n for n in names if n not in given]
    shown = ", ".join(missing)
    pairs = " ".join(f"{n}=FILE" for n in missing)
    return (
        f"imports the ESC environment(s) {shown}, whose pulumiConfig values `pulumi up` gets and the offline plan "
        f"was not given: a plan without them would not be the stack `pulumi up` deploys; allowed: "
        f"`{OPEN_COMMAND.format(name=missing[0])} > FILE` for each, then `make plan ESC_VALUES='{pairs}'` "
        f"({VARIABLE} for `python -m plan`), or a stack file with no `environment:` (docs/deploy.md, ESC environments)"
    )


def _read_bytes(path: Path, name: str) -> bytes:
    try:
        kind = stat.S_IFMT(os.stat(path).st_mode)
        if kind != stat.S_IFREG:  # a pipe would be empty for the second stack or `plan diff`'s base run
            raise EscValuesError(f"the opened environment {name} ({path}) is not a regular file; allowed: a file")
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as err:
        raise EscValuesError(
            f"the opened environment {name} ({path}) cannot be read ({err.strerror or err.__class__.__name__}); "
            f"allowed: the file `{OPEN_COMMAND.format(name=name)} > FILE` wrote"
        ) from None
    if len(data) > MAX_BYTES:
        raise EscValuesError(
            f"the opened environment {name} ({path}) is over {MAX_BYTES} bytes; allowed: one environment"
        )
    return data


def _go_float(text: str) -> int | float:
    """A JSON number as the CLI hands it on: an int64 if it is one, else a float64, written back to
    JSON by Go without a fraction or exponent when it has none (pkg/workspace/config.go `toPlaintext`)."""
    number = float(text)
    return int(number) if number.is_integer() and abs(number) < 1e21 else number


def _go_int(text: str) -> int | float:
    number = int(text)
    return number if -(1 << 63) <= number < (1 << 63) else _go_float(text)


def read_opened(name: str, path: Path) -> dict[str, Any] | None:
    """The detailed `pulumiConfig` value of one opened environment (None when it has none). The
    file is what `pulumi env open NAME --format detailed` prints: esc.Value JSON, each value a
    `{"value": ..., "secret": ..., "trace": ...}` object (cmd/esc/cli/env_open.go `renderValue`)."""
    where = f"the opened environment {name} ({path})"
    try:
        text = _read_bytes(path, name).decode("utf-8")
        document = bounded_input.load_json(text, parse_int=_go_int, parse_float=_go_float)
    except UnicodeDecodeError:
        document = None
    except bounded_input.InputError as err:
        if "nests" not in str(err) and "integer of" not in str(err):
            document = None
        else:
            raise EscValuesError(f"{where} {err}") from None
    if not _detailed(document) or not isinstance(document["value"], dict):
        raise EscValuesError(
            f"{where} is not an environment opened with `--format detailed` (JSON objects with value, secret "
            f"and trace, which keep which values are secret); allowed: `{OPEN_COMMAND.format(name=name)} > FILE`"
        )
    config = document["value"].get("pulumiConfig")
    if config is None:
        return None
    _check_known(config, f"{where}: pulumiConfig")
    if not isinstance(config.get("value"), dict):
        raise EscValuesError(f"{where}: pulumiConfig is not an object; allowed: an object of config keys")
    return dict(config)


def _detailed(value: Any) -> bool:
    return isinstance(value, dict) and "trace" in value and set(value) <= {"value", "secret", "unknown", "trace"}


def _check_known(value: Any, where: str) -> None:
    if not _detailed(value):
        raise EscValuesError(f"{where} is not a detailed value; allowed: `--format detailed` output")
    if value.get("unknown"):
        raise EscValuesError(f"{where} is unknown (an environment checked, not opened); allowed: an opened environment")
    inner = value.get("value")
    if isinstance(inner, dict):
        for key, item in inner.items():
            _check_known(item, f"{where}.{key}")
    elif isinstance(inner, list):
        for index, item in enumerate(inner):
            _check_known(item, f"{where}[{index}]")


def merge_imports(opened: Sequence[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The `pulumiConfig` of an environment importing these in order: a later value over an earlier
    one, two objects merged key by key (sdk/go/common/esc/eval/value.go `merge`)."""
    merged: dict[str, Any] | None = None
    for value in opened:
        if value is not None:
            merged = value if merged is None else _merge_detailed(value, merged)
    return merged


def _merge_detailed(top: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    top_value, base_value = top.get("value"), base.get("value")
    if isinstance(top_value, dict) and isinstance(base_value, dict):
        keys = {**base_value, **top_value}
        return {
            **top,
            "value": {
                k: _merge_detailed(top_value[k], base_value[k]) if k in top_value and k in base_value else keys[k]
                for k in keys
            },
        }
    return top


class _Secret:
    """An environment's secret string while the merge runs: the plan never holds its text."""


_SECRET = _Secret()


def _plain(value: dict[str, Any], where: str) -> Any:
    """A detailed value as the program gets it (`toPlaintext`: only strings keep their secret flag)."""
    inner = value.get("value")
    if isinstance(inner, dict):
        if set(inner) == {"secure"} and isinstance(inner["secure"].get("value"), str):
            raise EscValuesError(
                f"the environment's pulumiConfig.{where} is a mapping of the one key `secure`, which Pulumi reserves "
                "for encrypted stack values (sdk/go/common/resource/config/object.go); allowed: any other key"
            )
        return {k: _plain(v, f"{where}.{k}") for k, v in inner.items()}
    if isinstance(inner, list):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(inner)]
    if isinstance(inner, str) and value.get("secret"):
        return _SECRET
    return inner


def _secured(value: Any) -> Any:
    """A stack file's value with each `secure:` value, at any depth, as a secret (sdk/go/common/
    resource/config/object.go: a mapping of the one key `secure` to a string is a ciphertext)."""
    if isinstance(value, dict) and set(value) == {"secure"} and isinstance(value["secure"], str):
        return _SECRET
    if isinstance(value, dict):
        return {k: _secured(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_secured(v) for v in value]
    return value


def _redacted(value: Any) -> tuple[Any, bool]:
    """`value` with each secret as `SECRET_PLACEHOLDER`, and whether it held one."""
    if value is _SECRET:
        return SECRET_PLACEHOLDER, True
    if isinstance(value, dict):
        pairs = {k: _redacted(v) for k, v in value.items()}
        return {k: v for k, (v, _) in pairs.items()}, any(s for _, s in pairs.values())
    if isinstance(value, list):
        items = [_redacted(v) for v in value]
        return [v for v, _ in items], any(s for _, s in items)
    return value, False


def _merge_stack_over(stack: Any, env: Any) -> Any:
    """config.Value.Merge: the stack's object merged over the environment's, key by key; anything
    else of the stack's wins whole (sdk/go/common/resource/config/object.go `Merge`)."""
    if isinstance(stack, dict) and isinstance(env, dict):
        merged = dict(env)
        for key, value in stack.items():
            merged[key] = _merge_stack_over(value, env[key]) if key in env else value
        return merged
    return stack


def _config_key(raw: str, project: str) -> str:
    """A pulumiConfig key as the CLI parses it (pkg/workspace/config.go `parseConfigKey`, then
    sdk/go/common/resource/config/key.go `ParseKey`): bare, the project's; `ns:name`; the old
    `ns:config:name` form as `ns:name`; anything else refused."""
    parts = raw.split(":")
    if len(parts) == 1:
        return f"{project}:{raw}"
    if len(parts) == 2:
        return raw
    if len(parts) == 3 and parts[1] == "config" and parts[0] and parts[2]:
        return f"{parts[0]}:{parts[2]}"
    raise EscValuesError(
        f"the environment's pulumiConfig key {raw!r} is not a configuration key; allowed: `<namespace>:<name>` "
        "or a bare name (the project's), as `pulumi up` parses them"
    )


def merge(stack: Mapping[str, Any], environment: dict[str, Any] | None, project: str) -> Merged:
    """The stack file's config (keys namespaced, `secure:` values as `{"secure": ...}`) with the
    environment's `pulumiConfig` merged in as `pulumi up` merges it; every secret, the stack's and
    the environment's, as `SECRET_PLACEHOLDER`."""
    config: dict[str, Any] = {}
    # A key holding a secret anywhere is secret, as the CLI marks it; that exempts no plain value beside
    # the secret from the credential check, which reads every leaf (settings/credentials.py).
    secret_keys: set[str] = set()
    for key, value in stack.items():
        config[key], secret = _redacted(_secured(value))
        if secret:
            secret_keys.add(key)
    entries = (environment or {}).get("value") or {}
    seen: dict[str, str] = {}
    for raw_key, detailed in entries.items():
        key = _config_key(raw_key, project)
        if key in seen:
            raise EscValuesError(
                f"the environment's pulumiConfig sets {key!r} twice ({seen[key]!r} and {raw_key!r}), and "
                "`pulumi up` would take either; allowed: each key once"
            )
        seen[key] = raw_key
        value, secret = _redacted(
            _merge_stack_over(config[key], _plain(detailed, raw_key)) if key in config else _plain(detailed, raw_key)
        )
        if secret:
            secret_keys.add(key)
        config[key] = value
    return Merged(config=config, secret_keys=frozenset(secret_keys))
