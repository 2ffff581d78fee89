"""The settings loader reports every problem of a stack at once, each under the key the stack file uses."""

from __future__ import annotations

from pathlib import Path

import pytest

from plan import engine
from settings.loader import ConfigError, load


def _problems(raw: dict[str, str], project: str | None = None) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(raw, stack="x", project=project, secret_keys=[])
    return caught.value.problems


def test_an_empty_stack_file_reports_every_missing_required_key_at_once(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text("")
    raw, _ = engine.read_stack_config(path)
    problems = _problems(raw, raw.get("gcp:project"))
    assert [p.split(":", 2)[:2] for p in problems] == [["gcp", "project"], ["tpu-slicing", "zone"]], problems
    assert all("is required" in p for p in problems), problems


def test_missing_keys_come_with_the_other_problems() -> None:
    problems = _problems({"tpu-slicing:hfToken": "hf_plain", "tpu-slicing:network": '{"mtu": 9000}'})
    keys = sorted(p.split(": ", 1)[0] for p in problems)
    assert keys == ["gcp:project", "tpu-slicing:hfToken", "tpu-slicing:network.mtu", "tpu-slicing:zone"], problems
    assert not any("hf_plain" in p for p in problems)


def test_a_bad_project_is_named_by_the_key_that_sets_it() -> None:
    (problem,) = _problems({"tpu-slicing:zone": "us-central1-ai1a"}, project="P")
    assert problem.startswith("gcp:project: 'P' is not allowed"), problem


def test_project_as_a_project_key_is_refused_alone() -> None:
    raw, _ = engine.read_stack_config(engine.stack_file("dev"))
    problems = _problems({**raw, "tpu-slicing:project": "Other"}, raw["gcp:project"])
    assert problems == ["tpu-slicing:project: is not a key of this project; set gcp:project instead"], problems


def test_a_key_of_a_namespace_nothing_reads_is_refused_with_the_other_problems() -> None:
    """What `pulumi up` hands the program (from_runtime: every key of every namespace) is judged here,
    so a look-alike namespace or a kubernetes: key is refused under the engine as under `make plan`."""
    raw, _ = engine.read_stack_config(engine.stack_file("dev"))
    kubeconfig = "apiVersion: v1\nclusters:\n- cluster: {server: https://10.0.0.1}\n  name: c\n"
    problems = _problems(
        {**raw, "kubernetes:kubeconfig": kubeconfig, "tpu-slіcing:zone": "x", "tpu-slicing:network": '{"mtu": 9000}'},
        raw["gcp:project"],
    )
    assert [p.split(": ", 1)[0] for p in problems] == [
        "config key 'kubernetes:kubeconfig'",
        "config key 'tpu-slіcing:zone'",  # Cyrillic і (U+0456)
        "tpu-slicing:network.mtu",
    ], problems
    assert "allowed: tpu-slicing:zone" in problems[1] and "U+0456" in problems[1], problems
    assert not any("10.0.0.1" in p for p in problems), problems


def test_a_leaked_credential_comes_with_the_namespace_and_provider_key_problems() -> None:
    """A credential in an ordinary key stops the model's rules (they may show a value), not the checks of
    the other keys: namespaces, provider credentials and the provider keys are all heard of at once."""
    raw, _ = engine.read_stack_config(engine.stack_file("dev"))
    token = "hf_" + "Zq81Mxnv0a9sKd7T" * 2
    problems = _problems(
        {
            **raw,
            "tpu-slіcing:zone": "x",
            "gcp:credentials": '{"type": "authorized_user"}',
            "tpu-slicing:namePrefix": token,
            "pulumi:disable-default-providers": '["gcp"]',
        },
        raw["gcp:project"],
    )
    assert [p.split(": ", 1)[0] for p in problems] == [
        "config key 'tpu-slіcing:zone'",
        "gcp:credentials",
        "tpu-slicing:namePrefix",
        "pulumi:disable-default-providers",
    ], problems
    assert "a Hugging Face token in plain text" in problems[2], problems
    assert not any(token in p or "authorized_user" in p for p in problems), problems
