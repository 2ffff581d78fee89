"""A structural schema of our own for Managed Service for Prometheus' PodMonitoring (monitoring.googleapis.com/v1).

GKE installs the CRD with managed collection; no schema file ships with this
repository. The fields below are the subset this program writes, following the
ScrapeEndpoint type of GoogleCloudPlatform/prometheus-engine
(pkg/operator/apis/monitoring/v1): `port` is an IntOrString, `path` defaults to
/metrics, `interval` and `timeout` are Prometheus durations and the timeout may
not exceed the interval. Unknown fields are errors: the API server would drop
them silently, and a typo in `matchLabels` would select nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import jsonschema

DURATION = r"^[0-9]+(ms|s|m|h)$"
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_UNITS_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000}

_ENDPOINT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["port", "path", "interval"],
    "properties": {
        "port": {
            "oneOf": [
                {"type": "integer", "minimum": 1, "maximum": 65535},
                {"type": "string", "minLength": 1, "maxLength": 15},  # an IANA_SVC_NAME, as container ports
            ]
        },
        "path": {"type": "string", "pattern": "^/"},
        "interval": {"type": "string", "pattern": DURATION},
        "timeout": {"type": "string", "pattern": DURATION},
        "scheme": {"enum": ["http", "https"]},
    },
}

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.googleapis.com/v1"},
        "kind": {"const": "PodMonitoring"},
        "metadata": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "namespace"],
            "properties": {
                "name": {"type": "string", "pattern": _DNS_LABEL, "maxLength": 63},
                "namespace": {"type": "string", "pattern": _DNS_LABEL, "maxLength": 63},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "endpoints"],
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["matchLabels"],
                    "properties": {
                        "matchLabels": {
                            "type": "object",
                            "minProperties": 1,
                            "additionalProperties": {"type": "string"},
                        }
                    },
                },
                "endpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT},
            },
        },
    },
}

_VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def _ints(value: Any) -> Any:
    """Pulumi hands numbers over as floats: a whole float is the int it stands for."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {key: _ints(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_ints(item) for item in value]
    return value


def duration_ms(duration: str) -> int:
    match = re.fullmatch(DURATION, duration)
    if match is None:
        raise ValueError(f"{duration!r} is not a duration like 30s")
    return int(duration[: -len(match.group(1))]) * _UNITS_MS[match.group(1)]


def validate_pod_monitoring(obj: Any) -> list[str]:
    """One message per problem, `path: message`; empty when the object is valid."""
    body = _ints(obj)
    problems = [
        f"{'/'.join(str(part) for part in error.absolute_path) or '<root>'}: {error.message}"
        for error in sorted(_VALIDATOR.iter_errors(body), key=lambda e: list(map(str, e.absolute_path)))
    ]
    if problems:
        return problems
    for index, endpoint in enumerate(body["spec"]["endpoints"]):
        if "timeout" in endpoint and duration_ms(endpoint["timeout"]) > duration_ms(endpoint["interval"]):
            problems.append(f"spec/endpoints/{index}: timeout {endpoint['timeout']} exceeds interval")
    return problems
