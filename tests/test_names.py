"""Names matched whole, strings of visible characters, and the system pool's machine families.

settings/names.py holds the one rule: a name or identifier matches its grammar on the whole string
(`fullmatch`, ASCII classes), so no rule lets a final "\\n" through, and every string of the stack
configuration is refused when it holds a character a reader cannot see or tell from another.
settings/machines.py accepts the general-purpose x86 families and refuses the series GKE taints.
"""

from __future__ import annotations

import ast
import re
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from domain import gke_versions, topology
from plan import engine
from policy import guardrails
from settings import (
    machines,
    model,
    names,
    naming,
    oci_registry,
    pins,
    rules_observability,
    rules_serving,
    serving_model,
    stack_file,
    storage_names,
)
from settings.base import StrictModel
from settings.loader import ConfigError, load
from settings.model import StackConfig
from settings.rules_kueue import DEFAULT_TOPOLOGY_LEVELS
from tests.conftest import merged

ROOT = Path(__file__).resolve().parent.parent


def _accepts(rule: Callable[[str], Any]) -> Callable[[str], bool]:
    """A validator that raises ValueError on what it refuses, as a yes/no judge."""

    def judge(value: str) -> bool:
        try:
            rule(value)
        except ValueError:
            return False
        return True

    return judge


def _no_problem(problem: Callable[[str], str | None]) -> Callable[[str], bool]:
    return lambda value: problem(value) is None


def _offered(version: str) -> bool:
    offered = gke_versions.OfferedVersions([version], {"RAPID": version}, {"RAPID": version})
    return gke_versions.choose(offered, "RAPID", None, None).problem is None


def _resolves(pattern: str) -> Callable[[str], bool]:
    """A YAML implicit resolver's pattern as PyYAML applies it (`regexp.match`)."""
    return lambda value: re.compile(pattern).match(value) is not None


# --- Every name rule: the whole string, so a final "\n" is refused ---------------------------------------

# (site, judge, a value it accepts)
NAME_RULES: list[tuple[str, Callable[[str], bool], str]] = [
    ("settings/model.py RFC 1035 (namePrefix, DNS labels)", _accepts(model._rfc1035), "dev"),
    ("settings/model.py RFC 1123 (serving.namespace)", _accepts(model._rfc1123), "1-serving"),
    ("settings/serving_model.py label value (serving.model.name)", serving_model.LABEL_VALUE.matches, "Qwen3.5-FP8"),
    ("settings/serving_model.py object path", _accepts(serving_model.object_path), "models/qwen"),
    ("settings/rules_serving.py RUN_ID", _accepts(rules_serving.run_id), "run-2026-12-01"),
    (
        "settings/rules_observability.py notification channel",
        _accepts(lambda v: rules_observability.notification_channels([v])),
        "projects/example-tpu-project/notificationChannels/1",
    ),
    ("settings/storage_names.py bucket", _no_problem(storage_names.bucket_problem), "example-weights"),
    ("settings/storage_names.py object path", _no_problem(storage_names.object_path_problem), "models/x"),
    ("settings/pins.py image", _no_problem(pins.image_problem), "docker.io/vllm/vllm-tpu:v0.26.0"),
    ("settings/pins.py digest", pins.DIGEST.matches, "sha256:" + "0" * 64),
    ("settings/pins.py chart version", _no_problem(pins.chart_problem), "v0.8.0"),
    ("settings/pins.py semantic version", pins.SEMVER.matches, "0.12.0"),
    ("settings/machines.py machine type", _accepts(machines.machine), "n2-standard-8"),
    ("settings/oci_registry.py chart registry", _no_problem(oci_registry.problem), "oci://registry.k8s.io"),
    ("settings/stack_file.py stack name", _accepts(stack_file.check_stack_name), "dev-b"),
    ("domain/gke_versions.py version", _accepts(gke_versions.version_key), "1.36.0-gke.3712000"),
    ("domain/gke_versions.py offered version", _offered, "1.36.0-gke.3712000"),
    ("domain/topology.py slice shape", _accepts(topology.Topology.parse), "2x2x2"),
    (
        "policy/guardrails.py reservation path",
        guardrails.RESERVATION_PATH.matches,
        "projects/p/reservations/r/reservationBlocks/b",
    ),
    *(
        (f"settings/stack_file.py YAML 1.2 {tag.rsplit(':', 1)[-1]}", _resolves(pattern), sample)
        for (tag, pattern, _), sample in zip(stack_file._RESOLVERS, ["null", "true", "0x1f", "1.5e3"], strict=True)
    ),
]


