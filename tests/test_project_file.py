"""`Pulumi.yaml` and every stack file pass the CLI's own project and config rules.

The rules are in `tests/pulumi_project_rules.py`, each with the pulumi/pulumi source it follows;
`tests/test_real_engine.py` runs the real CLI on the same files.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from settings.model import StackConfig
from tests.pulumi_project_rules import ProjectError, StackError, declarations, merged_config

ROOT = Path(__file__).resolve().parent.parent
STACK_FILES = sorted(ROOT.glob("Pulumi.*.yaml"))
PROJECT = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())

# The project file as it was before the real CLI was in the tests (stop 9): every key declared,
# `gcp:project` with only a description.
OLD_PROJECT: dict[str, Any] = {
    "name": "tpu-slicing",
    "runtime": "python",
    "config": {
        "gcp:project": {"description": "Google Cloud project that holds the cluster."},
        "tpu-slicing:zone": {"type": "string", "description": "TPU zone."},
        "tpu-slicing:network": {"description": "VPC settings."},
        "tpu-slicing:hfToken": {"type": "string", "secret": True, "description": "Optional token."},
    },
}


def stack_name(path: Path) -> str:
    return path.name.removeprefix("Pulumi.").removesuffix(".yaml")


def test_there_are_stack_files() -> None:
    assert {stack_name(p) for p in STACK_FILES} >= {"dev", "dev-b", "saxml-v5e", "jetstream-v5e"}


def test_the_old_project_file_is_refused_as_the_cli_refuses_it() -> None:
    with pytest.raises(ProjectError, match="'gcp:project' is namespaced and must provide an attribute 'value'"):
        declarations(OLD_PROJECT)


def test_a_declaration_without_default_is_required_on_every_stack() -> None:
    project = {**OLD_PROJECT, "config": {k: v for k, v in OLD_PROJECT["config"].items() if k != "gcp:project"}}
    stack = {"config": {"gcp:project": "p", "tpu-slicing:zone": "us-central1-ai1a"}}
    with pytest.raises(StackError, match="missing configuration values 'tpu-slicing:hfToken', 'tpu-slicing:network'"):
        merged_config(project, "dev", stack)


def test_a_mapping_under_config_is_a_declaration_and_a_scalar_is_shorthand() -> None:
    project = {"name": "tpu-slicing", "config": {"gcp:region": "us-central1", "tpu-slicing:mtu": 8896}}
    decls = declarations(project)
    assert decls["gcp:region"].value == "us-central1"
    assert decls["tpu-slicing:mtu"].default == 8896
    with pytest.raises(ProjectError, match="must provide an attribute 'value'"):
        declarations({"name": "tpu-slicing", "config": {"gcp:region": {"description": "a region"}}})


def test_a_secret_key_with_a_default_is_refused_as_unencrypted() -> None:
    declared = {"type": "string", "secret": True, "default": ""}
    project = {"name": "tpu-slicing", "config": {"tpu-slicing:hfToken": declared}}
    with pytest.raises(StackError, match="must be encrypted as it's secret"):
        merged_config(project, "dev", {"config": {}})


def test_typed_keys_are_checked_against_stack_values() -> None:
    with pytest.raises(StackError, match="must be of type 'string'"):
        merged_config(PROJECT, "dev", {"config": {"tpu-slicing:zone": 5}})


def test_the_project_file_passes_the_cli_rules() -> None:
    assert PROJECT["name"] == "tpu-slicing"
    assert PROJECT["runtime"]["name"] == "python"
    decls = declarations(PROJECT)
    # Only what the CLI must require is declared; gcp:project is never declared without a value.
    assert set(decls) == {"tpu-slicing:zone"}
    assert all(PROJECT["config"][key].get("description") for key in decls)


@pytest.mark.parametrize("path", STACK_FILES, ids=stack_name)
def test_every_stack_file_passes_the_cli_config_rules(path: Path) -> None:
    merged = merged_config(PROJECT, stack_name(path), yaml.safe_load(path.read_text()))
    assert "tpu-slicing:zone" in merged
    assert "gcp:project" in merged


def test_the_program_uses_the_virtualenv_make_builds_and_the_cli_creates_it_pinned() -> None:
    assert PROJECT["runtime"]["options"]["virtualenv"] == ".venv"
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^VENV \?= \.venv$", makefile, re.M)
    # The CLI installs requirements.txt alone when it creates the venv: the constraints must be
    # named inside it, or its transitive versions float.
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    assert "-c constraints.txt" in lines


def test_every_key_the_model_accepts_is_documented() -> None:
    """Undeclared keys are documented instead: each has a row in the contract table of docs/configuration.md."""
    page = (ROOT / "docs" / "configuration.md").read_text()
    section = page.split("## Configuration contract\n", 1)[1].split("\n## ", 1)[0]
    table = section.split("| key | default | rule |", 1)[1].split("\n\n", 1)[0]
    documented = {m.split(".")[0] for m in re.findall(r"^\| `([A-Za-z.*]+)`", table, re.M)}
    accepted = {field.alias for name, field in StackConfig.model_fields.items() if name != "project"}
    assert documented == accepted
    assert "`gcp:project`" in section.split("|", 1)[0]
