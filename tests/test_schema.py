"""settings/schema.py: the committed JSON Schema of a stack file is current, every committed stack
file and every stack-file example of the docs meets it, and mistakes editors should flag fail it
(each also refused by the program: the schema never flags what the program accepts, on these)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from plan import stacks
from plan.__main__ import main as plan_main
from settings.loader import ConfigError, load
from settings.reference import configuration_reference
from settings.schema import stack_file_schema

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "docs" / "stack-file.schema.json"
MODELINE = "# yaml-language-server: $schema=./docs/stack-file.schema.json"
VALIDATOR = jsonschema.Draft202012Validator(stack_file_schema())
STACK_FILES = sorted(stacks.stack_files().items())


def problems(document: Any) -> list[str]:
    return sorted(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(document))


def test_the_committed_schema_is_what_make_schema_writes() -> None:
    assert json.loads(COMMITTED.read_text()) == stack_file_schema(), "stale: run `make schema` and commit it"


def test_the_committed_reference_is_what_make_schema_writes() -> None:
    page = ROOT / "docs" / "configuration-reference.md"
    assert page.read_text() == configuration_reference(), "stale: run `make schema` and commit it"


def test_the_reference_lists_every_key_the_schema_allows_with_its_refusals() -> None:
    page = configuration_reference()
    for key in stack_file_schema()["properties"]["config"]["properties"]:
        if key.startswith("tpu-slicing:"):
            assert f"| `{key.removeprefix('tpu-slicing:')}` |" in page, key
    assert "| `reservation.subBlocks` | list or null | `null` |  | sub-block listed twice;" in page
    assert "| `namePrefix` | string | the stack's name |" in page


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(json.loads(COMMITTED.read_text()))


@pytest.mark.parametrize(("stack", "path"), STACK_FILES, ids=[s for s, _ in STACK_FILES])
def test_every_committed_stack_file_meets_the_schema_and_names_it(stack: str, path: Path) -> None:
    text = path.read_text()
    assert problems(yaml.safe_load(text)) == []
    assert text.splitlines()[0] == MODELINE, f"{path.name}: the first line lets an editor find the schema"


def _yaml_examples() -> list[tuple[str, dict[str, Any]]]:
    """Every YAML block of the README and docs/ that is a stack file (it has `config:`)."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for index, block in enumerate(re.findall(r"```ya?ml\n(.*?)```", page.read_text(), flags=re.S)):
            document = yaml.safe_load(block)
            if isinstance(document, dict) and isinstance(document.get("config"), dict):
                found.append((f"{page.relative_to(ROOT)}#{index}", document))
    return found


@pytest.mark.parametrize(("where", "document"), _yaml_examples() or [("none", {})], ids=lambda v: str(v)[:40])
def test_every_stack_file_example_in_the_docs_meets_the_schema(where: str, document: dict[str, Any]) -> None:
    if where == "none":
        pytest.skip("no stack-file example in the docs")
    assert problems(document) == [], where


DEV = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())


def _with(change: dict[str, Any], drop: tuple[str, ...] = ()) -> dict[str, Any]:
    document = copy.deepcopy(DEV)
    document["config"].update(change)
    for key in drop:
        document["config"].pop(key)
    return document


BAD = {
    "misspelled key": (_with({"tpu-slicing:zonee": "us-central1-ai1a"}), "zonee"),
    "unknown nested key": (_with({"tpu-slicing:tpu": {**DEV["config"]["tpu-slicing:tpu"], "cube": 2}}), "cube"),
    "wrong type": (_with({"tpu-slicing:tpu": {**DEV["config"]["tpu-slicing:tpu"], "cubes": "two"}}), "two"),
    "not an allowed value": (
        _with({"tpu-slicing:serving": {**DEV["config"]["tpu-slicing:serving"], "backend": "triton"}}),
        "triton",
    ),
    "plaintext token": (_with({"tpu-slicing:hfToken": "hf_abcdefghijklmnopqrstuvwxyz0123"}), "hfToken"),
    "project under the wrong namespace": (_with({"tpu-slicing:project": "p"}), "tpu-slicing:project"),
    "no zone": (_with({}, drop=("tpu-slicing:zone",)), "zone"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_stack_file_fails_the_schema_and_the_program(case: str) -> None:
    document, named = BAD[case]
    found = problems(document)
    assert found, f"{case}: the schema passed it"
    assert any(named in p for p in found), found
    raw = dict(document["config"])
    with pytest.raises(ConfigError):
        load(raw, stack="dev", project=raw.get("gcp:project"), secret_keys=())


def test_make_schema_writes_only_its_own_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The committed copy is written by `make schema` alone; any other tracked file is refused."""
    out = tmp_path / "schema.json"
    assert plan_main(["schema", "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == stack_file_schema()
    assert plan_main(["schema", "--out", str(ROOT / "Pulumi.dev.yaml")]) == 2
    assert "git tracks" in capsys.readouterr().err