@pytest.mark.parametrize(("site", "judge", "valid"), NAME_RULES, ids=[r[0] for r in NAME_RULES])
def test_a_name_rule_takes_the_value_and_refuses_it_with_a_final_newline(
    site: str, judge: Callable[[str], bool], valid: str
) -> None:
    assert judge(valid), f"{site} refuses its own example {valid!r}"
    for spoiled in (valid + "\n", valid + "\r\n", "\n" + valid, valid + "\n\n"):
        assert not judge(spoiled), f"{site} accepts {spoiled!r}"


# Digits of another script (`\d` without re.ASCII matches them, and int() reads them as numbers).
FOREIGN_DIGITS: list[tuple[str, Callable[[str], bool], str]] = [
    ("GKE version", _accepts(gke_versions.version_key), "1.3\u0666.0-gke.3712000"),
    ("chart version", _no_problem(pins.chart_problem), "0.1\uff12.0"),
    ("semantic version", pins.SEMVER.matches, "\u0660.12.0"),
    ("slice shape", _accepts(topology.Topology.parse), "2x\u0662"),
    ("machine type", _accepts(machines.machine), "n2-standard-\u0668"),
    ("image tag", _no_problem(pins.image_problem), "docker.io/vllm/vllm-tpu:v0.2\u0666.0"),
]


@pytest.mark.parametrize(("what", "judge", "value"), FOREIGN_DIGITS, ids=[r[0] for r in FOREIGN_DIGITS])
def test_digits_of_another_script_are_no_version_or_size(what: str, judge: Callable[[str], bool], value: str) -> None:
    assert not judge(value), f"the {what} rule accepts {value!r}"


def test_a_name_rule_is_written_without_anchors() -> None:
    with pytest.raises(ValueError, match="whole string"):
        names.NameRule(r"^[a-z]+$", "lowercase")
    rule = names.NameRule(r"[a-z]+", "lowercase")
    assert rule.matches("abc") and not rule.matches("abc\n") and not rule.matches("ａｂｃ") and not rule.matches(3)


def _regex_calls(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if called in ("compile", "match", "search", "fullmatch", "NameRule"):
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield node.lineno, first.value


@pytest.mark.parametrize("package", ["settings", "domain", "policy"])
def test_no_regex_of_the_program_ends_in_a_dollar(package: str) -> None:
    """`$` matches before a final "\\n": a whole-string rule is `fullmatch`, a NameRule, or `\\Z`."""
    found = [
        f"{path.relative_to(ROOT)}:{line}: {pattern!r}"
        for path in sorted((ROOT / package).glob("*.py"))
        for line, pattern in _regex_calls(ast.parse(path.read_text()))
        if pattern.endswith("$") and not pattern.endswith("\\$")
    ]
    assert found == []


# --- pydantic's own `pattern=`: pydantic-core's Rust regex, whose `$` is the end of the text -------------

# A value each pattern field accepts: a new pattern field needs a row here (the test below says so).
PATTERN_SAMPLES = {
    "zone": "us-central1-ai1a",
    "region": "us-central1",
    "project": "example-tpu-project",
    "cluster.versionPrefix": "1.36.",
    "cluster.systemMachineType": "n2-standard-32",
    "cluster.maintenanceWindowStart": "03:00",
    "reservation.project": "example-tpu-project",
    "serving.saxml.modelKey": "/sax/test/spmd",
    "serving.saxml.modelPath": "saxml.server.pax.lm.params.lm_cloud.LmCloudSpmd175B32Test",
    "serving.jetstream.maxtextModel": "llama2-70b",
}


def _model_of(annotation: Any) -> type[BaseModel] | None:
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _pattern_fields(cls: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, str]]:
    for name, field in cls.model_fields.items():
        key = f"{prefix}{field.alias or name}"
        for meta in field.metadata:
            if getattr(meta, "pattern", None):
                yield key, meta.pattern
        nested = _model_of(field.annotation)
        if nested is not None:
            yield from _pattern_fields(nested, f"{key}.")


