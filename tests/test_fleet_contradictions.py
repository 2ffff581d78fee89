"""The fleet refuses contradictions (settings/rules_fleet.py): stack files each valid alone that
cannot both hold. Every command that judges the fleet (`plan stacks`, `plan fleet`, the rollout
before its first step) refuses each rule's example, naming both stacks and the key; and the
Workload Identity principals the check reads are those each stack's offline plan grants roles to."""

from __future__ import annotations

import copy
import inspect
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from operate import rollout
from operate.__main__ import main as operate_main
from plan import engine, stacks
from plan.__main__ import main as plan_main
from settings import rules_fleet, stack_file
from settings.rules_fleet import CONTRADICTIONS, FleetRule
from tests.conftest import config_with, merged, stack_raw

COMMITTED = ("dev", "dev-b", "jetstream-v5e", "saxml-v5e")
AUTOSCALED = {"min": 1, "max": 2, "metric": "vllm:num_requests_waiting", "target": 4}


def _merge(base: dict[str, Any], change: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in change.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def write_stacks(folder: Path, example: Mapping[str, tuple[str, Mapping[str, Any]]]) -> dict[str, Path]:
    """Each `Pulumi.<name>.yaml` of `example` in `folder`: the committed stack file it names, with
    its change (a bare key is the project's; a mapping is merged; None removes a key)."""
    written = {}
    for name, (base, change) in example.items():
        config = stack_file.read(engine.ROOT / f"Pulumi.{base}.yaml")
        for key, value in change.items():
            full = key if ":" in key else f"tpu-slicing:{key}"
            if value is None:
                config.pop(full, None)
            elif isinstance(value, Mapping) and isinstance(config.get(full), dict):
                config[full] = _merge(config[full], value)
            else:
                config[full] = copy.deepcopy(value)
        written[name] = folder / f"Pulumi.{name}.yaml"
        written[name].write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    return written


def _only(found: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands read these stack files instead of the repository's."""
    monkeypatch.setattr(stacks, "stack_files", lambda root=engine.ROOT: dict(sorted(found.items())))


def _refusals(text: str, row: FleetRule) -> list[str]:
    first, second = sorted(row.example)
    named = f"CONFLICT {first} and {second}: {row.key}: "
    return [line for line in text.splitlines() if named in line and f"allowed: {row.allowed}" in line]


@pytest.mark.parametrize("row", CONTRADICTIONS, ids=lambda row: row.name)
def test_each_contradiction_is_refused_by_every_command_naming_both_stacks_and_the_key(
    row: FleetRule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    found = write_stacks(tmp_path, row.example)
    configs, invalid = stacks.load_stacks(tmp_path)
    assert invalid == [] and sorted(configs) == sorted(row.example)  # each file is valid alone
    # Its own rule refuses it, and no other: the rules are independent, each example one contradiction.
    conflicts = stacks.check(configs)
    assert conflicts and conflicts == row.rule(stacks.fleet(configs)), [str(c) for c in conflicts]
    assert {c.key for c in conflicts} == {row.key}

    _only(found, monkeypatch)
    assert plan_main(["stacks"]) == 1
    assert _refusals(capsys.readouterr().out, row)
    assert plan_main(["fleet"]) == 1
    assert _refusals(capsys.readouterr().out, row)

    def no_runner(*_: object, **__: object) -> None:
        raise AssertionError("the rollout started a step on contradicting stacks")

    monkeypatch.setattr(rollout, "AutomationRunner", no_runner)
    monkeypatch.setattr(rollout, "rollout", no_runner)
    assert operate_main(["rollout"]) == 2
    said = capsys.readouterr()
    assert _refusals(said.err, row) and "nothing was previewed" in said.err and said.out == ""


def test_every_rule_has_a_row_and_a_source() -> None:
    rules = [
        value
        for name, value in vars(rules_fleet).items()
        if inspect.isfunction(value)
        and name != "check"
        and inspect.signature(value).return_annotation == "list[Contradiction]"
    ]
    assert rules == [row.rule for row in CONTRADICTIONS]
    text = Path(rules_fleet.__file__).read_text()
    for row in CONTRADICTIONS:
        body = text[text.index(f"def {row.rule.__name__}(") :]
        body = body[: body.index("\ndef ", 1)]
        assert "# Source: " in body and ("docs.cloud.google.com" in body or "compute/v1" in body), row.name
        assert len(row.example) == 2, row.name


def test_the_committed_stacks_contradict_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    configs, invalid = stacks.load_stacks()
    assert invalid == [] and sorted(configs) == sorted(COMMITTED)
    assert stacks.check(configs) == []
    assert plan_main(["stacks"]) == 0 and plan_main(["fleet"]) == 0
    capsys.readouterr()
    # What the check reads of them: dev-b serves nothing (backend none), and the other three keep
    # their identities under names of their own (settings/naming.py, from namePrefix).
    held = {name: {(p.namespace, p.service_account) for p in stacks.principals(c)} for name, c in configs.items()}
    assert held == {
        "dev": {("llm-d-pd-disaggregation", "dev-vllm-model-server")},
        "dev-b": set(),
        "jetstream-v5e": {("jetstream", "jetstream-v5e-jetstream")},
        "saxml-v5e": {("sax", "saxml-v5e-sax-sa"), ("sax", "saxml-v5e-sax-http")},
    }


# dev's serving block, and dev-b's namespace removed: the default every vLLM stack has.
VLLM_SERVING = {**stack_file.read(engine.ROOT / "Pulumi.dev.yaml")["tpu-slicing:serving"], "namespace": None}


def test_two_vllm_stacks_of_a_project_hold_two_principals_in_the_default_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """dev-b as a vLLM stack, as dev is, both in the default serving.namespace: their accounts carry
    their namePrefix, so no principal is shared (the program's plans grant them, below); the same
    prefix in both is one principal again, refused naming namePrefix."""
    serving = copy.deepcopy(VLLM_SERVING)
    found = write_stacks(tmp_path, {"dev": ("dev", {}), "dev-b": ("dev-b", {"serving": serving})})
    _only(found, monkeypatch)
    assert plan_main(["stacks"]) == 0, capsys.readouterr().out
    configs, _ = stacks.load_stacks(tmp_path)
    members = {name: {p.member(c.project) for p in stacks.principals(c)} for name, c in configs.items()}
    assert members["dev"] and members["dev-b"] and not members["dev"] & members["dev-b"], members

    write_stacks(tmp_path, {"dev": ("dev", {}), "dev-b": ("dev-b", {"serving": serving, "namePrefix": "dev"})})
    configs, invalid = stacks.load_stacks(tmp_path)
    assert invalid == []
    said = [str(c) for c in rules_fleet.shared_principals(stacks.fleet(configs))]
    assert len(said) == 1 and said[0].startswith("dev and dev-b: namePrefix: both grant"), said
    assert "example-tpu-project.svc.id.goog/subject/ns/llm-d-pd-disaggregation/sa/dev-vllm-model-server" in said[0]


def test_the_metrics_adapters_fixed_principal_is_shared_by_two_autoscaled_stacks(tmp_path: Path) -> None:
    """Each autoscaled vLLM stack installs the adapter under one fixed namespace and name: another
    serving.namespace does not part them, and the refusal names the autoscaling key."""
    scaled = {"decode": {"autoscaling": AUTOSCALED}}
    write_stacks(
        tmp_path,
        {
            "dev": ("dev", {"serving": scaled}),
            "dev2": ("dev", {**rules_fleet.DEV_TWIN, "serving": {**scaled, "namespace": "llm-d-two"}}),
        },
    )
    configs, invalid = stacks.load_stacks(tmp_path)
    assert invalid == []
    said = [str(c) for c in stacks.check(configs)]
    assert len(said) == 1 and said[0].startswith("dev and dev2: serving.decode.autoscaling: both grant"), said
    assert "ns/custom-metrics/sa/custom-metrics-stackdriver-adapter" in said[0]
    assert "controllers.install false" in said[0]


def test_the_capacity_refusal_says_where_the_autoscaled_roles_grow(tmp_path: Path) -> None:
    """An autoscaled role grows inside its stack's cubes: the sum counts tpu.cubes, and says so."""
    change = dict(CONTRADICTIONS[[row.rule for row in CONTRADICTIONS].index(rules_fleet.block_capacity)].example)
    change["dev"] = ("dev", {"serving": {"decode": {"autoscaling": AUTOSCALED}}})
    write_stacks(tmp_path, change)
    configs, invalid = stacks.load_stacks(tmp_path)
    assert invalid == []
    said = [str(c) for c in rules_fleet.block_capacity(stacks.fleet(configs))]
    assert len(said) == 1 and "claim 5 cubes" in said[0] and "holds 4" in said[0], said
    assert "dev 2 with decode max 2 inside them" in said[0] and "dev-b 3," in said[0]


def test_stacks_of_different_projects_share_no_principal(tmp_path: Path) -> None:
    twin = {**rules_fleet.DEV_TWIN, "gcp:project": "other-tpu-project"}
    write_stacks(tmp_path, {"dev": ("dev", {}), "dev2": ("dev", twin)})
    configs, invalid = stacks.load_stacks(tmp_path)
    assert invalid == [] and rules_fleet.shared_principals(stacks.fleet(configs)) == []


# --- The principals the check reads are those the program grants roles to --------------------------

MEMBER = re.compile(
    r"^(?:principal://iam\.googleapis\.com/projects/[^/]+/locations/global/workloadIdentityPools/"
    r"(?P<pool>[^/]+)/subject/ns/(?P<ns>[^/]+)/sa/(?P<sa>[^/]+)"
    r"|serviceAccount:(?P<pool2>[^\[]+\.svc\.id\.goog)\[(?P<ns2>[^/]+)/(?P<sa2>[^\]]+)\])$"
)


def planned_principals(result: engine.PlanResult) -> set[tuple[str, str, str]]:
    """(workload pool, namespace, service account) of every IAM member the plan grants a role to."""
    found = set()
    for resource in result.resources:
        member = resource.get("member")
        match = MEMBER.match(member) if isinstance(member, str) else None
        if match is not None:
            parts = match.groupdict()
            found.add((parts["pool"] or parts["pool2"], parts["ns"] or parts["ns2"], parts["sa"] or parts["sa2"]))
    return found


VARIANTS = [
    *((stack, {}) for stack in COMMITTED),
    ("dev", {"serving": {"benchmark": {"enabled": True}}}),
    ("dev", {"serving": {"decode": {"autoscaling": AUTOSCALED}, "namespace": "llm-d-other"}}),
    ("dev", {"serving": {"prefill": {"autoscaling": AUTOSCALED}}, "controllers": {"install": False}}),
    ("saxml-v5e", {"serving": {"namespace": "sax-two"}}),
]


@pytest.mark.parametrize(("stack", "overrides"), VARIANTS, ids=lambda v: v if isinstance(v, str) else str(v))
def test_the_principals_are_those_the_offline_plan_grants(stack: str, overrides: dict[str, Any]) -> None:
    raw, secrets = stack_raw(stack)
    config = config_with(overrides, stack=stack)
    planned = planned_principals(engine.run(merged(overrides, raw), stack=stack, secret_keys=secrets))
    pool = f"{config.project}.svc.id.goog"
    assert planned == {(pool, p.namespace, p.service_account) for p in stacks.principals(config)}
