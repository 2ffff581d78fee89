"""The configuration contract: defaults, derived values, and bad input rejected before registration."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from domain.topology import CATALOG, GIB
from plan import engine
from settings import machines, oci_registry, pins
from settings.loader import ConfigError, load
from settings.model import Versions
from settings.rules_cluster import SUBSLICING_MIN_GKE
from settings.rules_kueue import topology_level_order
from tests.conftest import DevRunner, config_with, dev_raw, merged


def _house_model(billions: float) -> dict[str, Any]:
    """A model of `billions` parameters outside domain/model_catalog.py (a catalogued model's size is its
    own), one byte each, with the catalogued Qwen's heads and context, at a snapshot of its own."""
    name = f"acme/house-model-{billions:g}b"
    return {
        "name": name,
        "path": f"models--acme--house-model-{billions:g}b/snapshots/{'0' * 40}",
        "parametersBillions": billions,
        "bytesPerParameter": 1,
        "attentionHeads": 32,
        "contextLength": 262_144,
    }


def test_dev_stack_defaults_follow_the_reference() -> None:
    config = config_with()
    assert config.location == "us-central1"
    assert config.name_prefix == "dev"
    assert config.network.mtu == 8896
    assert str(config.network.node_cidr) == "10.10.0.0/18"
    assert str(config.network.proxy_cidr) == "172.16.0.0/26"
    assert config.cluster.version is None  # chosen from the channel's offered versions
    assert config.platform.release_channel == "RAPID"
    assert config.platform.version_floor == SUBSLICING_MIN_GKE
    assert (config.platform.ai_zones, config.platform.slice_controller) == (True, True)
    assert config.cluster.system_machine_type == "n2-standard-32"
    assert config.cluster.deletion_protection is True
    assert config.tpu.machine_type == "tpu7x-standard-4t"
    assert (config.tpu.cubes, config.tpu.vms_per_cube, config.tpu.total_chips) == (2, 16, 128)
    assert [p for _, p in config.kueue.priorities.items()] == [1000, 2000, 3000]
    assert len(config.kueue.topology_levels) == 7
    assert (config.checks.subslicing.topology, config.checks.subslicing.replicas) == ("2x2x2", 6)
    assert config.checks.superslicing.topology == "4x4x8"
    assert config.serving.backend.value == "vllm-pd"
    assert config.serving.namespace == "llm-d-pd-disaggregation"
    assert (config.serving.prefill.replicas, config.serving.prefill.topology) == (4, "2x2x2")


def test_name_prefix_defaults_to_the_stack_name() -> None:
    raw, secrets = dev_raw()
    config = load(raw, stack="serving-b0", project="p-roject", secret_keys=secrets)
    assert config.names.cluster == "serving-b0-gke"
    assert config.names.tpu_pool(2) == "serving-b0-tpu-2"


def test_region_may_be_given_when_it_matches() -> None:
    assert config_with({"region": "us-central1"}).location == "us-central1"


def test_reservation_paths_use_sub_blocks_or_the_block() -> None:
    config = config_with()
    assert config.pool_paths() == [
        "projects/example-tpu-project/reservations/example-tpu7x-reservation/reservationBlocks/block-0"
        f"/reservationSubBlocks/sub-block-{i}"
        for i in range(2)
    ]
    whole = config_with({"reservation": {"subBlocks": None, "project": "shared-resv"}})
    assert (
        whole.pool_paths()
        == ["projects/shared-resv/reservations/example-tpu7x-reservation/reservationBlocks/block-0"] * 2
    )


def test_secret_token_is_accepted_and_kept_secret() -> None:
    raw, secrets = dev_raw()
    raw = merged({"hfToken": "hf_abc"}, raw)
    config = load(raw, stack="dev", project="example-tpu-project", secret_keys=[*secrets, "tpu-slicing:hfToken"])
    assert config.hf_token is not None
    assert "hf_abc" not in repr(config)