PATTERN_FIELDS = dict(_pattern_fields(StackConfig))


def test_every_pattern_field_has_a_sample_and_ascii_classes() -> None:
    assert set(PATTERN_FIELDS) == set(PATTERN_SAMPLES)
    for key, pattern in PATTERN_FIELDS.items():
        # Rust's \d, \w and \s are Unicode: the patterns spell their ASCII classes out.
        assert not re.search(r"\\[dwsDWS]", pattern), f"{key}: {pattern}"
        assert pattern.startswith("^") and pattern.endswith("$"), f"{key}: {pattern}"


def test_the_tree_keeps_pydantic_cores_rust_regex() -> None:
    """Python's `re` would read `$` as "before a final newline"; the Rust engine reads it as the end."""
    assert StrictModel.model_config.get("regex_engine", "rust-regex") == "rust-regex"


@pytest.mark.parametrize("key", sorted(PATTERN_SAMPLES))
def test_a_pattern_field_refuses_a_final_newline(key: str) -> None:
    pattern = PATTERN_FIELDS[key]
    adapter: TypeAdapter[str] = TypeAdapter(Annotated[str, Field(pattern=pattern)])
    valid = PATTERN_SAMPLES[key]
    assert adapter.validate_python(valid) == valid
    for spoiled in (valid + "\n", valid + "\r\n", "\n" + valid):
        with pytest.raises(ValidationError):
            adapter.validate_python(spoiled)


# --- Visible characters in every string of the stack ----------------------------------------------------

# (the override, the key the message names): free-form names, paths, labels, tags and versions.
STRINGS: list[tuple[dict[str, Any], str]] = [
    ({"serving": {"model": {"name": "Qwen/Qwen3.5-397B-A17B-FP8"}}}, "serving.model.name"),
    (
        {
            "serving": {
                "model": {
                    "path": "models--Qwen--Qwen3.5-397B-A17B-FP8/snapshots/ea5b4f81096f3901c91dea97f81324302495781d"
                }
            }
        },
        "serving.model.path",
    ),
    ({"serving": {"gateway": {"name": "inference-gateway"}}}, "serving.gateway.name"),
    ({"serving": {"namespace": "llm-d-pd-disaggregation"}}, "serving.namespace"),
    ({"serving": {"smokeTest": {"runId": "run-1"}}}, "serving.smokeTest.runId"),
    ({"kueue": {"topologyLevels": list(DEFAULT_TOPOLOGY_LEVELS)}}, "kueue.topologyLevels"),
    ({"versions": {"kueue": "0.19.2"}}, "versions.kueue"),
    ({"versions": {"vllmImage": "docker.io/vllm/vllm-tpu:v0.26.0"}}, "versions.vllmImage"),
    ({"controllers": {"chartRegistry": "oci://registry.k8s.io"}}, "controllers.chartRegistry"),
    ({"cluster": {"version": "1.36.1-gke.1000000"}}, "cluster.version"),
    ({"cluster": {"systemMachineType": "n2-standard-32"}}, "cluster.systemMachineType"),
    ({"zone": "us-central1-ai1a"}, "zone"),
    ({"namePrefix": "dev"}, "namePrefix"),
]
BAD_CHARACTERS = [
    "\u200b",  # ZERO WIDTH SPACE (Cf)
    "\ufeff",  # ZERO WIDTH NO-BREAK SPACE, the byte-order mark (Cf)
    "\u202e",  # RIGHT-TO-LEFT OVERRIDE (Cf)
    "\u00a0",  # NO-BREAK SPACE (Zs)
    "\u3000",  # IDEOGRAPHIC SPACE (Zs)
    "\u2028",  # LINE SEPARATOR (Zl)
    "\u2029",  # PARAGRAPH SEPARATOR (Zp)
    "\n",  # LINE FEED (Cc)
    "\x1b",  # ESCAPE (Cc)
    "\x85",  # NEXT LINE (Cc, C1)
    "\uff41",  # FULLWIDTH LATIN SMALL LETTER A (NFKC: a)
    "\ufb01",  # LATIN SMALL LIGATURE FI (NFKC: fi)
]


