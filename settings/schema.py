"""A JSON Schema for the `tpu-slicing:` keys of a `Pulumi.<stack>.yaml`, made from the model tree.

An editor with a YAML language server validates and completes a stack file against it (the
file's first line: `# yaml-language-server: $schema=docs/stack-file.schema.json`). It holds
what the model's fields say (types, patterns, allowed values, unknown keys refused, defaults);
the cross-field rules (settings/rules_*.py and the model's validators) need the whole stack and
stay with `make plan` and `pulumi up`, which judge a file the schema passes. `make schema`
writes it (plan/__main__.py `schema`); tests/test_schema.py fails when the committed copy is stale.

Values are what YAML holds: `pulumi config set --path` writes numbers and booleans as such, a
plain `pulumi config set` writes every value as a string, which the program still accepts (pydantic's
lax mode) but the schema does not: use `--path` or edit the file.
"""

from __future__ import annotations

from typing import Any

from settings.loader import NAMESPACE, PROVIDER_SECRETS, SECRET_KEYS
from settings.model import StackConfig

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
# How the Pulumi CLI writes a secret into the stack file (`pulumi config set --secret`).
SECURE_VALUE: dict[str, Any] = {
    "type": "object",
    "properties": {"secure": {"type": "string"}},
    "required": ["secure"],
    "additionalProperties": False,
    "description": "A Pulumi secret: set it with `pulumi config set --secret`, never as plain text.",
}
# Model fields the stack file does not set under this project's namespace: the project is gcp:project.
NOT_STACK_FILE_KEYS = frozenset({"project"})


def stack_file_schema() -> dict[str, Any]:
    model = StackConfig.model_json_schema(by_alias=True, mode="validation")
    definitions = model.pop("$defs", {})
    own: dict[str, Any] = {}
    for key, field in model["properties"].items():
        if key in NOT_STACK_FILE_KEYS:
            continue
        own[f"{NAMESPACE}:{key}"] = SECURE_VALUE if key in SECRET_KEYS else field
    # namePrefix defaults to the stack's name (settings/loader.py); the project is gcp:project.
    skipped = NOT_STACK_FILE_KEYS | {"namePrefix"}
    required = [f"{NAMESPACE}:{key}" for key in model.get("required", []) if key not in skipped]
    config = {
        "type": "object",
        "properties": {
            "gcp:project": {"type": "string", "description": "The Google Cloud project to create everything in."},
            **dict.fromkeys(sorted(PROVIDER_SECRETS), SECURE_VALUE),
            **own,
        },
        "required": ["gcp:project", *required],
        # Other providers' keys pass; a key of this project's namespace that the model lacks is refused.
        "propertyNames": {"anyOf": [{"enum": sorted(own)}, {"not": {"pattern": f"^{NAMESPACE}:"}}]},
    }
    return {
        "$schema": SCHEMA_DIALECT,
        "title": "tpu-slicing stack file (Pulumi.<stack>.yaml)",
        "description": "Generated from settings/model.py by `make schema`; do not edit.",
        "type": "object",
        "properties": {"config": config},
        "$defs": definitions,
    }
