"""Offline validation of Kubernetes objects against pinned upstream schemas.

The project generates Kueue, JobSet, LWS, Gateway API and Inference Extension
objects that otherwise only a live API server would check. ``CrdRegistry``
mirrors what the API server does with a structural CRD schema -- defaulting,
pruning, OpenAPI value validation and ``x-kubernetes-validations`` CEL rules --
so tests catch mistakes without a cluster. Pruned (undeclared) fields and null
values are reported as errors here, because the API server drops them silently
and a generator that emits them has a bug. Built-in kinds are checked with
kubernetes-validate instead (``validate_core``).
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime
import functools
import ipaddress
import itertools
import json
import math
import operator
import os
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import celpy
import kubernetes_validate
import lark
import re2
import yaml
from celpy import celtypes
from celpy.evaluation import CELEvalError, CELUnsupportedError, base_functions
from kubernetes_validate.utils import VersionNotSupportedError

__all__ = [
    "CRD_ROOT_ENV",
    "DEFAULT_K8S_VERSION",
    "CrdLoadError",
    "CrdRegistry",
    "CrdVersion",
    "UnevaluatedRule",
    "crd_cache",
    "crd_root",
    "validate_core",
]

CRD_ROOT_ENV = "TPU_SLICING_CRDS"
CRD_CACHE_ENV = "TPU_SLICING_CRD_CACHE"  # where `make crds` puts them
# kubernetes-validate 1.37.0 ships schemas for 1.25 ... 1.37; 1.36 is the newest
# release that is not newer than the clusters we target (<= 1.36).
DEFAULT_K8S_VERSION = "1.36.0"

Schema = Mapping[str, Any]
JsonPath = tuple[str | int, ...]


def crd_root() -> Path | None:
    """Directory holding ``<component>/<version>/*.yaml`` CRDs, or None if absent.

    `make crds` (tools/crds/fetch.sh) lays them out from each component's Go module at the pinned
    version, outside the repository; TPU_SLICING_CRDS names another folder of the same layout."""
    configured = os.environ.get(CRD_ROOT_ENV, "").strip()
    root = Path(configured) if configured else crd_cache()
    return root if root.is_dir() else None


def crd_cache() -> Path:
    configured = os.environ.get(CRD_CACHE_ENV, "").strip()
    return Path(configured) if configured else Path.home() / ".cache" / "tpu-slicing" / "crds"


class CrdLoadError(RuntimeError):
    """A pinned component/version directory or CRD file is missing or unusable."""


class UnevaluatedRule(NamedTuple):
    """A CEL rule this validator does not check, and why (never silently skipped)."""

    crd: str  # CRD metadata.name, e.g. clusterqueues.kueue.x-k8s.io
    path: str  # "<version>:<schema path>", e.g. v1beta2:spec.resourceGroups[*]
    rule: str
    reason: str


@dataclass(frozen=True)
class CrdVersion:
    """One version of one CRD, as loaded from the upstream YAML."""

    crd_name: str
    group: str
    kind: str
    version: str
    namespaced: bool
    served: bool
    storage: bool
    deprecated: bool
    deprecation_warning: str | None
    status_subresource: bool
    schema: Schema
    source: Path


# --------------------------------------------------------------------------
# Small JSON helpers
# --------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """Deep copy into plain dict/list, as the object would be serialised to JSON."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        # Pulumi passes every number as a float64, and Go encodes 2000.0 as 2000;
        # the API server likewise accepts integral numbers for `integer` fields.
        return int(value)
    return value


# bool before int: bool is an int subclass in Python but not in JSON.
_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "integer"),
    (str, "string"),
    (dict, "object"),
    (list, "array"),
    (type(None), "null"),
)


def _json_type(value: Any) -> str | None:
    """JSON type name of a value, or None when it would not serialise to JSON."""
    if isinstance(value, float):
        return "number" if math.isfinite(value) else None
    return next((name for python_type, name in _JSON_TYPES if isinstance(value, python_type)), None)


def _describe(value: Any) -> str:
    kind = _json_type(value)
    return kind if kind is not None else f"non-JSON value of Python type {type(value).__name__}"


def _canonical(value: Any) -> str:
    # Compares like JSON does: True != 1 and 1 != 1.0, unlike Python's ==.
    return json.dumps(value, sort_keys=True, default=repr)


def _show(value: Any, limit: int = 80) -> str:
    text = _canonical(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_SIMPLE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _format_path(path: JsonPath) -> str:
    out = ""
    for segment in path:
        if isinstance(segment, int):
            out += f"[{segment}]"
        elif _SIMPLE_KEY.match(segment):
            out += f".{segment}" if out else segment
        else:
            # Map keys such as label names contain dots and slashes.
            out += f"[{segment}]"
    return out or "<root>"


# --------------------------------------------------------------------------
# ObjectMeta checks (the API server validates metadata itself, not the CRD schema)
# --------------------------------------------------------------------------

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)
_ANNOTATIONS_MAX_BYTES = 256 * 1024

# Built-in kinds whose name rules differ from the DNS-1123 subdomain default.
_CORE_NAME_RULES: Mapping[str, str] = {
    "Namespace": "dns1123-label",
    "Service": "dns1035-label",
    "Role": "path-segment",
    "ClusterRole": "path-segment",
    "RoleBinding": "path-segment",
    "ClusterRoleBinding": "path-segment",
}

# Built-in cluster-scoped kinds: a namespace on them is an error (kubernetes-validate
# does not know about scope).
_CORE_CLUSTER_SCOPED = frozenset(
    {
        "APIService",
        "CSIDriver",
        "CSINode",
        "CertificateSigningRequest",
        "ClusterRole",
        "ClusterRoleBinding",
        "ClusterTrustBundle",
        "CustomResourceDefinition",
        "DeviceClass",
        "FlowSchema",
        "IPAddress",
        "IngressClass",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "MutatingWebhookConfiguration",
        "Namespace",
        "Node",
        "PersistentVolume",
        "PriorityClass",
        "PriorityLevelConfiguration",
        "ResourceSlice",
        "RuntimeClass",
        "ServiceCIDR",
        "StorageClass",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration",
        "VolumeAttachment",
        "VolumeAttributesClass",
    }
)


def _name_errors(name: str, rule: str) -> list[str]:
    if rule == "path-segment":
        if name in (".", "..") or "/" in name or "%" in name:
            return ["may not be '.' or '..' and may not contain '/' or '%'"]
        return []
    if rule == "dns1123-label":
        ok, limit, what = _DNS1123_LABEL.match(name), 63, "RFC 1123 label"
    elif rule == "dns1035-label":
        ok, limit, what = _DNS1035_LABEL.match(name), 63, "RFC 1035 label"
    else:
        ok, limit, what = _DNS1123_SUBDOMAIN.match(name), 253, "RFC 1123 subdomain"
    errors = []
    if len(name) > limit:
        errors.append(f"must be no more than {limit} characters")
    if not ok:
        errors.append(
            f"a lowercase {what} must consist of lower case alphanumeric characters, '-'"
            + (" or '.'" if rule == "dns1123-subdomain" else "")
            + ", and must start and end with an alphanumeric character"
        )
    return errors


def _qualified_name_errors(key: str) -> list[str]:
    """Label/annotation key syntax: optional DNS subdomain prefix, '/', name <= 63."""
    prefix, slash, name = key.rpartition("/")
    errors = []
    if slash:
        if not prefix:
            errors.append("prefix part must be non-empty")
        elif len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix):
            errors.append("prefix part must be a lowercase RFC 1123 subdomain")
        if "/" in prefix:
            errors.append("a qualified name may contain at most one '/'")
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part must be no more than 63 characters")
    elif not _QUALIFIED_NAME.match(name):
        errors.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return errors


def _object_meta_errors(obj: Mapping[str, Any], namespaced: bool | None, name_rule: str) -> list[str]:
    """Errors in metadata; namespaced=None skips the namespace presence check."""
    meta = obj.get("metadata")
    if meta is None:
        return ["metadata: Required value"]
    if not isinstance(meta, Mapping):
        return [f"metadata: Invalid value: {_describe(meta)}: must be an object"]
    errors: list[str] = []
    for key in meta:
        if key not in _OBJECT_META_FIELDS:
            errors.append(f"metadata.{key}: unknown ObjectMeta field (the API server would drop it)")

    name = meta.get("name")
    if name is None or name == "":
        errors.append("metadata.name: Required value")
    elif not isinstance(name, str):
        errors.append(f"metadata.name: Invalid value: {_describe(name)}: must be a string")
    else:
        errors += [f"metadata.name: Invalid value: {name!r}: {msg}" for msg in _name_errors(name, name_rule)]

    namespace = meta.get("namespace")
    if namespace not in (None, ""):
        if not isinstance(namespace, str):
            errors.append(f"metadata.namespace: Invalid value: {_describe(namespace)}: must be a string")
        else:
            errors += [
                f"metadata.namespace: Invalid value: {namespace!r}: {msg}"
                for msg in _name_errors(namespace, "dns1123-label")
            ]
        if namespaced is False:
            errors.append(
                f"metadata.namespace: Forbidden: {obj.get('kind')} is cluster-scoped and must not set a namespace"
            )
    elif namespaced is True:
        errors.append(f"metadata.namespace: Required value: {obj.get('kind')} is namespaced")

    for field in ("labels", "annotations"):
        entries = meta.get(field)
        if entries is None:
            continue
        if not isinstance(entries, Mapping):
            errors.append(f"metadata.{field}: Invalid value: {_describe(entries)}: must be an object")
            continue
        total = 0
        for key, value in entries.items():
            where = _format_path(("metadata", field, str(key)))
            if not isinstance(key, str):
                errors.append(f"{where}: keys must be strings")
                continue
            errors += [f"{where}: Invalid value: {key!r}: {msg}" for msg in _qualified_name_errors(key)]
            if not isinstance(value, str):
                errors.append(f"{where}: Invalid value: {_describe(value)}: must be a string")
                continue
            total += len(key.encode()) + len(value.encode())
            if field == "labels":
                if len(value) > 63:
                    errors.append(f"{where}: Invalid value: {value!r}: must be no more than 63 characters")
                elif not _LABEL_VALUE.match(value):
                    errors.append(
                        f"{where}: Invalid value: {value!r}: a valid label must be an empty string or consist "
                        "of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                        "alphanumeric character"
                    )
        if field == "annotations" and total > _ANNOTATIONS_MAX_BYTES:
            errors.append(f"metadata.annotations: Too long: must have at most {_ANNOTATIONS_MAX_BYTES} bytes")

    finalizers = meta.get("finalizers")
    if finalizers is not None:
        if not isinstance(finalizers, list):
            errors.append(f"metadata.finalizers: Invalid value: {_describe(finalizers)}: must be an array")
        else:
            for index, item in enumerate(finalizers):
                if not isinstance(item, str) or _qualified_name_errors(item):
                    errors.append(f"metadata.finalizers[{index}]: Invalid value: {_show(item)}: not a qualified name")
    return errors


# --------------------------------------------------------------------------
# CEL: Kubernetes library functions that celpy lacks, and rule compilation
# --------------------------------------------------------------------------


def _strings(*values: Any) -> list[str]:
    # Raising TypeError makes celpy report "no such overload", as cel-go would.
    for value in values:
        if not isinstance(value, str):
            raise TypeError(f"expected string, got {type(value).__name__}")
    return [str(value) for value in values]


def _cel_split(text: Any, sep: Any, limit: Any = -1) -> celtypes.ListType:
    # Go strings.SplitN semantics (Kubernetes strings library).
    text_s, sep_s = _strings(text, sep)
    count = int(limit)
    if count == 0:
        return celtypes.ListType([])
    if sep_s == "":
        parts = list(text_s)
        if 0 < count < len(parts):
            parts = [*parts[: count - 1], "".join(parts[count - 1 :])]
    else:
        parts = text_s.split(sep_s) if count < 0 else text_s.split(sep_s, count - 1)
    return celtypes.ListType([celtypes.StringType(part) for part in parts])


def _cel_join(items: Any, sep: Any = "") -> celtypes.StringType:
    (sep_s,) = _strings(sep)
    return celtypes.StringType(sep_s.join(_strings(*items)))


def _ascii_case(text: Any, upper: bool) -> celtypes.StringType:
    (text_s,) = _strings(text)
    low, high = ("a", "z") if upper else ("A", "Z")
    return celtypes.StringType("".join(chr(ord(c) ^ 0x20) if low <= c <= high else c for c in text_s))


def _cel_replace(text: Any, old: Any, new: Any, limit: Any = -1) -> celtypes.StringType:
    text_s, old_s, new_s = _strings(text, old, new)
    return celtypes.StringType(text_s.replace(old_s, new_s, int(limit)))


def _cel_index_of(container: Any, item: Any, offset: Any = 0) -> celtypes.IntType:
    if isinstance(container, list):  # lists library
        for index, value in enumerate(container):
            if _canonical(value) == _canonical(item):
                return celtypes.IntType(index)
        return celtypes.IntType(-1)
    text_s, item_s = _strings(container, item)
    start = int(offset)
    if not 0 <= start <= len(text_s):
        raise ValueError("index out of range")
    return celtypes.IntType(text_s.find(item_s, start))


def _cel_last_index_of(container: Any, item: Any) -> celtypes.IntType:
    if isinstance(container, list):
        matches = [i for i, value in enumerate(container) if _canonical(value) == _canonical(item)]
        return celtypes.IntType(matches[-1] if matches else -1)
    text_s, item_s = _strings(container, item)
    return celtypes.IntType(text_s.rfind(item_s))


def _cel_substring(text: Any, start: Any, end: Any = None) -> celtypes.StringType:
    (text_s,) = _strings(text)
    first = int(start)
    last = len(text_s) if end is None else int(end)
    if not 0 <= first <= last <= len(text_s):
        raise ValueError("substring index out of range")
    return celtypes.StringType(text_s[first:last])


def _cel_char_at(text: Any, index: Any) -> celtypes.StringType:
    (text_s,) = _strings(text)
    position = int(index)
    if not 0 <= position <= len(text_s):
        raise ValueError("index out of range")
    return celtypes.StringType(text_s[position : position + 1])


def _cel_is_sorted(items: Any) -> celtypes.BoolType:
    values = list(items)
    return celtypes.BoolType(all(a <= b for a, b in itertools.pairwise(values)))


def _cel_sum(items: Any) -> Any:
    values = list(items)
    return functools.reduce(operator.add, values) if values else celtypes.IntType(0)


def _cel_max(items: Any) -> Any:
    values = list(items)
    if not values:
        raise ValueError("max of an empty list")
    return max(values)


# Subset of the Kubernetes CEL libraries (strings, lists) that celpy lacks.
_K8S_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "split": _cel_split,
    "join": _cel_join,
    "lowerAscii": lambda text: _ascii_case(text, upper=False),
    "upperAscii": lambda text: _ascii_case(text, upper=True),
    "trim": lambda text: celtypes.StringType(_strings(text)[0].strip()),
    "replace": _cel_replace,
    "indexOf": _cel_index_of,
    "lastIndexOf": _cel_last_index_of,
    "substring": _cel_substring,
    "charAt": _cel_char_at,
    "isSorted": _cel_is_sorted,
    "sum": _cel_sum,
    "max": _cel_max,
}
# Macro name -> argument count that celpy implements (map/3 and friends are missing).
_CEL_MACROS: Mapping[str, int] = {"has": 1, "all": 2, "exists": 2, "exists_one": 2, "filter": 2, "map": 2}
_CEL_CALLABLES = frozenset(base_functions) | frozenset(_K8S_FUNCTIONS)
# CEL keywords that Kubernetes exposes as __keyword__ when used as property names.
_CEL_RESERVED = frozenset(
    {
        *("true", "false", "null", "in", "as", "break", "const", "continue", "else", "for", "function"),
        *("if", "import", "let", "loop", "package", "namespace", "return", "var", "void", "while"),
    }
)


def _cel_escape(name: str) -> str | None:
    """Kubernetes' escaping of property names for CEL field selection."""
    if name in _CEL_RESERVED:
        return f"__{name}__"
    if not re.match(r"^[a-zA-Z_.\-/][a-zA-Z0-9_.\-/]*$", name):
        return None
    return (
        name.replace("__", "__underscores__").replace(".", "__dot__").replace("-", "__dash__").replace("/", "__slash__")
    )


def _cel_problem(ast: lark.Tree) -> str | None:
    """Why celpy cannot evaluate an expression faithfully, or None if it can."""
    for node in ast.iter_subtrees():
        kind = str(node.data)
        if kind == "ident" and str(node.children[0]) == "oldSelf":
            return "transition rule: references oldSelf, which only exists on update"
        if kind not in ("member_dot_arg", "ident_arg", "dot_ident_arg"):
            continue
        name_at = 1 if kind == "member_dot_arg" else 0
        name = str(node.children[name_at])
        rest = node.children[name_at + 1 :]
        args = rest[0].children if rest and isinstance(rest[0], lark.Tree) else []
        if name in _CEL_MACROS:
            if len(args) != _CEL_MACROS[name]:
                return f"macro {name}() with {len(args)} arguments is not implemented by celpy"
        elif name not in _CEL_CALLABLES:
            return f"function {name}() is neither in celpy nor bound by this validator"
    return None


class _CelCompiler:
    """Compiles each distinct rule text once; a str result is why it can't run."""

    def __init__(self) -> None:
        self._env = celpy.Environment()  # InterpretedRunner: CompiledRunner mis-evaluates ?: with errors
        self._cache: dict[str, celpy.Runner | str] = {}

    def compile(self, text: str) -> celpy.Runner | str:
        cached = self._cache.get(text)
        if cached is None:
            cached = self._compile(text)
            self._cache[text] = cached
        return cached

    def _compile(self, text: str) -> celpy.Runner | str:
        try:
            ast = self._env.compile(text)
        except Exception as exc:  # celpy raises CELParseError and lark errors
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return f"celpy cannot parse it: {first_line}"
        problem = _cel_problem(ast)
        if problem is not None:
            return problem
        return self._env.program(ast, functions=_K8S_FUNCTIONS)


@functools.cache
def _shared_cel_compiler() -> _CelCompiler:
    # Building celpy's LALR parser takes ~0.5 s; compiled rules don't depend on
    # the registry, so all registries share one compiler and its cache.
    return _CelCompiler()


def _cel_scalar(value: Any, schema: Schema) -> Any:
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int) and schema.get("type") != "number":
        return celtypes.IntType(value)
    if isinstance(value, (int, float)):
        return celtypes.DoubleType(value)  # `number` fields are doubles even when integral
    if isinstance(value, str):
        return celtypes.StringType(value)
    raise TypeError(f"cannot convert {type(value).__name__} to CEL")


def _to_cel(value: Any, schema: Schema) -> Any:
    """Schema-aware conversion, like the API server's: pruned fields are invisible,
    `number` fields are doubles and property names get their escaped aliases."""
    if value is None:
        return None
    if isinstance(value, list):
        items = schema.get("items")
        item_schema = items if isinstance(items, Mapping) else {}
        return celtypes.ListType([_to_cel(item, item_schema) for item in value])
    if isinstance(value, dict):
        props: Schema = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        keep_unknown = extra is True or schema.get("x-kubernetes-preserve-unknown-fields") is True
        fields: dict[Any, Any] = {}
        for key, child in value.items():
            if key in props:
                converted = _to_cel(child, props[key])
                fields[celtypes.StringType(key)] = converted
                alias = _cel_escape(key)
                if alias is not None and alias != key:
                    fields[celtypes.StringType(alias)] = converted
            elif isinstance(extra, Mapping):
                fields[celtypes.StringType(key)] = _to_cel(child, extra)
            elif keep_unknown:
                fields[celtypes.StringType(key)] = _to_cel(child, {})
        return celtypes.MapType(fields)
    return _cel_scalar(value, schema)


def _cel_error_text(error: BaseException) -> str:
    if isinstance(error, CELEvalError) and error.args:
        return str(error.args[0])
    return str(error) or type(error).__name__


def _is_celpy_limitation(error: BaseException) -> bool:
    return isinstance(error, CELUnsupportedError) or "undeclared reference" in _cel_error_text(error)


def _iter_rules(schema: Schema, path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every x-kubernetes-validations entry in a schema, with its schema path."""
    for rule in schema.get("x-kubernetes-validations") or []:
        yield path, rule
    for key, child in (schema.get("properties") or {}).items():
        yield from _iter_rules(child, f"{path}.{key}" if path else key)
    for keyword in ("items", "additionalProperties"):
        child = schema.get(keyword)
        if isinstance(child, Mapping):
            yield from _iter_rules(child, f"{path}[*]")
    for keyword in ("allOf", "anyOf", "oneOf"):
        for index, child in enumerate(schema.get(keyword) or []):
            yield from _iter_rules(child, f"{path}<{keyword}[{index}]>")
    if isinstance(schema.get("not"), Mapping):
        yield from _iter_rules(schema["not"], f"{path}<not>")


# --------------------------------------------------------------------------
# Structural schema validation
# --------------------------------------------------------------------------


def _apply_defaults(value: Any, schema: Schema) -> None:
    """The API server's structural defaulting, applied before validation."""
    if isinstance(value, dict):
        props: Schema = schema.get("properties") or {}
        for key, prop in props.items():
            default = prop.get("default")
            if default is None:
                continue
            if key not in value or (value[key] is None and not prop.get("nullable")):
                value[key] = copy.deepcopy(default)
        extra = schema.get("additionalProperties")
        for key, child in value.items():
            if key in props:
                _apply_defaults(child, props[key])
            elif isinstance(extra, Mapping):
                _apply_defaults(child, extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for item in value:
            _apply_defaults(item, schema["items"])


_TYPE_CHECKS: Mapping[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: _json_type(v) == "integer",
    "number": lambda v: _json_type(v) in ("integer", "number"),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}
# Schema for values under preserve-unknown-fields: anything JSON, checked recursively.
_ANY_JSON: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True, "nullable": True}
_ANY_JSON["items"] = _ANY_JSON
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _format_error(value: str, fmt: str) -> str | None:
    """Cheap checks for the string formats the API server validates."""
    try:
        if fmt in ("date-time", "datetime"):
            if not _DATE_TIME.match(value):
                return "must be an RFC 3339 date-time"
            datetime.datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
        elif fmt == "date":
            datetime.date.fromisoformat(value)
        elif fmt == "ipv4":
            ipaddress.IPv4Address(value)
        elif fmt == "ipv6":
            ipaddress.IPv6Address(value)
        elif fmt == "cidr":
            ipaddress.ip_network(value, strict=False)
        elif fmt == "uuid":
            uuid.UUID(value)
        elif fmt == "byte":
            base64.b64decode(value, validate=True)
    except (ValueError, binascii.Error):
        return f"must be a valid {fmt}"
    return None


class _Walker:
    """Validates one object against one CRD version schema, collecting errors."""

    def __init__(self, registry: CrdRegistry, crd: CrdVersion) -> None:
        self.registry = registry
        self.crd = crd
        self.errors: list[str] = []

    def error(self, path: JsonPath, message: str) -> None:
        self.errors.append(f"{_format_path(path)}: {message}")

    def branch_errors(self, value: Any, schema: Schema, path: JsonPath) -> list[str]:
        # allOf/anyOf/oneOf/not branches only restrict values; they never declare
        # fields, so unknown-field (pruning) checks don't apply inside them.
        sub = _Walker(self.registry, self.crd)
        sub.node(value, schema, path, structural=False)
        return sub.errors

    def node(self, value: Any, schema: Schema, path: JsonPath, structural: bool = True) -> None:
        if value is None:
            if not schema.get("nullable"):
                self.error(path, "Invalid value: null: field is not nullable (the API server would drop it)")
            return
        if not self.type_ok(value, schema, path):
            return
        enum = schema.get("enum")
        if enum is not None and _canonical(value) not in {_canonical(item) for item in enum}:
            allowed = ", ".join(_show(item) for item in enum)
            self.error(path, f"Unsupported value: {_show(value)}: supported values: {allowed}")
        if isinstance(value, str):
            self.string(value, schema, path)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            self.number(value, schema, path)
        elif isinstance(value, list):
            self.array(value, schema, path, structural)
        elif isinstance(value, dict):
            self.object(value, schema, path, structural)
        self.combinators(value, schema, path)
        self.cel_rules(value, schema, path)

    def type_ok(self, value: Any, schema: Schema, path: JsonPath) -> bool:
        actual = _json_type(value)
        if actual is None:
            self.error(path, f"Invalid value: {_describe(value)}: not representable in JSON")
            return False
        if schema.get("x-kubernetes-int-or-string"):
            if actual in ("integer", "string"):
                return True
            self.error(path, f"Invalid value: {_show(value)}: must be an integer or a string (int-or-string)")
            return False
        expected = schema.get("type")
        if expected is None or _TYPE_CHECKS.get(expected, lambda _: True)(value):
            return True
        self.error(path, f"Invalid value: {_show(value)}: must be of type {expected}, got {actual}")
        return False

    def string(self, value: str, schema: Schema, path: JsonPath) -> None:
        max_length, min_length = schema.get("maxLength"), schema.get("minLength")
        if max_length is not None and len(value) > max_length:
            self.error(path, f"Too long: may not be more than {max_length} characters (got {len(value)})")
        if min_length is not None and len(value) < min_length:
            self.error(path, f"Invalid value: {_show(value)}: should be at least {min_length} chars long")
        pattern = schema.get("pattern")
        if pattern is not None:
            compiled = self.registry._pattern(pattern)
            if compiled is None:
                self.error(path, f"schema pattern {pattern!r} does not compile under RE2")
            elif compiled.search(value) is None:
                self.error(path, f"Invalid value: {_show(value)}: should match '{pattern}'")
        fmt = schema.get("format")
        if fmt is not None:
            problem = _format_error(value, fmt)
            if problem is not None:
                self.error(path, f"Invalid value: {_show(value)}: {problem}")

    def number(self, value: float, schema: Schema, path: JsonPath) -> None:
        minimum, maximum = schema.get("minimum"), schema.get("maximum")
        if minimum is not None:
            if schema.get("exclusiveMinimum") and value <= minimum:
                self.error(path, f"Invalid value: {_show(value)}: should be greater than {minimum}")
            elif value < minimum:
                self.error(path, f"Invalid value: {_show(value)}: should be greater than or equal to {minimum}")
        if maximum is not None:
            if schema.get("exclusiveMaximum") and value >= maximum:
                self.error(path, f"Invalid value: {_show(value)}: should be less than {maximum}")
            elif value > maximum:
                self.error(path, f"Invalid value: {_show(value)}: should be less than or equal to {maximum}")
        multiple = schema.get("multipleOf")
        if multiple and not math.isclose(value / multiple, round(value / multiple)):
            self.error(path, f"Invalid value: {_show(value)}: should be a multiple of {multiple}")
        bounds = _INT_RANGES.get(schema.get("format", ""))
        if bounds is not None and isinstance(value, int) and not bounds[0] <= value <= bounds[1]:
            # The API server stores it, but the controller's Go struct can't decode it.
            self.error(path, f"Invalid value: {value}: out of range for {schema['format']}")

    def array(self, value: list[Any], schema: Schema, path: JsonPath, structural: bool) -> None:
        min_items, max_items = schema.get("minItems"), schema.get("maxItems")
        if min_items is not None and len(value) < min_items:
            self.error(path, f"Invalid value: {len(value)} items: should have at least {min_items} items")
        if max_items is not None and len(value) > max_items:
            self.error(path, f"Too many: {len(value)}: must have at most {max_items} items")
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "map":
            keys = schema.get("x-kubernetes-list-map-keys") or []
            seen: set[str] = set()
            for index, item in enumerate(value):
                if not isinstance(item, dict):
                    continue  # the items schema reports the type error
                identity = _canonical([item.get(key) for key in keys])
                if identity in seen:
                    shown = ", ".join(f"{key}={_show(item.get(key))}" for key in keys)
                    self.error((*path, index), f"Duplicate value: map list entry with {shown}")
                seen.add(identity)
        elif list_type == "set" or schema.get("uniqueItems"):
            seen = set()
            for index, item in enumerate(value):
                identity = _canonical(item)
                if identity in seen:
                    self.error((*path, index), f"Duplicate value: {_show(item)}")
                seen.add(identity)
        items = schema.get("items")
        if isinstance(items, Mapping):
            for index, item in enumerate(value):
                self.node(item, items, (*path, index), structural)

    def object(self, value: dict[str, Any], schema: Schema, path: JsonPath, structural: bool) -> None:
        props: Schema = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        keep_unknown = extra is True or schema.get("x-kubernetes-preserve-unknown-fields") is True
        embedded = schema.get("x-kubernetes-embedded-resource") is True
        for key in schema.get("required") or []:
            if key not in value:
                self.error((*path, key), "Required value")
        min_props, max_props = schema.get("minProperties"), schema.get("maxProperties")
        if min_props is not None and len(value) < min_props:
            self.error(path, f"Invalid value: should have at least {min_props} properties")
        if max_props is not None and len(value) > max_props:
            self.error(path, f"Too many: {len(value)}: must have at most {max_props} properties")
        for key, child in value.items():
            child_path = (*path, key)
            if not isinstance(key, str):
                self.error(path, f"Invalid value: key {key!r}: object keys must be strings")
            elif not path and key in ("apiVersion", "kind", "metadata"):
                continue  # checked by CrdRegistry.validate itself
            elif key in props:
                self.node(child, props[key], child_path, structural)
            elif isinstance(extra, Mapping):
                self.node(child, extra, child_path, structural)
            elif keep_unknown or (embedded and key in ("apiVersion", "kind", "metadata")):
                self.node(child, _ANY_JSON, child_path)
            elif structural:
                self.error(
                    child_path,
                    f'unknown field "{key}": not declared in the CRD schema (the API server would prune it)',
                )

    def combinators(self, value: Any, schema: Schema, path: JsonPath) -> None:
        for index, branch in enumerate(schema.get("allOf") or []):
            for problem in self.branch_errors(value, branch, path):
                self.errors.append(f"{problem} (allOf[{index}])")
        any_of = schema.get("anyOf")
        if any_of:
            failures = [self.branch_errors(value, branch, path) for branch in any_of]
            if all(failures):
                detail = "; ".join(f"[{i}] {' / '.join(f)}" for i, f in enumerate(failures))
                self.error(path, f"Invalid value: must match at least one anyOf schema: {detail}")
        one_of = schema.get("oneOf")
        if one_of:
            failures = [self.branch_errors(value, branch, path) for branch in one_of]
            matched = sum(1 for failure in failures if not failure)
            if matched != 1:
                detail = "; ".join(f"[{i}] {' / '.join(f) or 'matches'}" for i, f in enumerate(failures))
                self.error(path, f"Invalid value: must match exactly one oneOf schema, matched {matched}: {detail}")
        negated = schema.get("not")
        if isinstance(negated, Mapping) and not self.branch_errors(value, negated, path):
            self.error(path, f"Invalid value: {_show(value)}: must not match the 'not' schema")

    def cel_rules(self, value: Any, schema: Schema, path: JsonPath) -> None:
        rules = schema.get("x-kubernetes-validations")
        if not rules:
            return
        cel_self = _to_cel(value, schema)
        if not path and isinstance(value, dict) and isinstance(value.get("metadata"), dict):
            # Root rules see metadata.name/generateName only, as on the API server.
            cel_self[celtypes.StringType("metadata")] = celtypes.MapType(
                {
                    celtypes.StringType(key): _to_cel(value["metadata"][key], {})
                    for key in ("name", "generateName")
                    if isinstance(value["metadata"].get(key), str)
                }
            )
        for rule in rules:
            text = rule.get("rule", "")
            program = self.registry._cel.compile(text)
            if isinstance(program, str):
                continue  # listed in registry.unevaluated_rules at load time
            where = _format_path(path) + (rule.get("fieldPath") or "")
            result: Any
            try:
                result = program.evaluate({"self": cel_self})
            except Exception as exc:  # celpy raises CELEvalError and plain Python errors
                result = exc
            if isinstance(result, BaseException):
                if _is_celpy_limitation(result):
                    self.registry._record_runtime_gap(rule, f"celpy failed at run time: {_cel_error_text(result)}")
                    continue
                # The API server reports a rule that errors as a validation failure.
                self.errors.append(f"{where}: Invalid value: rule evaluation error: {_cel_error_text(result)}: {text}")
            elif not isinstance(result, celtypes.BoolType):
                self.errors.append(f"{where}: Invalid value: rule did not evaluate to a bool: {text}")
            elif not result:
                self.errors.append(f"{where}: Invalid value: {self.rule_message(rule, cel_self)}")

    def rule_message(self, rule: Mapping[str, Any], cel_self: Any) -> str:
        expression = rule.get("messageExpression")
        if expression:
            program = self.registry._cel.compile(expression)
            if not isinstance(program, str):
                try:
                    message = program.evaluate({"self": cel_self})
                except Exception:  # fall back to the static message, like the API server
                    message = None
                if isinstance(message, str) and message.strip():
                    return message
        return str(rule.get("message") or f"failed rule: {rule.get('rule', '')}")


# --------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------


class CrdRegistry:
    """CRDs of the pinned component versions, indexed by (group, kind)."""

    def __init__(self, versions: list[CrdVersion]) -> None:
        self._by_kind: dict[tuple[str, str], dict[str, CrdVersion]] = {}
        for crd in versions:
            self._by_kind.setdefault((crd.group, crd.kind), {})[crd.version] = crd
        self._cel = _shared_cel_compiler()
        self._patterns: dict[str, Any] = {}
        self._rule_location: dict[int, tuple[str, str]] = {}
        self.unevaluated_rules: list[UnevaluatedRule] = []
        # Compile every rule up front so gaps are visible before any validation.
        for crd in versions:
            for path, rule in _iter_rules(crd.schema, ""):
                location = (crd.crd_name, f"{crd.version}:{path}")
                self._rule_location[id(rule)] = location
                text = str(rule.get("rule", ""))
                program = self._cel.compile(text)
                if isinstance(program, str):
                    self.unevaluated_rules.append(UnevaluatedRule(*location, text, program))

    @classmethod
    def load(cls, root: Path, pins: Mapping[str, str]) -> CrdRegistry:
        """Load every CRD in ``root/<component>/<version>`` for each pinned component."""
        root = Path(root)
        versions: list[CrdVersion] = []
        owners: dict[tuple[str, str], Path] = {}
        # Check every pin before parsing megabytes of YAML, so a bad pin fails fast.
        for component, version in sorted(pins.items()):
            directory = root / component / version
            if not directory.is_dir():
                parent = root / component
                available = sorted(p.name for p in parent.iterdir() if p.is_dir()) if parent.is_dir() else []
                raise CrdLoadError(
                    f"pinned CRD directory {directory} does not exist "
                    f"(available versions of {component!r}: {', '.join(available) or 'none'})"
                )
        for component, version in sorted(pins.items()):
            directory = root / component / version
            files = sorted(directory.glob("*.yaml")) + sorted(directory.glob("*.yml"))
            loaded = 0
            for path in files:
                for document in cls._documents(path):
                    key = (document["spec"]["group"], document["spec"]["names"]["kind"])
                    if key in owners:
                        raise CrdLoadError(f"{key[1]}.{key[0]} is defined by both {owners[key]} and {path}")
                    owners[key] = path
                    versions.extend(cls._versions(document, path))
                    loaded += 1
            if loaded == 0:
                raise CrdLoadError(f"no CustomResourceDefinition found in {directory}")
        return cls(versions)

    @staticmethod
    def _documents(path: Path) -> Iterator[Mapping[str, Any]]:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10x faster on 1 MB CRDs
        try:
            documents = list(yaml.load_all(path.read_text(encoding="utf-8"), Loader=loader))
        except yaml.YAMLError as exc:
            raise CrdLoadError(f"{path}: not valid YAML: {exc}") from exc
        for document in documents:
            if isinstance(document, Mapping) and document.get("kind") == "CustomResourceDefinition":
                yield document

    @staticmethod
    def _versions(document: Mapping[str, Any], path: Path) -> Iterator[CrdVersion]:
        spec = document["spec"]
        for entry in spec.get("versions") or []:
            schema = (entry.get("schema") or {}).get("openAPIV3Schema")
            if not isinstance(schema, Mapping):
                raise CrdLoadError(f"{path}: version {entry.get('name')} has no openAPIV3Schema")
            yield CrdVersion(
                crd_name=document["metadata"]["name"],
                group=spec["group"],
                kind=spec["names"]["kind"],
                version=entry["name"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                served=bool(entry.get("served")),
                storage=bool(entry.get("storage")),
                deprecated=bool(entry.get("deprecated")),
                deprecation_warning=entry.get("deprecationWarning"),
                status_subresource="status" in (entry.get("subresources") or {}),
                schema=schema,
                source=path,
            )

    @property
    def kinds(self) -> list[tuple[str, str]]:
        """Sorted (group, kind) pairs known to this registry."""
        return sorted(self._by_kind)

    def lookup(self, api_version: str, kind: str) -> CrdVersion | None:
        """The CRD version for apiVersion/kind, served or not; None if unknown."""
        group, _, version = api_version.rpartition("/")
        return self._by_kind.get((group, kind), {}).get(version)

    def _pattern(self, pattern: str) -> Any:
        # RE2 like the API server's Go regexp: some upstream patterns use (?i)
        # after '^', which Python's re rejects.
        if pattern not in self._patterns:
            try:
                self._patterns[pattern] = re2.compile(pattern)
            except Exception:  # re2.error; reported by the caller as a schema problem
                self._patterns[pattern] = None
        return self._patterns[pattern]

    def _record_runtime_gap(self, rule: Mapping[str, Any], reason: str) -> None:
        crd, path = self._rule_location.get(id(rule), ("?", "?"))
        entry = UnevaluatedRule(crd, path, str(rule.get("rule", "")), reason)
        if entry not in self.unevaluated_rules:
            self.unevaluated_rules.append(entry)

    def validate(self, obj: Mapping[str, Any]) -> list[str]:
        """Errors for one custom resource object; an empty list means valid."""
        if not isinstance(obj, Mapping):
            return [f"<root>: Invalid value: {_describe(obj)}: must be an object"]
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        errors = [f"{field}: Required value" for field, v in (("apiVersion", api_version), ("kind", kind)) if not v]
        if errors:
            return errors
        if not isinstance(api_version, str) or not isinstance(kind, str):
            return ["apiVersion, kind: must be strings"]
        group, _, version = api_version.rpartition("/")
        versions = self._by_kind.get((group, kind))
        if versions is None:
            known = sorted(k for g, k in self._by_kind if g == group)
            hint = f"known kinds in {group}: {', '.join(known)}" if known else f"no CRD of group {group!r} is loaded"
            if not group:
                hint = "core API group; use validate_core()"
            return [f"kind: unknown kind {kind!r} for apiVersion {api_version!r} ({hint})"]
        served = sorted(v for v, crd in versions.items() if crd.served)
        crd = versions.get(version)
        if crd is None or not crd.served:
            name = next(iter(versions.values())).crd_name
            return [f"apiVersion: version {version!r} is not served by CRD {name} (served: {', '.join(served)})"]
        if crd.deprecated:
            current = sorted(v for v, c in versions.items() if c.served and not c.deprecated)
            warning = crd.deprecation_warning or "deprecated"
            errors.append(f"apiVersion: {api_version} {kind} is deprecated ({warning}); use {', '.join(current)}")

        data = _plain(obj)
        errors += _object_meta_errors(data, crd.namespaced, "dns1123-subdomain")
        meta_schema = (crd.schema.get("properties") or {}).get("metadata")
        walker = _Walker(self, crd)
        if isinstance(meta_schema, Mapping) and isinstance(data.get("metadata"), dict):
            # CRDs may only narrow metadata.name/generateName; other fields are ObjectMeta's.
            walker.node(data["metadata"], meta_schema, ("metadata",), structural=False)
        if crd.status_subresource and "status" in data:
            errors.append("status: Forbidden: the status subresource is enabled, so status is ignored on create/update")
        _apply_defaults(data, crd.schema)
        walker.node(data, crd.schema, ())
        return errors + walker.errors


# --------------------------------------------------------------------------
# Built-in kinds
# --------------------------------------------------------------------------


def validate_core(obj: Mapping[str, Any], k8s_version: str = DEFAULT_K8S_VERSION) -> list[str]:
    """Errors for a built-in kind, via kubernetes-validate's strict schemas (which
    reject unknown fields) plus ObjectMeta name/label checks. kubernetes-validate
    stops at the first schema error, so at most one schema error is reported."""
    if not isinstance(obj, Mapping):
        return [f"<root>: Invalid value: {_describe(obj)}: must be an object"]
    missing = [f"{field}: Required value" for field in ("apiVersion", "kind") if not obj.get(field)]
    if missing:
        return missing
    data = _plain(obj)
    errors: list[str] = []
    try:
        kubernetes_validate.validate(data, k8s_version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        errors.append(f"{_format_path(tuple(exc.absolute_path))}: {exc.message}")
    except kubernetes_validate.SchemaNotFoundError as exc:
        errors.append(f"kind: {exc.message}")
    except VersionNotSupportedError as exc:
        errors.append(f"<root>: {exc.message}")
    kind = str(data["kind"])
    namespaced = False if kind in _CORE_CLUSTER_SCOPED else None
    errors += _object_meta_errors(data, namespaced, _CORE_NAME_RULES.get(kind, "dns1123-subdomain"))
    return errors