def _dev_project() -> str:
    raw, _ = engine.read_stack_config(engine.stack_file("dev"))
    return str(raw["gcp:project"])


def _load(overrides: dict[str, Any]) -> StackConfig:
    raw = merged(overrides)
    return load(raw, stack="dev", project=raw.get("gcp:project"), secret_keys=())


def _spoil(override: dict[str, Any], char: str, where: str) -> dict[str, Any]:
    def place(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: place(v) for k, v in value.items()}
        if isinstance(value, list):
            return [place(value[0]), *value[1:]]
        middle = len(value) // 2
        return {"end": value + char, "start": char + value, "middle": value[:middle] + char + value[middle:]}[where]

    return place(override)


@pytest.mark.parametrize(("override", "key"), STRINGS, ids=[s[1] for s in STRINGS])
def test_the_committed_value_of_each_string_is_valid(override: dict[str, Any], key: str) -> None:
    _load(override)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(STRINGS), st.sampled_from(BAD_CHARACTERS), st.sampled_from(["end", "start", "middle"]))
def test_an_invisible_or_look_alike_character_is_refused_with_its_key_and_code_point(
    case: tuple[dict[str, Any], str], char: str, where: str
) -> None:
    override, key = case
    with pytest.raises(ConfigError) as refused:
        _load(_spoil(override, char, where))
    message = str(refused.value)
    assert f"tpu-slicing:{key}:" in message, message
    assert f"U+{ord(char):04X}" in message, message  # the character as an escape, never raw
    assert "allowed" in message, message


@pytest.mark.parametrize(
    ("char", "named"),
    [
        ("\u200b", "U+200B ZERO WIDTH SPACE (an invisible format character) at position 4"),
        ("\uff41", "U+FF41 FULLWIDTH LATIN SMALL LETTER A (a compatibility form NFKC normalization turns into 'a'"),
        ("\n", "U+000A LINE FEED (a control character) at position 4"),
        ("\u00a0", "U+00A0 NO-BREAK SPACE (a space other than the ASCII space)"),
    ],
)
def test_the_refusal_names_the_character_and_says_what_is_allowed(char: str, named: str) -> None:
    with pytest.raises(ConfigError) as refused:
        _load({"serving": {"model": {"name": f"Qwen{char}/Qwen3.5-397B-A17B-FP8"}}})
    message = str(refused.value)
    assert named in message, message
    assert names.TEXT_ALLOWED in message
    assert char not in message.split(":", 1)[1] or char == "\n"  # shown as an escape, not the raw character


def test_a_combining_mark_nfkc_would_join_is_refused() -> None:
    assert names.character_problem("cafe\u0301") == (
        "U+0301 COMBINING ACUTE ACCENT (a combining mark NFKC normalization joins to the character before it) "
        "at position 4"
    )
    assert names.character_problem("café") is None  # the composed letter is its own NFKC form


def test_an_item_of_a_list_is_named_by_its_index() -> None:
    levels = ["cloud.google.com/gce-topology-block", "kubernetes.io/host\u200bname"]
    with pytest.raises(ConfigError, match=r"tpu-slicing:kueue\.topologyLevels: item \[1\] .*U\+200B"):
        _load({"kueue": {"topologyLevels": levels}})


def test_the_ascii_space_is_left_to_each_fields_own_rule() -> None:
    assert names.character_problem("models/my model") is None
    assert names.character_problem("a b", space=False) == "U+0020 SPACE (a space) at position 1"
    spaced = "my models/models--Qwen--Qwen3.5-397B-A17B-FP8/snapshots/ea5b4f81096f3901c91dea97f81324302495781d"
    assert _load({"serving": {"model": {"path": spaced}}}).serving.model.path == spaced
    refused = r"tpu-slicing:serving\.gateway\.name: 'inference gateway' is not a valid name"
    with pytest.raises(ConfigError, match=refused):
        _load({"serving": {"gateway": {"name": "inference gateway"}}})