# (overrides, key that the message must name, a fragment of what is allowed)
INVALID: list[tuple[str, dict[str, Any], str, str]] = [
    ("missing zone", {"zone": None}, "tpu-slicing:zone", "required"),
    ("bad zone", {"zone": "central"}, "tpu-slicing:zone", "pattern"),
    ("region mismatch", {"region": "europe-west4"}, "region", "us-central1"),
    ("unknown top key", {"netwrok": {}}, "netwrok", "did you mean 'network'"),
    ("unknown nested key", {"network": {"mtuu": 1500}}, "tpu-slicing:network", "did you mean 'mtu'"),
    ("snake_case key", {"cluster": {"deletion_protection": False}}, "tpu-slicing:cluster", "deletionProtection"),
    ("mtu too large", {"network": {"mtu": 9000}}, "tpu-slicing:network.mtu", "8896"),
    ("mtu too small", {"network": {"mtu": 576}}, "tpu-slicing:network.mtu", "1300"),
    ("public node range", {"network": {"nodeCidr": "8.8.0.0/18"}}, "tpu-slicing:network.nodeCidr", "private"),
    ("proxy too small", {"network": {"proxyCidr": "172.16.0.0/28"}}, "tpu-slicing:network.proxyCidr", "/26"),
    ("overlapping ranges", {"network": {"proxyCidr": "10.10.0.0/26"}}, "nodeCidr", "disjoint"),
    ("not a cidr", {"network": {"nodeCidr": "10.10.0.0/33"}}, "tpu-slicing:network.nodeCidr", "'10.10.0.0/33'"),
    ("prefix too long", {"namePrefix": "a" * 21}, "tpu-slicing:namePrefix", "20"),
    ("prefix not rfc1035", {"namePrefix": "Dev_1"}, "tpu-slicing:namePrefix", "lowercase"),
    ("prefix starts with digit", {"namePrefix": "1dev"}, "tpu-slicing:namePrefix", "starting with a letter"),
    (
        "old gke version",
        {"cluster": {"version": "1.34.1-gke.100"}},
        "tpu-slicing:cluster.version",
        SUBSLICING_MIN_GKE,
    ),
    (
        "gke version too old for the slice controller",
        {"cluster": {"version": "1.34.1-gke.100"}, "serving": {"backend": "none"}},
        "tpu-slicing:cluster.version",
        "1.35.2-gke.1842000",
    ),
    ("version prefix", {"cluster": {"versionPrefix": "1.36"}}, "tpu-slicing:cluster.versionPrefix", "pattern"),
    ("slices on the cube platform", {"serving": {"slices": 3}}, "tpu-slicing:serving.slices", "does nothing"),
    ("http on the cube platform", {"serving": {"http": {"type": "internal"}}}, "serving.http", "does nothing"),
    (
        "plaintext cloud credentials",
        {"gcp:credentials": '{"type": "service_account"}'},
        "gcp:credentials",
        "pulumi config set --secret gcp:credentials",
    ),
    ("model path with a slash", {"serving": {"model": {"path": "/models/x"}}}, "serving.model.path", "leading '/'"),
    ("model path as a uri", {"serving": {"model": {"path": "gs://b/models/x"}}}, "serving.model.path", "gs://"),
    (
        "pod range too small for the cubes",
        {"network": {"podCidr": "10.16.0.0/20"}},
        "tpu-slicing:network.podCidr",
        "a pod range of /18 or wider",
    ),
    (
        "gke version too old for subslicing",
        {"cluster": {"version": "1.35.2-gke.1842000"}},
        "cluster.version",
        SUBSLICING_MIN_GKE,
    ),
    ("malformed gke version", {"cluster": {"version": "1.36"}}, "tpu-slicing:cluster.version", "GKE version"),
    ("release channel", {"cluster": {"releaseChannel": "STABLE"}}, "cluster.releaseChannel", "RAPID"),
    ("unknown channel", {"cluster": {"releaseChannel": "FAST"}}, "tpu-slicing:cluster.releaseChannel", "'RAPID'"),
    ("system nodes", {"cluster": {"systemNodesPerZone": 0}}, "tpu-slicing:cluster.systemNodesPerZone", "1"),
    (
        "exclusion too long",
        {
            "cluster": {
                "maintenanceExclusion": {
                    "name": "x",
                    "scope": "NO_UPGRADES",
                    "start": "2026-12-01T00:00:00Z",
                    "end": "2027-02-01T00:00:00Z",
                    "untilEndOfSupport": None,
                }
            }
        },
        "cluster.maintenanceExclusion",
        "30 days",
    ),
    (
        "exclusion both ends",
        {"cluster": {"maintenanceExclusion": {"end": "2026-12-10T00:00:00Z"}}},
        "cluster.maintenanceExclusion",
        "exactly one",
    ),
    (
        "exclusion until eos with no_upgrades",
        {"cluster": {"maintenanceExclusion": {"scope": "NO_UPGRADES"}}},
        "cluster.maintenanceExclusion",
        "untilEndOfSupport",
    ),
    (
        "exclusion naive time",
        {"cluster": {"maintenanceExclusion": {"start": "2026-12-01T00:00:00"}}},
        "cluster.maintenanceExclusion",
        "time zone",
    ),
    (
        "exclusion bad scope",
        {"cluster": {"maintenanceExclusion": {"scope": "FOREVER"}}},
        "cluster.maintenanceExclusion.scope",
        "NO_MINOR_UPGRADES",
    ),
    ("missing reservation name", {"reservation": {"name": None}}, "tpu-slicing:reservation.name", "required"),
    ("missing reservation", {"reservation": None}, "tpu-slicing:reservation", "required"),
    ("sub-blocks count", {"reservation": {"subBlocks": ["sb-0"]}}, "reservation.subBlocks", "tpu.cubes"),
    ("sub-block twice", {"reservation": {"subBlocks": ["sb-0", "sb-0"]}}, "tpu-slicing:reservation.subBlocks", "twice"),
    (
        "cubes over block",
        {"tpu": {"cubes": 3}, "reservation": {"subBlocks": None, "blockCubes": 2}},
        "tpu.cubes",
        "blockCubes",
    ),
    ("zero cubes", {"tpu": {"cubes": 0}}, "tpu-slicing:tpu.cubes", "1"),
    (
        "unknown machine type",
        {"tpu": {"machineType": "tpu7x-standard-8t"}},
        "tpu-slicing:tpu.machineType",
        "tpu7x-standard-4t",
    ),
    ("machine without cubes", {"tpu": {"machineType": "ct5lp-hightpu-4t"}}, "tpu-slicing:tpu", "saxml or jetstream"),
    ("wrong cube", {"tpu": {"cubeTopology": "4x4x8"}}, "tpu-slicing:tpu", "4x4x4"),
    ("floating chart", {"versions": {"kueue": "latest"}}, "tpu-slicing:versions.kueue", "exact version"),
    ("chart range", {"versions": {"jobset": "^0.11"}}, "tpu-slicing:versions.jobset", "exact version"),
    (
        "nightly image",
        {"versions": {"jaxTpuImage": "repo/jax:nightly"}},
        "tpu-slicing:versions.jaxTpuImage",
        "floating",
    ),
    (
        "untagged image",
        {"versions": {"sliceControllerImage": "tpuongke/kueue-slice-controller"}},
        "tpu-slicing:versions.sliceControllerImage",
        "tag or digest",
    ),
    (
        "priorities out of order",
        {"kueue": {"priorities": {"low": 5000}}},
        "tpu-slicing:kueue.priorities",
        "low < medium < high",
    ),
    (
        "topology levels",
        {"kueue": {"topologyLevels": ["cloud.google.com/gce-topology-block"]}},
        "tpu-slicing:kueue.topologyLevels",
        "kubernetes.io/hostname",
    ),
    (
        "subslice shape",
        {"checks": {"subslicing": {"enabled": True, "topology": "4x4x8"}}},
        "checks.subslicing.topology",
        "2x2x1",
    ),
    (
        "subslice replicas",
        {"checks": {"subslicing": {"enabled": True, "replicas": 17}}},
        "checks.subslicing.replicas",
        "at most 16",
    ),
    (
        "superslice not tiling",
        {"checks": {"superslicing": {"enabled": True, "topology": "2x4x4"}}},
        "checks.superslicing.topology",
        "cube",
    ),
    (
        "superslice too big",
        {"checks": {"superslicing": {"enabled": True, "topology": "4x8x8"}}},
        "checks.superslicing.topology",
        "tpu.cubes",
    ),
    (
        "bad shape text",
        {"checks": {"superslicing": {"topology": "4by4"}}},
        "tpu-slicing:checks.superslicing.topology",
        "AxBxC",
    ),
    ("unknown backend", {"serving": {"backend": "vllm"}}, "tpu-slicing:serving.backend", "'vllm-pd'"),
    ("missing bucket", {"serving": {"model": {"weightsBucket": None}}}, "serving.model.weightsBucket", "required"),
    ("bad namespace", {"serving": {"namespace": "LLM"}}, "tpu-slicing:serving.namespace", "lowercase"),
    (
        "serving too big",
        {"serving": {"prefill": {"replicas": 9}, "decode": {"replicas": 8}}},
        "serving.prefill",
        "128 chips",
    ),
    ("serving shape", {"serving": {"decode": {"topology": "4x4x8"}}}, "serving.decode.topology", "sub-slice"),
    ("model does not fit", {"serving": {"model": _house_model(2000)}}, "serving.prefill.topology", "chips"),
    ("headroom", {"serving": {"model": {"kvCacheHeadroom": 1.5}}}, "tpu-slicing:serving.model.kvCacheHeadroom", "1"),
    ("plain-text token", {"hfToken": "hf_plaintext"}, "tpu-slicing:hfToken", "--secret"),
    ("project key", {"project": "other"}, "tpu-slicing:project", "gcp:project"),
    (
        "tensor parallelism overfills a device",
        {"serving": {"vllm": {"tensorParallelSize": 2}}},
        "tpu-slicing:serving.vllm.tensorParallelSize",
        "holds 96 GiB HBM",
    ),
    (
        "tensor parallelism above the devices",
        {"serving": {"vllm": {"tensorParallelSize": 64}}},
        "tpu-slicing:serving.vllm.tensorParallelSize",
        "exceeds the 16 devices",
    ),
    (
        "topology levels reversed",
        {"kueue": {"topologyLevels": ["kubernetes.io/hostname", "cloud.google.com/gce-topology-block"]}},
        "tpu-slicing:kueue.topologyLevels",
        "widest domain down",
    ),
    (
        "topology levels without the roles' partition",
        {"kueue": {"topologyLevels": ["cloud.google.com/gce-topology-block", "kubernetes.io/hostname"]}},
        "tpu-slicing:kueue.topologyLevels",
        "lacks 'cloud.google.com/gke-tpu-partition-2x2x2-id'",
    ),
    (
        "system machine too small",
        {"cluster": {"systemMachineType": "n2-standard-4"}},
        "tpu-slicing:cluster.systemMachineType",
        "e.g. n2-standard-8",
    ),
    (
        "system machine of no known family",
        {"cluster": {"systemMachineType": "m3-ultramem-32"}},
        "tpu-slicing:cluster.systemMachineType",
        "known: e2-standard-N",
    ),
    (
        "system machine GKE taints",
        {"cluster": {"systemMachineType": "c4a-standard-8"}},
        "tpu-slicing:cluster.systemMachineType",
        "GKE taints such nodes kubernetes.io/arch=arm64:NoSchedule",
    ),
    ("run id", {"serving": {"smokeTest": {"runId": "Run 1"}}}, "tpu-slicing:serving.smokeTest.runId", "1 to 32"),
    (
        "major.minor image",
        {"versions": {"smokeTestImage": "python:3.12-slim"}},
        "tpu-slicing:versions.smokeTestImage",
        "floating",
    ),
    ("no gcp project", {"gcp:project": None}, "gcp:project", "required"),
]


