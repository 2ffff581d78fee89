"""One verdict everywhere: the settings loader, the offline plan and the policy pack agree on every class.

Each refused class of settings/refusals.py is written into a private copy of a committed stack file.
The settings (reading it through settings/stack_file.py) and `python -m plan --stack <name>` on that
copy refuse it with the same message; where the pack has a twin rule, the pack's policy, called on the
resource inputs the plan records for a valid twin of the stack with the bad value put where the
program would put it, refuses it as well. Valid configurations, among them three that were once
refused, pass all three.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from plan import engine
from plan.__main__ import main as plan_main
from policy import guardrails
from settings import refusals, stack_file
from settings.loader import ConfigError, load
from settings.refusals import REFUSED_CLASSES, RefusedClass
from settings.rules_kueue import DEFAULT_TOPOLOGY_LEVELS
from settings.stack_file import StackFileError
from tests.refusal_members import MEMBERS
from tests.test_policy import SECRET_SIG, resource_args, stack_args, violations

POLICIES = {policy.name: policy for policy in guardrails.POLICIES}
K8S_SECRET = "kubernetes:core/v1:Secret"


# --- Writing a stack variant and asking each judge -------------------------------------------------


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def write_variant(folder: Path, stack: str, example: Mapping[str, Any], lines: str = "") -> Path:
    """`Pulumi.<stack>.yaml` in `folder`: the committed file with `example` applied (conftest's rules)."""
    config = stack_file.read(engine.ROOT / f"Pulumi.{stack}.yaml")  # the committed file, never a variant
    for key, value in example.items():
        full = key if ":" in key else f"tpu-slicing:{key}"
        if value is None:
            config.pop(full, None)
        elif isinstance(value, Mapping) and isinstance(config.get(full), dict):
            config[full] = _merge(config[full], value)
        else:
            config[full] = copy.deepcopy(value)
    path = folder / f"Pulumi.{stack}.yaml"
    path.write_text(yaml.safe_dump({"config": config}, sort_keys=False) + lines)
    return path


def settings_verdict(path: Path, stack: str) -> str | None:
    """The loader's refusal (as the plan reads the file), or None when it accepts."""
    try:
        raw, secrets = engine.read_stack_config(path)
        load(raw, stack=stack, project=raw.get("gcp:project"), secret_keys=secrets)
    except (ConfigError, StackFileError) as err:
        return str(err)
    return None


def plan_verdict(
    path: Path, stack: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str | None:
    """`python -m plan --stack <stack>` reading the variant instead of the committed file."""
    monkeypatch.setattr(engine, "stack_file", lambda name, root=None: path.parent / f"Pulumi.{name}.yaml")
    capsys.readouterr()
    code = plan_main(["--stack", stack, "--out", str(path.parent / "out")])
    err = capsys.readouterr().err
    assert code in (0, 2), err
    return err if code else None


# --- The pack: a valid twin's plan, with the bad value where the program would put it ------------------


def _walk_replace(node: Any, good: Any, bad: Any) -> tuple[Any, int]:
    if node == good:
        return copy.deepcopy(bad), 1
    if isinstance(node, dict):
        count = 0
        out = {}
        for key, value in node.items():
            out[key], found = _walk_replace(value, good, bad)
            count += found
        return out, count
    if isinstance(node, list):
        pairs = [_walk_replace(value, good, bad) for value in node]
        return [value for value, _ in pairs], sum(found for _, found in pairs)
    return node, 0


Mutation = Callable[[engine.Resource], dict[str, Any] | None]


def replace(good: Any, bad: Any) -> Mutation:
    """Every input value equal to `good` becomes `bad` (None when the resource has none)."""

    def mutate(resource: engine.Resource) -> dict[str, Any] | None:
        inputs, found = _walk_replace(resource.inputs, good, bad)
        return inputs if found else None

    return mutate


def _no_reservation(resource: engine.Resource) -> dict[str, Any] | None:
    if resource.type != guardrails.NODE_POOL or not str(resource.get("nodeConfig.machineType")).startswith("tpu7x"):
        return None
    inputs = copy.deepcopy(resource.inputs)
    inputs["nodeConfig"]["reservationAffinity"] = {"consumeReservationType": "NO_RESERVATION"}
    return inputs


def _reveal(node: Any) -> Any:
    if isinstance(node, dict):
        if node.get(next(iter(SECRET_SIG))) == next(iter(SECRET_SIG.values())):
            return _reveal(node["value"])
        return {key: _reveal(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_reveal(value) for value in node]
    return node


def _plain_token(resource: engine.Resource) -> dict[str, Any] | None:
    if resource.type != K8S_SECRET or "HF_TOKEN" not in json.dumps(resource.inputs):
        return None
    return {**resource.inputs, "stringData": _reveal(resource.inputs.get("stringData"))}


@dataclass(frozen=True)
class Twin:
    """A valid variant of the class's stack, and where its bad value lands in the recorded inputs."""

    example: Mapping[str, Any]
    mutate: Mutation
    config: Mapping[str, Any] = field(default_factory=dict)
    secret: bool = False  # hfToken set with --secret


_EXTERNAL = {"serving": {"http": {"type": "external", "sourceRanges": ["10.0.0.0/8"]}}}
_MODEL = "Qwen/Qwen3.5-397B-A17B-FP8"
_ALLOW = {"allowExternalServices": True}
TWINS: dict[str, Twin] = {
    "TPU7x without a reservation block": Twin({}, _no_reservation),
    "floating chart version": Twin({}, replace("0.19.2", "latest")),
    "image on a channel tag": Twin({}, replace("docker.io/vllm/vllm-tpu:v0.26.0", "docker.io/vllm/vllm-tpu:latest")),
    "image without a tag": Twin(
        {},
        replace("ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.9.0", "ghcr.io/llm-d/llm-d-router-endpoint-picker"),
    ),
    "image on a major.minor line": Twin(
        {},
        replace(
            "python:3.12.13-slim@sha256:423ed6ab25b1921a477529254bfeeabf5855151dc2c3141699a1bfc852199fbf",
            "python:3.12-slim",
        ),
    ),
    "image on a major-version line": Twin(
        {},
        replace(
            "us-docker.pkg.dev/cloud-tpu-images/inference/sax-admin-server:v1.1.0",
            "us-docker.pkg.dev/cloud-tpu-images/inference/sax-admin-server:v1",
        ),
    ),
    "image with whitespace or control characters": Twin(
        {}, replace("docker.io/vllm/vllm-tpu:v0.26.0", "docker.io/vllm/vllm-tpu:v0.26.0 ")
    ),
    "image tag with a channel word after its version": Twin(
        {}, replace("docker.io/vllm/vllm-tpu:v0.26.0", "docker.io/vllm/vllm-tpu:v0.26.0-nightly")
    ),
    "image tag whose only version is its base OS's": Twin(
        {}, replace("docker.io/vllm/vllm-tpu:v0.26.0", "docker.io/vllm/vllm-tpu:ubuntu-22.04.4")
    ),
    "source ranges that together hold more than a /8 of the internet": Twin(
        _EXTERNAL, replace(["10.0.0.0/8"], [f"{n}.0.0.0/9" for n in range(20, 60, 2)]), _ALLOW
    ),
    "credential in an ordinary setting": Twin({}, replace(_MODEL, "models/hf_" + "x" * 34)),
    "external service without source ranges": Twin(_EXTERNAL, replace(["10.0.0.0/8"], []), _ALLOW),
    "source ranges whose union is wider than a /8": Twin(
        _EXTERNAL, replace(["10.0.0.0/8"], ["0.0.0.0/1", "128.0.0.0/1"]), _ALLOW
    ),
    "plain-text hfToken": Twin({"hfToken": {"secure": "v1:AAAAnotreal"}}, _plain_token, secret=True),
}

_PLANS: dict[str, engine.PlanResult] = {}


def twin_plan(folder: Path, stack: str, example: Mapping[str, Any]) -> engine.PlanResult:
    key = json.dumps([stack, example], sort_keys=True)
    if key not in _PLANS:
        twin = folder / "twin"
        twin.mkdir(exist_ok=True)
        path = write_variant(twin, stack, example)
        assert settings_verdict(path, stack) is None, "the twin must be a valid stack"
        raw, secrets = engine.read_stack_config(path)
        _PLANS[key] = engine.run(raw, stack=stack, secret_keys=secrets)
    return _PLANS[key]


def pack_messages(
    plan: engine.PlanResult, policy_name: str, config: Mapping[str, Any], inputs: Mapping[str, dict[str, Any]]
) -> list[str]:
    """What one policy reports on the plan, with `inputs` (by URN) in place of the recorded ones."""
    policy = POLICIES[policy_name]
    cfg = dict(config)
    if isinstance(policy, guardrails.StackValidationPolicy):
        return [m for m, _ in violations(policy, stack_args(plan.resources, dict(inputs), config=cfg, form="recorded"))]
    assert isinstance(policy, guardrails.ResourceValidationPolicy)
    found: list[str] = []
    for resource in plan.resources:
        args = resource_args(resource, inputs.get(resource.urn), config=cfg, form="recorded")
        found += [m for m, _ in violations(policy, args)]
    return found


def pack_verdict(folder: Path, refused: RefusedClass) -> tuple[list[str], list[str]]:
    """(violations on the valid twin, violations with the bad value put in): [] and non-empty if they agree."""
    assert refused.pack is not None
    twin = TWINS[refused.name]
    plan = twin_plan(folder, refused.stack, twin.example)
    changed = {r.urn: inputs for r in plan.resources if (inputs := twin.mutate(r)) is not None}
    assert changed, f"{refused.name}: the bad value lands in no resource of the plan"
    return pack_messages(plan, refused.pack, twin.config, {}), pack_messages(plan, refused.pack, twin.config, changed)


# --- The verdicts ----------------------------------------------------------------------------------------


def test_the_classes_are_counted_from_the_table() -> None:
    assert refusals.CLASS_COUNT == len(REFUSED_CLASSES) == len(set(refusals.NAMES))
    assert refusals.CLASS_COUNT >= 55
    for refused in REFUSED_CLASSES:
        assert callable(refused.rule) or type(refused.rule).__name__ == "FieldInfo", refused.name
        assert refused.pack is None or refused.pack in POLICIES, refused.name
    # Every class the pack shares has a twin here, and every twin a class.
    assert {c.name for c in REFUSED_CLASSES if c.pack} == set(TWINS)


@pytest.mark.parametrize("refused", REFUSED_CLASSES, ids=refusals.NAMES)
def test_settings_plan_and_pack_refuse_alike(
    refused: RefusedClass, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_variant(tmp_path, refused.stack, refused.example, refused.stack_lines)
    message = settings_verdict(path, refused.stack)
    assert message is not None, f"{refused.name}: the settings accept it"
    assert refused.key in message and refused.allowed in message, message
    assert "hf_plain" not in message  # a refused secret is never echoed

    plan_message = plan_verdict(path, refused.stack, monkeypatch, capsys)
    assert plan_message is not None, f"{refused.name}: the plan accepts it"
    problems = message.split("\n", 1)[-1]
    assert problems in plan_message, plan_message

    if refused.pack:
        on_twin, with_bad_value = pack_verdict(tmp_path, refused)
        assert on_twin == [], on_twin
        assert with_bad_value, f"{refused.name}: the pack's {refused.pack} accepts it"


BY_NAME = {c.name: c for c in REFUSED_CLASSES}


def test_every_generated_class_is_in_the_table() -> None:
    assert set(MEMBERS) <= set(BY_NAME)
    assert {n for n in MEMBERS if BY_NAME[n].pack} == set(MEMBER_SWAPS)


@pytest.mark.parametrize("name", sorted(MEMBERS))
def test_generated_members_are_refused_alike(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Members nobody chose, through the settings as the plan reads them and, for a pack twin, the pack."""
    refused = BY_NAME[name]
    folder = tmp_path_factory.mktemp("members")

    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(MEMBERS[name])
    def check(example: dict[str, Any]) -> None:
        path = write_variant(folder, refused.stack, example)
        message = settings_verdict(path, refused.stack)
        assert message is not None, f"{name}: the settings accept {example}"
        assert refused.key in message and refused.allowed in message, message
        if refused.pack:
            good, find = MEMBER_SWAPS[name]
            bad = find(example)
            plan = twin_plan(folder, refused.stack, TWINS[name].example)
            changed = {r.urn: inputs for r in plan.resources if (inputs := replace(good, bad)(r)) is not None}
            assert changed, f"{name}: {good!r} is in no resource of the twin's plan"
            assert pack_messages(plan, refused.pack, TWINS[name].config, changed), f"the pack accepts {bad!r}"

    check()


# For the classes with a pack twin: the twin's good value, and where a member holds its bad value.
_Find = Callable[[dict[str, Any]], Any]
_IMAGE: tuple[Any, _Find] = ("docker.io/vllm/vllm-tpu:v0.26.0", lambda e: e["versions"]["vllmImage"])
_RANGES: tuple[Any, _Find] = (["10.0.0.0/8"], lambda e: e["serving"]["http"]["sourceRanges"])
MEMBER_SWAPS: dict[str, tuple[Any, _Find]] = {
    "image with whitespace or control characters": _IMAGE,
    "image tag with a channel word after its version": _IMAGE,
    "image tag whose only version is its base OS's": _IMAGE,
    "source ranges that together hold more than a /8 of the internet": _RANGES,
    "credential in an ordinary setting": (_MODEL, lambda e: e["serving"]["model"]["path"]),
}

# Valid stacks, among them three that were refused once: GKE's shared address space for pods
# (7f33d63), an unquoted clock time that YAML 1.1 would read as a number and a key without its
# namespace (b8a6da7, read as the CLI reads them).
ACCEPTED: list[tuple[str, str, Mapping[str, Any], str]] = [
    ("dev as committed", "dev", {}, ""),
    ("dev-b as committed", "dev-b", {}, ""),
    ("saxml-v5e as committed", "saxml-v5e", {}, ""),
    ("jetstream-v5e as committed", "jetstream-v5e", {}, ""),
    ("pods in 100.64.0.0/10", "dev", {"network": {"podCidr": "100.64.0.0/14"}}, ""),
    (
        "unquoted 22:00 window",
        "dev",
        {"cluster": None},
        "  tpu-slicing:cluster:\n    maintenanceWindowStart: 22:00\n    allowTpuNodeUpgrades: true\n",
    ),
    ("bare project key", "dev", {"namePrefix": None}, "  namePrefix: devbare\n"),
    ("a smoke-test run id", "dev", {"serving": {"smokeTest": {"runId": "run-2026-12-01"}}}, ""),
    ("tensor parallelism that fits", "dev", {"serving": {"vllm": {"tensorParallelSize": 8}}}, ""),
    ("the smallest system machine that fits", "dev", {"cluster": {"systemMachineType": "e2-standard-8"}}, ""),
    # Refused once (issue 25): RFC 1123 allows a namespace's leading digit; every GKE node carries its
    # zone and node-pool labels, so Kueue may use them as levels.
    ("a namespace that starts with a digit", "dev", {"serving": {"namespace": "1-serving"}}, ""),
    (
        "topology levels on the zone and node-pool labels",
        "dev",
        {
            "kueue": {
                "topologyLevels": [
                    "topology.kubernetes.io/zone",
                    "cloud.google.com/gce-topology-block",
                    "cloud.google.com/gke-nodepool",
                    *DEFAULT_TOPOLOGY_LEVELS[1:],
                ]
            }
        },
        "",
    ),
    ("a TPU7x stack in its other zone", "dev", {"zone": "us-central1-c", "region": None}, ""),
    ("a tensor parallelism that divides the heads", "dev", {"serving": {"vllm": {"tensorParallelSize": 16}}}, ""),
    (
        "both roles autoscaled, with the metrics adapter",
        "dev",
        {
            "serving": {
                "prefill": {"autoscaling": {"min": 2, "max": 6, "metric": "vllm:prompt_tokens_total", "target": 4000}},
                "decode": {"autoscaling": {"min": 2, "max": 6, "metric": "vllm:kv_cache_usage_perc", "target": 0.8}},
            }
        },
        "",
    ),
    # Refused once (issue 25): GKE builds a v6e 2x4 from two 4-chip VMs as well as one 8-chip VM.
    (
        "a v6e 2x4 slice on two 4-chip VMs",
        "jetstream-v5e",
        {"zone": "us-east5-b", "serving": {"slice": {"machineType": "ct6e-standard-4t", "topology": "2x4"}}},
        "",
    ),
]


@pytest.mark.parametrize("case", ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_valid_stacks_pass_settings_plan_and_pack(
    case: tuple[str, str, Mapping[str, Any], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, stack, example, lines = case
    path = write_variant(tmp_path, stack, example, lines)
    assert settings_verdict(path, stack) is None
    assert plan_verdict(path, stack, monkeypatch, capsys) is None
    raw, secrets = engine.read_stack_config(path)
    plan = engine.run(raw, stack=stack, secret_keys=secrets)
    found = [m for name in POLICIES for m in pack_messages(plan, name, {}, {})]
    assert found == []


@pytest.mark.parametrize("only", refusals.PACK_ONLY, ids=[p.name for p in refusals.PACK_ONLY])
def test_what_only_the_pack_refuses_is_listed_with_its_reason(only: refusals.PackOnly, tmp_path: Path) -> None:
    path = write_variant(tmp_path, only.stack, only.example)
    assert settings_verdict(path, only.stack) is None
    raw, secrets = engine.read_stack_config(path)
    plan = engine.run(raw, stack=only.stack, secret_keys=secrets)
    assert pack_messages(plan, only.policy, {}, {}), f"{only.name}: the pack accepts it; drop it from PACK_ONLY"
    if only.waiver:
        assert pack_messages(plan, only.policy, only.waiver, {}) == []