def test_a_fields_own_rule_speaks_first_and_the_character_is_named_too() -> None:
    """Images, the chart registry and object paths keep their own words (and the policy pack's)."""
    with pytest.raises(ConfigError) as refused:
        _load({"controllers": {"chartRegistry": "oci://\uff52egistry.k8s.io"}})
    message = str(refused.value)
    assert message.endswith(oci_registry.ALLOWED)
    assert "dot-separated labels) (it holds U+FF52 FULLWIDTH LATIN SMALL LETTER R" in message
    with pytest.raises(ConfigError) as refused:
        _load({"versions": {"vllmImage": "docker.io/vllm/vllm-tpu:v0.26.0\u2003"}})
    message = str(refused.value)
    assert "the API server refuses such a Pod" in message and message.count("U+2003 EM SPACE") == 1


def test_the_secret_is_not_read_and_never_echoed() -> None:
    raw = merged({"hfToken": "hf_\u200bsecret"})
    config = load(raw, stack="dev", project=_dev_project(), secret_keys={"tpu-slicing:hfToken"})
    assert config.hf_token is not None


def test_the_pack_refuses_a_pinned_image_with_an_invisible_character_alike() -> None:
    assert pins.image_problem("docker.io/vllm/vllm-tpu:v0.26.0\u200b") == (
        "U+200B ZERO WIDTH SPACE (an invisible format character) at position 31 (the API server refuses such a Pod)"
    )
    assert "U+00A0 NO-BREAK SPACE" in str(pins.image_problem("docker.io/vllm/\u00a0vllm-tpu:v0.26.0"))


# --- Valid stays valid: every committed stack loads -------------------------------------------------------

STACKS = sorted(path.name.removeprefix("Pulumi.").removesuffix(".yaml") for path in ROOT.glob("Pulumi.*.yaml"))


@pytest.mark.parametrize("stack", STACKS)
def test_a_committed_stack_still_loads_and_every_string_is_visible(stack: str) -> None:
    raw, secrets = engine.read_stack_config(engine.stack_file(stack))
    config = load(raw, stack=stack, project=raw.get("gcp:project"), secret_keys=secrets)
    for value in _strings(config.model_dump(by_alias=True)):
        assert names.character_problem(value) is None, value
    assert all(len(name) <= limit for _, name, limit in config.names.limits(config.pool_keys()))


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list | tuple):
        for value in node:
            yield from _strings(value)


def test_derived_kueue_names_are_measured_with_their_suffixes() -> None:
    limits = {what: (name, limit) for what, name, limit in naming.Names("a" * 20).limits(["1"])}
    for what in ("Kueue topology", "Kueue resource flavor", "Kueue admission check", "Kueue cluster queue"):
        name, limit = limits[what]
        assert name.startswith("a" * 20 + "-") and limit == naming.K8S_NAME_LIMIT


# --- The system pool's machine families ---------------------------------------------------------------

ACCEPTED_MACHINES = [
    "e2-standard-8",
    "n1-standard-8",
    "n1-highmem-8",
    "n1-highcpu-16",
    "n2-standard-8",
    "n2d-standard-8",
    "n2d-highcpu-16",
    "n4-standard-8",
    "t2d-standard-8",
    "c3-standard-8",
    "c3-highcpu-22",
    "c3d-standard-8",
    "n2-standard-32",
]


@pytest.mark.parametrize("machine_type", ACCEPTED_MACHINES)
def test_a_general_purpose_x86_machine_is_accepted_for_the_system_pool(machine_type: str) -> None:
    config = _load({"cluster": {"systemMachineType": machine_type}})
    assert config.cluster.system_machine_type == machine_type
    assert machines.taint_of(machine_type) is None


