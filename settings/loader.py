"""Turn Pulumi stack configuration into a validated `StackConfig`, or one clear error."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from domain.maxtext_models import BY_IMAGE_TAG
from domain.model_catalog import CATALOG
from domain.saxml_servables import SERVABLES
from settings import credentials, provider_keys, stack_file
from settings.base import ProblemsError
from settings.model import ServingConfig, StackConfig

NAMESPACE = "tpu-slicing"
# Where `pulumi up` runs the program and reads `Pulumi.<stack>.yaml` (Pulumi.yaml sets no stackConfigDir).
ROOT = Path(__file__).resolve().parent.parent
SECRET_KEYS = frozenset({"hfToken"})
PROVIDER_SECRETS = frozenset({"gcp:credentials", "gcp:accessToken"})


# Names the program's own catalogs publish: a refusal may show them although one is a long mixed piece.
PUBLIC_NAMES = (*SERVABLES, *CATALOG, *(name for models in BY_IMAGE_TAG.values() for name in models))


class ConfigError(ValueError):
    """Invalid stack configuration. Raised before any resource is registered."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid stack configuration ({len(problems)} problem(s)):\n{lines}")


def _key_path(loc: Iterable[int | str]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            # pydantic reports aliases for fields, but enum/union tags in snake_case.
            name = part if part[:1].islower() and "_" not in part else to_camel(part)
            path += f".{name}" if path else name
    return f"{NAMESPACE}:{path}" if path else NAMESPACE


def _problems(err: ValidationError) -> list[str]:
    problems = []
    for item in err.errors(include_url=False):
        key = _key_path(item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "missing":
            message = "is required"
        elif not item["loc"]:
            # Cross-field rules name their own keys at the start of the message, each rule one problem.
            error = (item.get("ctx") or {}).get("error")
            found = error.problems if isinstance(error, ProblemsError) else [message]
            problems += [f"{NAMESPACE}:{one}" for one in found]
            continue
        elif item["type"] != "value_error" and not isinstance(item.get("input"), dict | list):
            shown = "[secret]" if any(k in key for k in SECRET_KEYS) else _shown(item.get("input"))
            message = f"{shown} is not allowed: {message}"
        problems.append(f"{key}: {message}")
    return problems


def _shown(value: Any) -> str:
    """A refused value as its message shows it: URL userinfo, queries and credential-shaped words masked
    (settings/credentials.py), in case a credential of a kind no rule knows got this far."""
    return repr(credentials.masked(value)) if isinstance(value, str) else repr(value)


def _decode(value: Any) -> Any:
    """Pulumi hands structured config values to programs as JSON text."""
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def load(
    raw: Mapping[str, Any],
    *,
    stack: str,
    project: str | None,
    secret_keys: Iterable[str] = (),
    secret_leaves: Iterable[str] | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> StackConfig:
    """Validate the `tpu-slicing:*` keys of one stack.

    `raw` maps full config keys (`tpu-slicing:zone`, `gcp:project`, ...) to values
    as the engine provides them; `secret_keys` are the keys set with --secret, or holding a secret
    anywhere inside; `secret_leaves` which values inside them are the secrets, when the engine handed
    them decrypted (`secure_leaves`; offline they are placeholders). `clock` is read
    once: the moment rules bound in time judge at (a maintenance exclusion in force now), fixed by tests.
    A refusal shows no value of the stack that could be a secret (settings/credentials.py `redact`),
    whichever rule wrote it.
    """
    try:
        return _judged(
            raw, stack=stack, project=project, secret_keys=secret_keys, secret_leaves=secret_leaves, clock=clock
        )
    except ConfigError as err:
        given = credentials.given_strings({k: _decode(v) for k, v in raw.items()})
        raise ConfigError([credentials.redact(p, given, PUBLIC_NAMES) for p in err.problems]) from None


def _judged(
    raw: Mapping[str, Any],
    *,
    stack: str,
    project: str | None,
    secret_keys: Iterable[str],
    secret_leaves: Iterable[str] | None,
    clock: Callable[[], datetime],
) -> StackConfig:
    secrets = set(secret_keys)
    leaves = frozenset(secret_leaves or ())
    decoded = {full_key: _decode(value) for full_key, value in raw.items()}
    data: dict[str, Any] = {}
    for full_key, value in decoded.items():
        namespace, _, key = full_key.partition(":")
        if namespace == NAMESPACE:
            data[key] = value
    # A key of a namespace nothing reads would silently not apply (a typo, a look-alike letter,
    # kubernetes:kubeconfig): refused here, so `pulumi up` refuses what `make plan` refuses.
    problems = stack_file.namespace_problems(raw, NAMESPACE)
    for key in sorted(SECRET_KEYS & data.keys()):
        if f"{NAMESPACE}:{key}" not in secrets:
            problems.append(
                f"{NAMESPACE}:{key}: is stored in plain text; set it with "
                f"`pulumi config set --secret {NAMESPACE}:{key}` (allowed: a Pulumi secret only)"
            )
    # A provider credential in a committed stack file is a leaked credential: secrets only.
    for key in sorted(k for k in raw if k in PROVIDER_SECRETS and k not in secrets):
        problems.append(
            f"{key}: is stored in plain text; set it with `pulumi config set --secret {key}` "
            "or leave it out and use Application Default Credentials (allowed: a Pulumi secret only)"
        )
    # A token or key in an ordinary setting is refused alone: validating the rest could echo it in a
    # message (a value that breaks a rule is shown), and a leaked credential is the first thing to fix.
    # Every plain value is read, a secret's siblings too (settings/credentials.py `plain_credentials`).
    plain = {k: v for k, v in decoded.items() if k not in PROVIDER_SECRETS and k != f"{NAMESPACE}:hfToken"}
    leaked = credentials.plain_credentials(plain, secrets, leaves)
    # The gcp: and pulumi: keys the provider and the engine read, judged like the program's own; each
    # check reads its own key only, so a key that holds no credential is judged beside a leak elsewhere.
    clean = {k: v for k, v in decoded.items() if not credentials.plain_credentials({k: v}, secrets, leaves)}
    if leaked:
        raise ConfigError(problems + leaked + provider_keys.problems(clean, secrets))
    problems += provider_keys.problems(clean, secrets)
    data.setdefault("namePrefix", stack)
    if data.pop("project", None) is not None:
        problems.append(f"{NAMESPACE}:project: is not a key of this project; set gcp:project instead")
    if project:
        data["project"] = project
    else:
        problems.append("gcp:project: is required: the Google Cloud project to create everything in")
    # Validated even when the checks above found problems: a stack missing several required keys
    # hears of all of them at once, not one per run.
    try:
        config = StackConfig.model_validate(data, context={"now": clock(), "backend": _backend(data)})
    except ValidationError as err:
        problems += _as_stack_file_keys(_problems(err), gcp_project=bool(project))
        raise ConfigError(problems) from None
    if problems:
        raise ConfigError(problems)
    return config


def _backend(data: Mapping[str, Any]) -> Any:
    """The backend the stack names (the model's default when it names none), for rules on a field that
    depend on it (settings/rules_serving.py smoke_deadline)."""
    serving = data.get("serving")
    default = ServingConfig.model_fields["backend"].default
    return serving.get("backend", default) if isinstance(serving, Mapping) else default


def _as_stack_file_keys(problems: list[str], *, gcp_project: bool) -> list[str]:
    """The model's problems under the keys the stack file sets: the project comes from gcp:project
    (its absence is reported as such already)."""
    own = f"{NAMESPACE}:project:"
    if not gcp_project:
        return [p for p in problems if not p.startswith(own)]
    return [f"gcp:project:{p.removeprefix(own)}" if p.startswith(own) else p for p in problems]


def from_runtime() -> StackConfig:
    """Read the running stack's configuration, as the engine (or the mock engine) set it."""
    import pulumi
    from pulumi.runtime import config as runtime_config

    raw: dict[str, Any] = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    secret_keys = set(runtime_config.get_config_secret_keys_env())
    secret_keys |= {key for key in raw if runtime_config.is_config_secret(key)}
    gcp_project = raw.get("gcp:project")

    class RefusedConfigError(ConfigError, pulumi.RunError):
        """Also a RunError, which the language host prints as its message alone, no traceback
        (sdk/python/cmd/pulumi-language-python-exec: `except pulumi.RunError as e: pulumi.log.error(str(e))`)."""

    stack = pulumi.get_stack()
    leaves = secure_leaves(raw, secret_keys, ROOT / f"Pulumi.{stack}.yaml")
    try:
        return load(raw, stack=stack, project=gcp_project, secret_keys=secret_keys, secret_leaves=leaves)
    except ConfigError as err:
        raise RefusedConfigError(err.problems) from None


def _secure_paths(value: Any, path: str) -> Iterator[str]:
    """The path of each `secure:` value in a stack file's value (a mapping of the one key `secure` to a
    string, sdk/go/common/resource/config/object.go), as settings/credentials.py writes paths."""
    if isinstance(value, Mapping):
        if set(value) == {"secure"} and isinstance(value["secure"], str):
            yield path
            return
        for key, inner in value.items():
            yield from _secure_paths(inner, f"{path}.{key}")
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _secure_paths(inner, f"{path}[{index}]")


def secure_leaves(raw: Mapping[str, Any], secret_keys: Iterable[str], path: Path) -> frozenset[str]:
    """Which values of the secret keys are the secrets, when `pulumi up` hands them decrypted.

    The CLI marks a whole key secret when a `secure:` value sits anywhere inside it and hands the
    program the decrypted object (PULUMI_CONFIG_SECRET_KEYS names keys, not paths), so the secrets are
    read from the stack file itself: the paths of its `secure:` values. Read only when a secret key is
    structured. An ESC environment's secret inside an object, or a stack file that cannot be read,
    leaves no path: every leaf of that key is then judged as plain, and refused if shaped like a
    credential (the program writes such a leaf into pods in plain text at `pulumi up` anyway)."""
    if not any(isinstance(_decode(raw.get(key)), dict | list) for key in secret_keys):
        return frozenset()
    try:
        document = stack_file.parse(stack_file.decode(stack_file.read_bytes(path)))
        config = stack_file.config_keys(document.get("config") or {}, NAMESPACE)
    except stack_file.StackFileError:
        return frozenset()
    return frozenset(leaf for key, value in config.items() for leaf in _secure_paths(value, key))