@pytest.mark.parametrize(("overrides", "key", "allowed"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_configuration_is_rejected_before_registration(
    run_dev: DevRunner, overrides: dict[str, Any], key: str, allowed: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        run_dev(overrides)
    message = str(caught.value)
    assert key in message, message
    assert allowed in message, message
    assert "plaintext" not in message  # a rejected secret is never echoed
    assert caught.value.registered_resources == []  # type: ignore[attr-defined]


def test_corpus_is_large_enough() -> None:
    assert len(INVALID) >= 30


def test_model_memory_message_says_what_is_needed() -> None:
    with pytest.raises(ConfigError) as caught:
        config_with({"serving": {"model": _house_model(2000)}})
    message = str(caught.value)
    # 2000e9 B = 1863 GiB; with 30% headroom 2661 GiB; 192 GiB chips -> 14 chips; smallest shape 2x2x4.
    assert "1863 GiB of weights" in message
    assert "at least 14 tpu7x chips" in message
    assert "smallest shape: 2x2x4" in message


def test_all_problems_name_the_stack_namespace() -> None:
    with pytest.raises(ConfigError) as caught:
        config_with({"network": {"mtu": 1}, "tpu": {"cubes": 0}})
    assert all(p.startswith(("tpu-slicing:", "gcp:")) for p in caught.value.problems)


def test_independent_cross_field_problems_are_all_reported_at_once() -> None:
    # Three rules of three kinds: the upgrade policy, the alerts and the HBM of a prefill slice.
    overrides = {
        "cluster": {"maintenanceExclusion": None, "allowTpuNodeUpgrades": False},
        "observability": {"alerts": {"enabled": True, "notificationChannels": []}},
        "serving": {"vllm": {"tensorParallelSize": 1}},
    }
    with pytest.raises(ConfigError) as caught:
        config_with(overrides)
    problems = caught.value.problems
    assert any(p.startswith("tpu-slicing:cluster.maintenanceExclusion") for p in problems), problems
    assert any(p.startswith("tpu-slicing:observability.alerts") for p in problems), problems
    assert any("tensorParallelSize" in p for p in problems), problems


def test_engine_reads_secure_values_as_secret_placeholders(tmp_path: Any) -> None:
    stack = tmp_path / "Pulumi.t.yaml"
    stack.write_text("config:\n  tpu-slicing:hfToken:\n    secure: AAABAO==\n  tpu-slicing:zone: us-central1-ai1a\n")
    raw, secrets = engine.read_stack_config(stack)
    assert secrets == ["tpu-slicing:hfToken"]
    assert raw["tpu-slicing:hfToken"] == engine.SECRET_PLACEHOLDER


@settings(deadline=None, max_examples=30)
@given(st.integers(10, 23), st.integers(1, 144))
def test_the_pod_range_must_hold_every_node(prefix: int, cubes: int) -> None:
    """Capacity the network cannot hold, as a class: any pod range too small for the nodes is refused."""
    nodes = cubes * 16 + 3  # 16 VMs a cube, one system node in each of three zones
    overrides = {
        "network": {"podCidr": f"100.64.0.0/{prefix}"},
        "tpu": {"cubes": cubes},
        "reservation": {"subBlocks": None, "blockCubes": None},
    }
    if nodes <= 2 ** (24 - prefix):
        config_with(overrides)
        return
    with pytest.raises(ConfigError, match=r"tpu-slicing:network\.podCidr .* holds"):
        config_with(overrides)


def test_shared_address_space_is_a_private_range_for_gke() -> None:
    config = config_with({"network": {"podCidr": "100.64.0.0/14"}})
    assert str(config.network.pod_cidr) == "100.64.0.0/14"


# --- Classes added with issue 14: each generated as a class, not as one example ----------------------

TP_DEVICES = 16  # a 2x2x2 tpu7x sub-slice: 8 chips, 2 JAX devices each (domain/topology.py CATALOG)
DEVICE_GIB = 96  # 192 GiB per chip over its two devices


@settings(deadline=None, max_examples=40)
@given(st.integers(1, 64), st.integers(10, 1300))
def test_tensor_parallelism_must_spread_the_weights_over_devices_that_hold_them(tp: int, billions: int) -> None:
    """Any TP that exceeds or does not divide the slice's devices, or leaves a device more than its HBM."""
    weights = billions * 1e9  # one byte per parameter
    usable = 0.7  # the default 30% KV-cache headroom
    overrides = {"serving": {"vllm": {"tensorParallelSize": tp}, "model": _house_model(billions)}}
    if weights > TP_DEVICES // 2 * 192 * GIB * usable:
        with pytest.raises(ConfigError, match=r"serving\.prefill\.topology 2x2x2 holds"):
            config_with(overrides)
    elif TP_DEVICES % tp or weights / tp > DEVICE_GIB * GIB * usable:
        with pytest.raises(ConfigError, match=rf"serving\.vllm\.tensorParallelSize {tp} .*allowed"):
            config_with(overrides)
    else:
        assert config_with(overrides).serving.vllm.tensor_parallel_size == tp


def test_tensor_parallelism_message_names_the_device_and_the_sizes_that_fit() -> None:
    with pytest.raises(ConfigError) as caught:
        config_with({"serving": {"vllm": {"tensorParallelSize": 1}}})
    message = str(caught.value)
    assert "tpu-slicing:serving.vllm.tensorParallelSize 1 puts 370 GiB of model" in message
    assert "holds 96 GiB HBM" in message and "allowed for the 16 devices of a 2x2x2 prefill slice" in message
    assert message.rstrip().endswith("8, 16")


LEVELS = topology_level_order(CATALOG["tpu7x"])
NOT_LABELS = ["cloud.google.com/gce-topology-blok", "kubernetes.io/host-name", "example.com/rack"]


@settings(deadline=None, max_examples=60)
@given(st.lists(st.sampled_from([*LEVELS, *NOT_LABELS]), min_size=1, max_size=10))
def test_topology_levels_must_be_known_unique_ordered_and_hold_what_the_stack_uses(levels: list[str]) -> None:
    required = {"cloud.google.com/gke-tpu-partition-2x2x2-id", "kubernetes.io/hostname"}  # dev's 2x2x2 roles
    known = all(level in LEVELS for level in levels)
    ordered = known and all(LEVELS.index(a) < LEVELS.index(b) for a, b in itertools.pairwise(levels))
    overrides = {"kueue": {"topologyLevels": levels}}
    if known and ordered and required <= set(levels):
        assert config_with(overrides).kueue.topology_levels == levels
        return
    with pytest.raises(
        ConfigError, match=r"tpu-slicing:kueue\.topologyLevels .*allowed, widest first: .*required here"
    ):
        config_with(overrides)


@settings(deadline=None, max_examples=40)
@given(st.sampled_from(sorted(machines.FAMILIES)), st.data())
def test_the_system_machine_must_hold_the_backends_largest_cpu_pod(family: str, data: st.DataObject) -> None:
    """vllm-pd's largest system pod is the EPP router (4 CPU, 8 GiB): 4 vCPU leave 3.92 after GKE's
    reservation and 8 GiB leave 6.1 GiB, so it takes 8 vCPU and more than 10 GiB (n1-highcpu-16's
    14.4 GiB leave 11.9; every other size at or above 8 vCPU has 16 GiB or more, or 8 or less)."""
    per_vcpu, sizes = machines.FAMILIES[family]
    vcpus = data.draw(st.sampled_from(sizes))
    overrides = {"cluster": {"systemMachineType": f"{family}-{vcpus}"}}
    if vcpus >= 8 and vcpus * per_vcpu >= 14:
        config_with(overrides)
        return
    with pytest.raises(ConfigError, match=rf"cluster\.systemMachineType '{family}-{vcpus}' leaves .*EPP router"):
        config_with(overrides)


@settings(deadline=None, max_examples=20)
@given(st.sampled_from(["m3-ultramem", "c4-standard", "h3-standard", "e2-tiny"]), st.integers(1, 300))
def test_an_unknown_machine_family_or_size_is_refused_with_the_known_ones(family: str, vcpus: int) -> None:
    with pytest.raises(ConfigError, match=r"cluster\.systemMachineType .*known: e2-standard-N"):
        config_with({"cluster": {"systemMachineType": f"{family}-{vcpus}"}})


@settings(deadline=None, max_examples=20)
@given(st.sampled_from(sorted(machines.FAMILIES)), st.integers(1, 300))
def test_a_size_the_family_lacks_is_refused_with_its_sizes(family: str, vcpus: int) -> None:
    if vcpus in machines.FAMILIES[family][1]:
        return
    with pytest.raises(ConfigError, match=rf"'{family}-{vcpus}' does not exist: {family} comes in {family}-"):
        config_with({"cluster": {"systemMachineType": f"{family}-{vcpus}"}})


@settings(deadline=None, max_examples=60)
@given(st.text(st.sampled_from("az09-_A. /"), max_size=40))
def test_a_smoke_test_run_id_is_a_short_dns_word(run_id: str) -> None:
    overrides = {"serving": {"smokeTest": {"runId": run_id}}}
    if re.fullmatch(r"[a-z0-9-]{1,32}", run_id):
        assert config_with(overrides).serving.smoke_test.run_id == run_id
        return
    with pytest.raises(ConfigError, match=r"tpu-slicing:serving\.smokeTest\.runId: .* lowercase letters, digits"):
        config_with(overrides)


_PINNED_TAGS = st.builds(
    lambda prefix, x, y, z, suffix: f"{prefix}{x}.{y}.{z}{suffix}",
    st.sampled_from(["", "v", "jax", "jax-"]),
    st.integers(0, 40),
    st.integers(0, 40),
    st.integers(0, 40),
    st.sampled_from(["", "-200", "-rev1", "-slim"]),
)
_FLOATING_TAGS = st.one_of(
    st.builds(
        lambda word, tail: word + tail,
        st.sampled_from(sorted(pins.CHANNEL_WORDS)),
        st.sampled_from(["", "-20260101", "-gpu"]),
    ),
    st.builds(lambda v, n: f"{v}{n}", st.sampled_from(["", "v"]), st.integers(0, 99)),
    st.builds(
        lambda x, y, tail: f"{x}.{y}{tail}", st.integers(0, 40), st.integers(0, 40), st.sampled_from(["", "-slim"])
    ),
)


@settings(deadline=None, max_examples=60)
@given(st.one_of(_PINNED_TAGS.map(lambda t: (t, True)), _FLOATING_TAGS.map(lambda t: (t, False))))
def test_images_are_pinned_by_a_full_version_and_float_on_channels_and_lines(case: tuple[str, bool]) -> None:
    tag, pinned = case
    image = f"docker.io/vllm/vllm-tpu:{tag}"
    if pinned:
        assert Versions.model_validate({"vllmImage": image}).vllm_image == image
        return
    with pytest.raises(ValidationError, match=rf"the moving tag '{re.escape(tag)}'.*allowed: a pinned tag or digest"):
        Versions.model_validate({"vllmImage": image})
    # A digest pins whatever the tag says.
    digest = f"{image}@sha256:{'0' * 64}"
    assert Versions.model_validate({"vllmImage": digest}).vllm_image == digest


def test_kueue_is_refused_where_no_kueue_runs() -> None:
    raw, secrets = engine.read_stack_config(engine.stack_file("saxml-v5e"))
    raw = merged({"kueue": {"priorities": {"low": 10}}}, raw)
    with pytest.raises(ConfigError, match=r"tpu-slicing:kueue does nothing with serving\.backend 'saxml'.*remove it"):
        load(raw, stack="saxml-v5e", project=raw.get("gcp:project"), secret_keys=secrets)


def _millicpu(text: str) -> int:
    return int(text[:-1]) if text.endswith("m") else int(float(text) * 1000)


def _mib(text: str) -> int:
    return int(text[:-2]) * (1024 if text.endswith("Gi") else 1)


def _cpu_pods(plan: engine.PlanResult) -> list[tuple[str, int, int]]:
    """(resource, CPU, memory) of every container request in the plan that asks for no TPU."""
    found = []

    def walk(node: Any, name: str) -> None:
        if isinstance(node, dict):
            requests = node.get("resources", {}).get("requests") if isinstance(node.get("resources"), dict) else None
            if isinstance(requests, dict) and "google.com/tpu" not in requests and "cpu" in requests:
                found.append((name, _millicpu(requests["cpu"]), _mib(requests["memory"])))
            for value in node.values():
                walk(value, name)
        elif isinstance(node, list):
            for value in node:
                walk(value, name)

    for resource in plan.resources:
        walk(resource.inputs, resource.name)
    return found


@pytest.mark.parametrize("stack", ["dev", "saxml-v5e", "jetstream-v5e"])
def test_the_system_pod_table_holds_the_largest_request_of_each_backend(stack: str) -> None:
    """Pods the program writes (charts aside, whose requests the table cites from values.yaml) fit the table."""
    plan = engine.run_stack(stack)
    backend = load_stack_backend(stack)
    by_cpu, by_memory = machines.largest_pods(backend)
    pods = _cpu_pods(plan)
    assert all(cpu <= by_cpu.millicpu and memory <= by_memory.memory_mib for _, cpu, memory in pods), pods
    planned = {(cpu, memory) for _, cpu, memory in pods}
    for pod in machines.SYSTEM_PODS:
        if backend in pod.backends and pod.source.startswith(("k8s/", "workloads/")):
            assert (pod.millicpu, pod.memory_mib) in planned, f"{pod.what}: {pod.source} requests otherwise"


def load_stack_backend(stack: str) -> str:
    raw, secrets = engine.read_stack_config(engine.stack_file(stack))
    return load(raw, stack=stack, project=raw.get("gcp:project"), secret_keys=secrets).serving.backend.value


# --- controllers.chartRegistry (settings/oci_registry.py) -------------------------------------------------

_MIRROR = "oci://us-docker.pkg.dev/my-project/k8s-mirror"


def test_the_chart_registry_defaults_to_registry_k8s_io() -> None:
    assert config_with().controllers.chart_registry == "oci://registry.k8s.io"
    assert config_with({"controllers": {"chartRegistry": _MIRROR}}).controllers.chart_registry == _MIRROR


@pytest.mark.parametrize(
    ("registry", "shown", "problem"),
    [
        ("https://us-docker.pkg.dev/my-project/k8s-mirror", None, "uses https://, which Helm reads as a chart"),
        ("http://registry.k8s.io", None, "uses http://"),
        ("OCI://registry.k8s.io", None, "(it reads the scheme case-sensitively); use oci://"),
        ("us-docker.pkg.dev/my-project/k8s-mirror", None, "has no scheme"),
        (_MIRROR + "/", None, "ends with '/'"),
        # A query or fragment is masked where the message shows the reference (a token rides there too);
        # credentials in the reference are refused as credentials (tests/test_credentials.py).
        (_MIRROR + "?tag=1", f"'{_MIRROR}?***'", "a query or fragment"),
        (_MIRROR + "#x", f"'{_MIRROR}#***'", "a query or fragment"),
        (_MIRROR + ":0.19.2", None, "names a tag"),
        (_MIRROR + "@sha256:" + "0" * 64, None, "names a digest"),
        (_MIRROR + " ", None, "whitespace or a control character"),
        ("oci://us-docker.pkg.dev/my-project/k8s\x00mirror", None, "whitespace or a control character"),
        ("oci://us-docker.pkg.dev/My-Project/k8s-mirror", None, "the path component 'My-Project'"),
        ("oci://us-docker.pkg.dev/my-project//k8s-mirror", None, "an empty path component"),
        ("oci://us-docker.pkg.dev/my-project/k8s-.mirror", None, "the path component 'k8s-.mirror'"),
        ("oci://registry_k8s.io", None, "the host 'registry_k8s.io', which is no DNS name"),
        ("oci://300.1.2.3:5000/charts", None, "the host '300.1.2.3', which is no IPv4 address"),
        ("oci://[::1]:5000/charts", None, "an IPv6 host"),
        ("oci://localhost:65536/charts", None, "the port '65536', not a number 1 to 65535"),
        ("oci:///charts", None, "names no registry host"),
    ],
)
def test_a_chart_registry_helm_cannot_pull_from_is_refused(registry: str, shown: str | None, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config_with({"controllers": {"chartRegistry": registry}})
    [message] = caught.value.problems
    assert message.startswith("tpu-slicing:controllers.chartRegistry: " + (shown or repr(registry))), message
    assert problem in message, message
    assert message.endswith(oci_registry.ALLOWED), message
    assert "s3cret" not in message  # credentials in the reference are never echoed


def test_a_chart_registry_over_https_says_use_oci() -> None:
    with pytest.raises(ConfigError) as caught:
        config_with({"controllers": {"chartRegistry": "https://us-docker.pkg.dev/my-project/k8s-mirror"}})
    assert str(caught.value).splitlines()[1] == (
        "  - tpu-slicing:controllers.chartRegistry: 'https://us-docker.pkg.dev/my-project/k8s-mirror' uses "
        "https://, which Helm reads as a chart repository or archive URL, not a registry; use oci://; "
        + oci_registry.ALLOWED
    )


@pytest.mark.parametrize("registry", [_MIRROR, "oci://registry.k8s.io"])
def test_a_chart_registry_with_the_controllers_not_installed_is_refused(registry: str) -> None:
    """With install false no chart is pulled: the key would be ignored without a word (set is enough,
    as for the serving keys a backend never reads)."""
    with pytest.raises(ConfigError) as caught:
        config_with({"controllers": {"install": False, "chartRegistry": registry}})
    assert caught.value.problems == [
        f"tpu-slicing:controllers.chartRegistry {registry!r} does nothing with controllers.install false (no chart "
        "is pulled: the platform team's controllers run already), so it would be ignored without a word; remove it, "
        "or set controllers.install true"
    ]
    assert config_with({"controllers": {"install": False}}).controllers.chart_registry == "oci://registry.k8s.io"
