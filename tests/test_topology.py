"""Topology arithmetic: parsing, chip/VM/device counts, cube tiling, HBM fit, packing."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain import topology
from domain.topology import CATALOG, Topology, TopologyError

TPU7X = CATALOG["tpu7x"]
V5E = CATALOG["v5e"]

dims = st.lists(st.integers(min_value=1, max_value=64), min_size=2, max_size=3)


@given(dims)
def test_parse_round_trips_and_counts_chips(values: list[int]) -> None:
    text = "x".join(map(str, values))
    shape = Topology.parse(text)
    assert str(shape) == text
    assert shape.chips == math.prod(values)


@pytest.mark.parametrize("text", ["", "4", "4x", "x4", "0x4x4", "4x4x4x4", "4X4", "a x b", "-2x2", "02x2", 442])
def test_parse_rejects_malformed(text: object) -> None:
    with pytest.raises(TopologyError, match="not a slice shape"):
        Topology.parse(text)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("shape", "chips", "vms", "devices"),
    [
        ("2x2x1", 4, 1, 8),
        ("2x2x2", 8, 2, 16),
        ("4x4x4", 64, 16, 128),
        ("4x4x8", 128, 32, 256),
        ("8x8x16", 1024, 256, 2048),
    ],
)
def test_tpu7x_counts(shape: str, chips: int, vms: int, devices: int) -> None:
    parsed = TPU7X.allowed_shape(shape)
    assert (parsed.chips, TPU7X.vms(parsed), TPU7X.devices(parsed)) == (chips, vms, devices)


@pytest.mark.parametrize(
    ("shape", "vms", "machine"),
    [
        ("1x1", 1, "ct5lp-hightpu-1t"),
        ("2x2", 1, "ct5lp-hightpu-4t"),
        ("2x4", 1, "ct5lp-hightpu-8t"),
        ("4x8", 8, "ct5lp-hightpu-4t"),
        ("16x16", 64, "ct5lp-hightpu-4t"),
    ],
)
def test_v5e_hosts(shape: str, vms: int, machine: str) -> None:
    parsed = V5E.allowed_shape(shape)
    assert V5E.vms(parsed) == vms
    assert V5E.host_machine(parsed).name == machine


V6E = CATALOG["v6e"]


@pytest.mark.parametrize(
    ("shape", "machine", "vms"),
    [
        ("2x4", "ct6e-standard-8t", 1),  # one VM holds it: the default
        ("2x4", "ct6e-standard-4t", 2),  # or two 4-chip VMs (docs.cloud.google.com/tpu/docs/v6e)
        ("4x4", "ct6e-standard-4t", 4),
    ],
)
def test_v6e_2x4_is_one_vm_or_two(shape: str, machine: str, vms: int) -> None:
    parsed = V6E.allowed_shape(shape)
    assert V6E.vms(parsed, machine) == vms
    assert V6E.host_machine(parsed, machine).name == machine


@pytest.mark.parametrize(
    ("generation", "shape", "machine"),
    [("v6e", "4x4", "ct6e-standard-8t"), ("v5e", "2x4", "ct5lp-hightpu-4t"), ("v6e", "2x2", "ct6e-standard-1t")],
)
def test_a_machine_that_cannot_build_the_shape_is_named(generation: str, shape: str, machine: str) -> None:
    catalog = CATALOG[generation]
    with pytest.raises(TopologyError, match=f"runs on .* VMs, not {machine}"):
        catalog.vms(catalog.allowed_shape(shape), machine)


@given(st.sampled_from(sorted(CATALOG)), st.data())
def test_every_host_machine_splits_the_shape_into_whole_vms(name: str, data: st.DataObject) -> None:
    generation = CATALOG[name]
    shape = data.draw(st.sampled_from(generation.shapes()[:40]))
    hosts = generation.host_machines(shape)
    assert hosts[0] == generation.host_machine(shape)
    for host in hosts:
        assert generation.vms(shape, host.name) * host.chips_per_vm == shape.chips


@pytest.mark.parametrize("shape", ["4x4x6", "8x4x4", "3x3x3", "4x4", "2x2x3", "148x148x148"])
def test_tpu7x_rejects_shapes_outside_the_rule(shape: str) -> None:
    with pytest.raises(TopologyError):
        TPU7X.allowed_shape(shape)


@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 6))
def test_cube_multiples_are_allowed_exactly_when_ordered_and_small(a: int, b: int, c: int) -> None:
    text = f"{4 * a}x{4 * b}x{4 * c}"
    ok = a <= b <= c and a * b * c <= TPU7X.max_cubes
    if ok:
        assert TPU7X.allowed_shape(text).chips == 64 * a * b * c
    else:
        with pytest.raises(TopologyError):
            TPU7X.allowed_shape(text)


@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 5))
def test_superslice_cubes_equal_chips_over_cube(a: int, b: int, c: int) -> None:
    a, b, c = sorted((a, b, c))
    text = f"{4 * a}x{4 * b}x{4 * c}"
    if a * b * c < 2:
        with pytest.raises(TopologyError, match="single cube"):
            TPU7X.superslice_cubes(text)
    else:
        assert TPU7X.superslice_cubes(text) == Topology.parse(text).chips // 64


def test_superslice_needs_cubes() -> None:
    with pytest.raises(TopologyError, match="no cubes"):
        V5E.superslice_cubes("4x8")
    with pytest.raises(TopologyError):
        TPU7X.superslice_cubes("2x4x4")


def test_subslice_shapes_and_partition_labels() -> None:
    assert TPU7X.partition_label(TPU7X.subslice("2x2x2")) == "cloud.google.com/gke-tpu-partition-2x2x2-id"
    assert TPU7X.partition_label(Topology.parse("4x4x8")) == "cloud.google.com/gce-topology-block"
    with pytest.raises(TopologyError, match="sub-slice"):
        TPU7X.subslice("4x4x8")


def test_shapes_enumeration_matches_allowed_shape() -> None:
    shapes = TPU7X.shapes()
    assert [str(s) for s in shapes[:5]] == ["2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4"]
    assert all(TPU7X.allowed_shape(str(s)) == s for s in shapes)
    assert [s.chips for s in shapes] == sorted(s.chips for s in shapes)


def test_hbm_fit_and_smallest_shape() -> None:
    # The Saxml tutorial's 175B model at 2 bytes/parameter: 350 GB over 16 GiB chips
    # is 20.4, so 21 chips, and the smallest v5e shape holding it is 4x8.
    needed = topology.weights_bytes(175, 2)
    assert topology.chips_needed(needed, V5E) == 21
    assert str(V5E.smallest_shape_holding(needed)) == "4x8"
    assert TPU7X.hbm_bytes(Topology.parse("2x2x2")) == 8 * 192 * topology.GIB
    assert V5E.smallest_shape_holding(10**15) is None


@given(st.lists(st.sampled_from([4, 8, 16, 32, 64]), max_size=40), st.integers(1, 6))
def test_packing_is_exact_for_subslice_chains(sizes: list[int], cubes: int) -> None:
    packed = topology.pack_into_cubes(sizes, 64, cubes)
    if packed is None:
        # Divisible sizes: first-fit decreasing only fails when the chips do not fit at all.
        assert sum(sizes) > 64 * cubes
    else:
        assert sorted(x for cube in packed for x in cube) == sorted(sizes)
        assert all(sum(cube) <= 64 for cube in packed)


def test_generation_lookup() -> None:
    assert topology.generation_of("tpu7x-standard-4t") is TPU7X
    with pytest.raises(TopologyError, match="unknown TPU machine type"):
        topology.generation_of("a3-highgpu-8g")
