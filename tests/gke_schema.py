"""Structural schemas of our own for GKE-managed CRDs with no public schema file.

HealthCheckPolicy and GCPBackendPolicy (networking.gke.io/v1) are installed by
GKE's Gateway controller; their fields below follow GKE's "Configure Gateway
resources using Policies" documentation. Unknown fields are errors, as the
API server would drop them silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema

from plan import manifests

_TARGET_REF = {
    "type": "object",
    "additionalProperties": False,
    "required": ["group", "kind", "name"],
    "properties": {
        "group": {"type": "string"},
        "kind": {"type": "string", "minLength": 1},
        "name": {"type": "string", "minLength": 1},
        "namespace": {"type": "string"},
    },
}
_PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
_HTTP_CHECK = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "portSpecification": {"enum": ["USE_FIXED_PORT", "USE_NAMED_PORT", "USE_SERVING_PORT"]},
        "port": _PORT,
        "portName": {"type": "string"},
        "host": {"type": "string"},
        "requestPath": {"type": "string", "pattern": "^/"},
        "response": {"type": "string"},
        "proxyHeader": {"enum": ["NONE", "PROXY_V1"]},
    },
}
_METADATA = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {"name": {"type": "string", "minLength": 1}, "namespace": {"type": "string", "minLength": 1}},
}


def _policy(kind: str, default: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "networking.gke.io/v1"},
            "kind": {"const": kind},
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["targetRef", "default"],
                "properties": {"targetRef": _TARGET_REF, "default": default},
            },
        },
    }


SCHEMAS: dict[str, dict[str, Any]] = {
    "HealthCheckPolicy": _policy(
        "HealthCheckPolicy",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["config"],
            "properties": {
                "checkIntervalSec": {"type": "integer", "minimum": 1, "maximum": 300},
                "timeoutSec": {"type": "integer", "minimum": 1, "maximum": 300},
                "healthyThreshold": {"type": "integer", "minimum": 1, "maximum": 10},
                "unhealthyThreshold": {"type": "integer", "minimum": 1, "maximum": 10},
                "logConfig": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"enabled": {"type": "boolean"}},
                },
                "config": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["type"],
                    "properties": {
                        "type": {"enum": ["TCP", "HTTP", "HTTPS", "HTTP2", "GRPC"]},
                        "httpHealthCheck": _HTTP_CHECK,
                        "httpsHealthCheck": _HTTP_CHECK,
                        "http2HealthCheck": _HTTP_CHECK,
                    },
                },
            },
        },
    ),
    "GCPBackendPolicy": _policy(
        "GCPBackendPolicy",
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "timeoutSec": {"type": "integer", "minimum": 1, "maximum": 86400},
                "logging": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "enabled": {"type": "boolean"},
                        "sampleRate": {"type": "integer", "minimum": 0, "maximum": 1000000},
                    },
                },
                "connectionDraining": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"drainingTimeoutSec": {"type": "integer", "minimum": 0, "maximum": 3600}},
                },
                "securityPolicy": {"type": "string"},
            },
        },
    ),
}

KINDS = frozenset(SCHEMAS)


def validate_gke(obj: Mapping[str, Any]) -> list[str]:
    schema = SCHEMAS.get(str(obj.get("kind")))
    if schema is None:
        return [f"kind: no structural schema for {obj.get('kind')!r}"]
    data = manifests.integral(dict(obj))  # Pulumi's whole floats, as written
    errors = [
        f"{'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in jsonschema.Draft7Validator(schema).iter_errors(data)
    ]
    default = data.get("spec", {}).get("default", {})
    config = default.get("config", {})
    check_key = {"HTTP": "httpHealthCheck", "HTTPS": "httpsHealthCheck", "HTTP2": "http2HealthCheck"}.get(
        config.get("type", "")
    )
    if check_key and check_key not in config:
        errors.append(f"spec.default.config: type {config['type']} needs {check_key}")
    if (
        "timeoutSec" in default
        and "checkIntervalSec" in default
        and default["timeoutSec"] > default["checkIntervalSec"]
    ):
        errors.append("spec.default: timeoutSec must not exceed checkIntervalSec")
    return errors
