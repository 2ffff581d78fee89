"""The Kubernetes objects a plan would apply, rebuilt from what the program registered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from plan.engine import PlanResult, Resource, mask, unwrap

HELM_RELEASE = "kubernetes:helm.sh/v3:Release"


def is_kubernetes_object(resource: Resource) -> bool:
    return resource.custom and resource.type.startswith("kubernetes:") and resource.type != HELM_RELEASE


def body(resource: Resource, *, masked: bool = True) -> dict[str, Any]:
    """The object as the API server would receive it; secrets masked unless asked otherwise."""
    inputs = mask(resource.inputs) if masked else unwrap(resource.inputs)
    return {key: value for key, value in inputs.items() if value is not None and key != "status"}


def objects(result: PlanResult, *, masked: bool = True) -> list[tuple[Resource, dict[str, Any]]]:
    return [(r, body(r, masked=masked)) for r in result.resources if is_kubernetes_object(r)]


def file_name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or "cluster"
    return f"{namespace}--{obj['kind'].lower()}--{meta.get('name', 'unnamed')}.yaml"


def write(result: PlanResult, directory: Path) -> list[Path]:
    """Write each object (and each Helm release's chart, version and values) as a YAML file."""
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("*.yaml"):
        old.unlink()
    written = []
    for _, obj in objects(result):
        path = directory / file_name(obj)
        path.write_text(yaml.safe_dump(obj, sort_keys=False))
        written.append(path)
    for release in result.of_type(HELM_RELEASE):
        inputs = mask(release.inputs)
        doc = {key: inputs.get(key) for key in ("name", "chart", "version", "namespace", "values")}
        path = directory / f"{inputs.get('namespace')}--helm-release--{inputs.get('name')}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        written.append(path)
    return sorted(written)