TAINTED_MACHINES = [
    ("a2-highgpu-1g", "a GPU (accelerator-optimized)", "nvidia.com/gpu=present:NoSchedule"),
    ("a3-highgpu-8g", "a GPU (accelerator-optimized)", "nvidia.com/gpu=present:NoSchedule"),
    ("a4x-highgpu-4g", "a GPU (accelerator-optimized)", "nvidia.com/gpu=present:NoSchedule"),
    ("g2-standard-8", "a GPU (accelerator-optimized)", "nvidia.com/gpu=present:NoSchedule"),
    ("ct5lp-hightpu-4t", "a TPU", "google.com/tpu=present:NoSchedule"),
    ("ct6e-standard-4t", "a TPU", "google.com/tpu=present:NoSchedule"),
    ("tpu7x-standard-4t", "a TPU", "google.com/tpu=present:NoSchedule"),
    ("t2a-standard-8", "an Arm", "kubernetes.io/arch=arm64:NoSchedule"),
    ("c4a-standard-8", "an Arm", "kubernetes.io/arch=arm64:NoSchedule"),
    ("n4a-standard-8", "an Arm", "kubernetes.io/arch=arm64:NoSchedule"),
]


@pytest.mark.parametrize(("machine_type", "kind", "taint"), TAINTED_MACHINES, ids=[t[0] for t in TAINTED_MACHINES])
def test_a_machine_gke_taints_is_refused_and_the_message_says_why(machine_type: str, kind: str, taint: str) -> None:
    with pytest.raises(ConfigError) as refused:
        _load({"cluster": {"systemMachineType": machine_type}})
    message = str(refused.value)
    assert f"tpu-slicing:cluster.systemMachineType '{machine_type}' is {kind} machine type" in message
    assert f"GKE taints such nodes {taint} (cloud.google.com/kubernetes-engine/docs/how-to/" in message
    assert "allowed: a general-purpose x86 machine type GKE leaves untainted, known: e2-standard-N" in message


def test_every_catalogued_family_is_untainted_and_g1_is_no_gpu() -> None:
    assert all(machines.taint_of(f"{family}-8") is None for family in machines.FAMILIES)
    assert machines.taint_of("g1-small") is None  # N1's shared core, not the G2 GPUs


def test_n1_memory_is_not_a_whole_number_of_gib() -> None:
    """n1-standard-1 has 3.75 GiB (the API's memoryMb 3840), n1-highcpu-2 1.8 GiB (1843 MB)."""
    assert machines.machine("n1-standard-1").memory_gib == 3.75
    one = machines.machine("n1-highcpu-2")
    assert round(one.memory_gib * 1024) == 1843
    assert one.allocatable_memory_mib == 1843 - machines.reserved_memory_mib(1.8)


def test_code_points_are_named_as_unicode_names_them() -> None:
    assert names.codepoint("\u200b") == "U+200B ZERO WIDTH SPACE"
    assert names.codepoint("\x00") == "U+0000 NULL"
    assert names.codepoint("\U000f0000") == "U+F0000"  # private use: no name
    assert unicodedata.category("\U000f0000") == "Co"
    assert names.character_problem("a\U000f0000") == "U+F0000 (a private-use character) at position 1"


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 3), st.integers(-3, 3))
def test_a_string_is_refused_exactly_when_its_utf8_bytes_pass_what_a_path_may_hold(width: int, excess: int) -> None:
    """Counted in bytes, as the kernel counts (PATH_MAX): an 'é' is two, a '€' three."""
    char = {1: "t", 2: "\u00e9", 3: "\u20ac"}[width]
    size = names.TEXT_MAX_BYTES + excess * width
    text = char * (size // width)
    problem = names.length_problem(text)
    assert (problem is not None) is (len(text.encode()) > names.TEXT_MAX_BYTES)
    if problem:
        assert f"{len(text.encode()):,} bytes long" in problem and len(problem) < 400  # its start, never all of it


def test_a_long_path_is_refused_before_its_characters_are_read_and_names_its_list_item() -> None:
    from tests.conftest import refusal

    message = refusal({"serving": {"jetstream": {"tokenizerPath": "assets/" + "\u200b" * 5000}}}, stack="jetstream-v5e")
    assert "serving.jetstream.tokenizerPath" in message and "15,007 bytes long" in message and len(message) < 500
    channels = ["projects/p-12345/notificationChannels/1", "projects/p-12345/notificationChannels/" + "1" * 4096]
    message = refusal({"observability": {"alerts": {"enabled": True, "notificationChannels": channels}}})
    assert "observability.alerts.notificationChannels: item 1" in message
