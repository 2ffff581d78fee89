"""Pulumi.yaml declares every top-level configuration key the program accepts."""

from __future__ import annotations

from pathlib import Path

import yaml

from settings.model import StackConfig

ROOT = Path(__file__).resolve().parent.parent


def test_project_file_declares_every_config_key() -> None:
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    assert project["name"] == "tpu-slicing"
    assert project["runtime"]["name"] == "python"
    assert project["runtime"]["options"]["virtualenv"] == "venv"
    declared = {key.removeprefix("tpu-slicing:") for key in project["config"] if key.startswith("tpu-slicing:")}
    accepted = {field.alias for name, field in StackConfig.model_fields.items() if name != "project"}
    assert declared == accepted
    assert all(entry.get("description") for entry in project["config"].values())
    assert project["config"]["tpu-slicing:hfToken"]["secret"] is True
