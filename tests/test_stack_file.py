"""Stack files are read as the Pulumi CLI reads them: YAML 1.2, no duplicate keys, bare keys namespaced."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from plan import engine
from settings.stack_file import StackFileError, config_keys, parse, read

ROOT = Path(__file__).resolve().parent.parent


def test_clock_times_and_yes_are_strings_as_in_yaml_1_2() -> None:
    document = parse("config:\n  a: 22:00\n  b: 1:00:00\n  c: yes\n  d: on\n  e: 010\n  f: 0o10\n  g: true\n")
    assert document["config"] == {"a": "22:00", "b": "1:00:00", "c": "yes", "d": "on", "e": 10, "f": 8, "g": True}


@given(st.integers(0, 23), st.integers(0, 59))
def test_every_unquoted_clock_time_stays_a_string(hour: int, minute: int) -> None:
    text = f"{hour}:{minute:02d}"
    assert parse(f"config:\n  t: {text}\n")["config"]["t"] == text


def test_a_repeated_key_is_refused_as_the_cli_refuses_it() -> None:
    with pytest.raises(StackFileError, match=r"key 'tpu-slicing:zone' is given twice"):
        parse("config:\n  tpu-slicing:zone: a\n  tpu-slicing:zone: b\n")
    with pytest.raises(StackFileError, match="given twice"):
        parse("config:\n  x: 1\nconfig:\n  y: 2\n")


def test_a_bare_key_is_the_projects() -> None:
    assert config_keys({"zone": "us-central1-ai1a", "gcp:project": "p"}) == {
        "tpu-slicing:zone": "us-central1-ai1a",
        "gcp:project": "p",
    }
    with pytest.raises(StackFileError, match="given twice"):
        config_keys({"zone": "a", "tpu-slicing:zone": "b"})


@pytest.mark.parametrize("typo", ["tpu-slicng", "tpu_slicing", "tpu-slicing2", "tpuslicing"])
def test_a_namespace_one_typo_from_the_projects_is_refused(typo: str) -> None:
    with pytest.raises(StackFileError, match=rf"namespace '{typo}' is not 'tpu-slicing'.*tpu-slicing:serving"):
        config_keys({f"{typo}:serving": {}})


def test_other_providers_namespaces_pass() -> None:
    assert config_keys({"gcp:project": "p", "kubernetes:context": "c"}) == {
        "gcp:project": "p",
        "kubernetes:context": "c",
    }


def test_the_plan_reads_stack_files_through_the_cli_reader(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text("config:\n  gcp:project: p\n  zone: us-central1-ai1a\n")
    config, _ = engine.read_stack_config(path)
    assert config["tpu-slicing:zone"] == "us-central1-ai1a"
    path.write_text("config:\n  zone: a\n  zone: b\n")
    with pytest.raises(StackFileError, match=r"Pulumi\.x\.yaml: line 3"):
        engine.read_stack_config(path)


@pytest.mark.parametrize("path", sorted(ROOT.glob("Pulumi.*.yaml")), ids=lambda p: p.name)
def test_committed_stack_files_read_the_same_under_both_readers(path: Path) -> None:
    assert read(path) == yaml.safe_load(path.read_text())["config"]
