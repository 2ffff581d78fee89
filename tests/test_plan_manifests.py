"""The Kubernetes objects the plan writes under build/plan/<stack>/ for review, as the program wrote them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from plan import engine, manifests, stacks

STACKS = sorted(stacks.stack_files())


def _integral_floats(node: Any, path: str = "") -> list[str]:
    if isinstance(node, float) and node.is_integer():
        return [f"{path}: {node}"]
    if isinstance(node, dict):
        return [found for key, value in node.items() for found in _integral_floats(value, f"{path}.{key}")]
    if isinstance(node, list):
        return [found for i, value in enumerate(node) for found in _integral_floats(value, f"{path}[{i}]")]
    return []


@pytest.mark.parametrize("stack", STACKS)
def test_every_written_file_keeps_integers_integers(stack: str, tmp_path: Path) -> None:
    """Recorded inputs come back from the SDK's protobuf Struct as doubles (`port: 9100.0`)."""
    written = manifests.write(engine.run_stack(stack), tmp_path)
    assert written
    documents = {path.name: yaml.safe_load(path.read_text()) for path in written}
    found = [f"{name}{where}" for name, body in documents.items() for where in _integral_floats(body)]
    assert found == [], found[:20]
    ports = [p for body in documents.values() for p in _container_ports(body)]
    assert ports and all(type(p) is int for p in ports), ports


def _container_ports(node: Any) -> list[Any]:
    if isinstance(node, dict):
        own = [node["containerPort"]] if "containerPort" in node else []
        return own + [p for value in node.values() for p in _container_ports(value)]
    if isinstance(node, list):
        return [p for value in node for p in _container_ports(value)]
    return []


def test_only_integral_floats_become_ints() -> None:
    value = {"a": 2.0, "b": [0.5, 1e3, True, "3.0"], "c": {"d": -0.0, "e": float("inf")}}
    assert manifests.integral(value) == {"a": 2, "b": [0.5, 1000, True, "3.0"], "c": {"d": 0, "e": float("inf")}}
    assert [type(v) for v in manifests.integral(value)["b"]] == [float, int, bool, str]


def test_an_object_named_out_of_its_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a file name of its own"):
        manifests.outputs.inside(tmp_path, "../escape.yaml")
