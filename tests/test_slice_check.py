"""Tests for pods/slice_check.py.

Pure helpers are tested in-process. The real program runs in subprocesses on
fake CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=N), since
the device count is fixed when JAX's backend starts.
"""

from __future__ import annotations

import io
import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pods import slice_check as sc

SCRIPT = Path(__file__).resolve().parents[1] / "pods" / "slice_check.py"
TIMEOUT_SECONDS = 180

# Env vars the program reads; cleared so the developer's shell cannot leak in.
_PROGRAM_ENV = (
    "SLICE_TOPOLOGY",
    "DEVICES_PER_CHIP",
    "CHIPS_PER_HOST",
    "SLICE_COORDINATOR_ADDRESS",
    "SLICE_NUM_PROCESSES",
    "SLICE_PROCESS_ID",
    "SLICE_BANDWIDTH_MIB",
    "SLICE_ITERATIONS",
    "SLICE_INIT_TIMEOUT_SECONDS",
    "SLICE_DEADLINE_SECONDS",
    "TPU_WORKER_HOSTNAMES",
    "TPU_PROCESS_ADDRESSES",
    "MEGASCALE_NUM_SLICES",
)


# ---------------------------------------------------------------------------
# Pure helpers
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2x2", (2, 2)),
        ("2x2x2", (2, 2, 2)),
        ("4x4x8", (4, 4, 8)),
        ("16x16x24", (16, 16, 24)),
        (" 2x4 ", (2, 4)),
    ],
)
def test_parse_topology_valid(text: str, expected: tuple[int, ...]) -> None:
    assert sc.parse_topology(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "non-empty"),
        ("2", "2 or 3 dimensions"),
        ("2x2x2x2", "2 or 3 dimensions"),
        ("2X2", "2 or 3 dimensions"),
        ("2x0", "zero dimension"),
        ("0x2x2", "zero dimension"),
        ("2xa", "non-numeric"),
        ("2x-1", "non-numeric"),
        ("2x", "non-numeric"),
        ("2x 2", "non-numeric"),
        ("2x2.5", "non-numeric"),
        ("2x\u00b2", "non-numeric"),  # superscript two: isdigit() but not ASCII
        ("02x2", "leading zero"),
    ],
)
def test_parse_topology_invalid(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sc.parse_topology(text)


dims_strategy = st.lists(st.integers(min_value=1, max_value=64), min_size=2, max_size=3)


@given(dims=dims_strategy, devices_per_chip=st.integers(min_value=1, max_value=8))
def test_topology_round_trip_and_device_arithmetic(dims: list[int], devices_per_chip: int) -> None:
    topology = sc.parse_topology(sc.format_topology(dims))
    assert topology == tuple(dims)

    total = sc.expected_global_devices(topology, devices_per_chip)
    assert total == math.prod(dims) * devices_per_chip

    shape = sc.mesh_shape(topology, devices_per_chip)
    axes = sc.mesh_axis_names(topology)
    assert math.prod(shape) == total
    assert len(shape) == len(axes) == len(dims) + 1
    assert axes[-1] == "core" and shape[-1] == devices_per_chip
    assert sc.expected_index_sum(total) == sum(range(total))


@given(text=st.text(alphabet="0123456789x -a", max_size=12))
def test_parse_topology_accepts_or_rejects_cleanly(text: str) -> None:
    # Any input either parses to a canonical topology or raises ValueError.
    try:
        topology = sc.parse_topology(text)
    except ValueError:
        return
    assert len(topology) in (2, 3) and all(d > 0 for d in topology)
    assert sc.format_topology(topology) == text.strip()


@pytest.mark.parametrize(
    ("topology", "devices_per_chip", "expected"),
    [
        ((2, 2, 2), 1, 8),
        ((2, 2, 2), 2, 16),
        ((4, 4, 8), 1, 128),
        ((4, 4, 8), 2, 256),
        ((2, 4), 2, 16),
    ],
)
def test_expected_global_devices(topology: tuple[int, ...], devices_per_chip: int, expected: int) -> None:
    assert sc.expected_global_devices(topology, devices_per_chip) == expected


@pytest.mark.parametrize(
    ("topology", "devices_per_chip", "shape", "axes"),
    [
        ((2, 2, 2), 2, (2, 2, 2, 2), ("x", "y", "z", "core")),
        ((4, 4, 8), 1, (4, 4, 8, 1), ("x", "y", "z", "core")),
        ((2, 4), 2, (2, 4, 2), ("x", "y", "core")),
    ],
)
def test_mesh_shape_and_axes(
    topology: tuple[int, ...],
    devices_per_chip: int,
    shape: tuple[int, ...],
    axes: tuple[str, ...],
) -> None:
    assert sc.mesh_shape(topology, devices_per_chip) == shape
    assert sc.mesh_axis_names(topology) == axes


def test_mesh_axis_names_rejects_bad_rank() -> None:
    with pytest.raises(ValueError):
        sc.mesh_axis_names((2,))


@pytest.mark.parametrize(("n", "factor"), [(1, 0.0), (2, 1.0), (8, 1.75), (512, 2 * 511 / 512)])
def test_bus_bandwidth_factor(n: int, factor: float) -> None:
    assert sc.bus_bandwidth_factor(n) == pytest.approx(factor)


@pytest.mark.parametrize(("mib", "elements"), [(64, 16 * 1024 * 1024), (1, 262144), (0.25, 65536), (1e-9, 1)])
def test_allreduce_elements(mib: float, elements: int) -> None:
    assert sc.allreduce_elements(mib) == elements


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:1234", ("127.0.0.1", 1234)),
        ("slice-0-0.slice:8476", ("slice-0-0.slice", 8476)),
        ("[::1]:80", ("[::1]", 80)),
    ],
)
def test_parse_coordinator_address(text: str, expected: tuple[str, int]) -> None:
    assert sc.parse_coordinator_address(text) == expected


@pytest.mark.parametrize("text", ["host", ":80", "host:", "host:x", "host:0", "host:70000"])
def test_parse_coordinator_address_invalid(text: str) -> None:
    with pytest.raises(ValueError):
        sc.parse_coordinator_address(text)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("localhost", True), ("[::1]", True), ("10.0.0.1", False), ("a.b", False)],
)
def test_is_loopback_host(host: str, loopback: bool) -> None:
    assert sc.is_loopback_host(host) is loopback


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, False),
        ({"JOBSET_NAME": "slice"}, False),
        ({"TPU_WORKER_HOSTNAMES": "host-0"}, False),
        ({"TPU_WORKER_HOSTNAMES": "host-0,host-1"}, True),
        ({"TPU_PROCESS_ADDRESSES": "a:1,b:1"}, True),
        ({"MEGASCALE_NUM_SLICES": "1"}, False),
        ({"MEGASCALE_NUM_SLICES": "2"}, True),
        ({"MEGASCALE_NUM_SLICES": "bogus"}, False),
    ],
)
def test_should_auto_initialize(env: dict[str, str], expected: bool) -> None:
    assert sc.should_auto_initialize(env) is expected


def test_resolve_distributed_all_or_nothing() -> None:
    assert sc.resolve_distributed(None, None, None) is None
    assert sc.resolve_distributed("h:1", 2, 1) == sc.DistributedConfig("h:1", 2, 1)
    with pytest.raises(sc.UsageError, match="missing --coordinator-address"):
        sc.resolve_distributed(None, 2, 0)
    with pytest.raises(sc.UsageError, match="must be < num processes"):
        sc.resolve_distributed("h:1", 2, 2)
    with pytest.raises(sc.UsageError, match="host:port"):
        sc.resolve_distributed("nohost", 2, 0)


def test_parse_settings_defaults_env_and_flag_precedence() -> None:
    settings = sc.parse_settings(["--topology", "2x2x2"], {})
    assert settings.topology == (2, 2, 2)
    assert settings.devices_per_chip == 1
    assert settings.chips_per_host is None
    assert settings.distributed is None
    assert (settings.bandwidth_mib, settings.iterations) == (64.0, 5)
    assert settings.init_timeout_seconds == 300

    env = {
        "SLICE_TOPOLOGY": "4x4x8",
        "DEVICES_PER_CHIP": "2",
        "CHIPS_PER_HOST": "4",
        "SLICE_COORDINATOR_ADDRESS": "slice-0:8476",
        "SLICE_NUM_PROCESSES": "32",
        "SLICE_PROCESS_ID": "7",
        "SLICE_BANDWIDTH_MIB": "0.5",
        "SLICE_ITERATIONS": "3",
        "SLICE_INIT_TIMEOUT_SECONDS": "60",
        "SLICE_DEADLINE_SECONDS": "0",
    }
    from_env = sc.parse_settings([], env)
    assert from_env.topology == (4, 4, 8)
    assert (from_env.devices_per_chip, from_env.chips_per_host) == (2, 4)
    assert from_env.distributed == sc.DistributedConfig("slice-0:8476", 32, 7)
    assert (from_env.bandwidth_mib, from_env.iterations) == (0.5, 3)
    assert (from_env.init_timeout_seconds, from_env.deadline_seconds) == (60, 0)

    # Flags win over env.
    flagged = sc.parse_settings(["--topology", "2x2", "--devices-per-chip", "1"], env)
    assert (flagged.topology, flagged.devices_per_chip) == ((2, 2), 1)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "--topology/SLICE_TOPOLOGY is required"),
        (["--topology", "2x0"], "zero dimension"),
        (["--topology", "2x2", "--devices-per-chip", "0"], "must be >= 1"),
        (["--topology", "2x2", "--devices-per-chip", "two"], "must be an integer"),
        (["--topology", "2x2", "--bandwidth-mib", "-1"], "must be > 0"),
        (["--topology", "2x2", "--iterations", "0"], "must be >= 1"),
        (["--topology", "2x2", "--process-id", "0"], "missing"),
        (["--topology", "2x2", "--deadline-seconds", "10"], "must exceed"),
        (["--topology", "2x2", "--no-such-flag"], "unrecognized"),
    ],
)
def test_parse_settings_rejects(argv: list[str], message: str) -> None:
    with pytest.raises(sc.UsageError, match=message):
        sc.parse_settings(argv, {})


# ---------------------------------------------------------------------------
# The real program on fake CPU devices
# ---------------------------------------------------------------------------


def _env(devices: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _PROGRAM_ENV}
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    env.update(extra or {})
    return env


def _parse_output(stdout: str, stderr: str) -> dict[str, Any]:
    lines = stdout.splitlines()
    assert len(lines) == 1, f"want exactly one stdout line, got {lines!r}\n{stderr}"
    report: dict[str, Any] = json.loads(lines[0])
    return report


def _run(args: list[str], devices: int, extra_env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        env=_env(devices, extra_env),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )
    return proc.returncode, _parse_output(proc.stdout, proc.stderr)


def _assert_passed(report: dict[str, Any], *, devices: int, local: int, shape: list[int], axes: list[str]) -> None:
    assert report["ok"] is True, report["errors"]
    assert report["errors"] == []
    assert report["platform"] == "cpu"
    assert report["global_devices"] == report["expected_global_devices"] == devices
    assert report["local_devices"] == local
    assert report["mesh_shape"] == shape
    assert report["mesh_axes"] == axes
    assert report["collective_ok"] is True
    assert report["collective_expected"] == report["collective_observed"] == devices * (devices - 1) // 2
    assert report["allreduce_seconds"] > 0
    assert report["algbw_gbps"] > 0
    assert report["busbw_gbps"] == pytest.approx(report["algbw_gbps"] * 2 * (devices - 1) / devices)


def test_2x2x2_on_8_cpu_devices() -> None:
    rc, report = _run(["--topology", "2x2x2", "--bandwidth-mib", "1", "--iterations", "2"], 8)
    assert rc == 0
    _assert_passed(report, devices=8, local=8, shape=[2, 2, 2, 1], axes=["x", "y", "z", "core"])
    assert report["topology"] == "2x2x2"
    assert report["devices_per_chip"] == 1
    assert (report["process_id"], report["num_processes"]) == (0, 1)
    assert report["allreduce_bytes"] == 1024 * 1024


def test_4x4x8_super_slice_on_128_cpu_devices() -> None:
    rc, report = _run(["--topology", "4x4x8", "--bandwidth-mib", "0.25", "--iterations", "2"], 128)
    assert rc == 0
    _assert_passed(report, devices=128, local=128, shape=[4, 4, 8, 1], axes=["x", "y", "z", "core"])
    assert report["collective_expected"] == 8128
    assert report["allreduce_bytes"] == 256 * 1024


def test_two_devices_per_chip_configured_by_env_only() -> None:
    # TPU7x-like: 2 TensorCores per chip; everything comes from env vars, the
    # way the Kubernetes manifest sets it.
    rc, report = _run(
        [],
        16,
        {
            "SLICE_TOPOLOGY": "2x4",
            "DEVICES_PER_CHIP": "2",
            "CHIPS_PER_HOST": "8",
            "SLICE_BANDWIDTH_MIB": "0.25",
            "SLICE_ITERATIONS": "2",
        },
    )
    assert rc == 0
    _assert_passed(report, devices=16, local=16, shape=[2, 4, 2], axes=["x", "y", "core"])
    assert report["chips_per_host"] == 8


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_two_processes_on_loopback() -> None:
    coordinator = f"127.0.0.1:{_free_loopback_port()}"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(SCRIPT),
                "--topology=2x2x2",
                f"--coordinator-address={coordinator}",
                "--num-processes=2",
                f"--process-id={pid}",
                "--bandwidth-mib=0.25",
                "--iterations=2",
                "--init-timeout-seconds=60",
                "--deadline-seconds=150",
            ],
            env=_env(4),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for pid in (0, 1)
    ]
    outputs: list[tuple[int, str, str]] = []
    try:
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=TIMEOUT_SECONDS)
            outputs.append((proc.returncode, stdout, stderr))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    for pid, (rc, stdout, stderr) in enumerate(outputs):
        # _parse_output also proves native gloo chatter stayed off stdout.
        report = _parse_output(stdout, stderr)
        assert rc == 0, stderr
        _assert_passed(report, devices=8, local=4, shape=[2, 2, 2, 1], axes=["x", "y", "z", "core"])
        assert (report["process_id"], report["num_processes"]) == (pid, 2)
        assert report["chips_per_host"] == 4


def test_device_count_mismatch_fails_with_exit_1() -> None:
    rc, report = _run(["--topology", "2x2x4", "--bandwidth-mib", "0.25"], 8)
    assert rc == 1
    assert report["ok"] is False
    assert report["collective_ok"] is False
    assert (report["global_devices"], report["expected_global_devices"]) == (8, 16)
    assert any("expected 16" in e and "observed 8" in e for e in report["errors"]), report["errors"]


def test_wrong_chips_per_host_fails_with_exit_1() -> None:
    rc, report = _run(["--topology", "2x2x2", "--chips-per-host", "4", "--bandwidth-mib", "0.25"], 8)
    assert rc == 1
    assert report["ok"] is False
    assert any("expected 4 local devices" in e for e in report["errors"]), report["errors"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "required"),
        (["--topology", "2x2x0"], "zero dimension"),
        (["--topology", "2x2x2", "--process-id", "1"], "missing"),
    ],
)
def test_bad_arguments_exit_2(args: list[str], message: str) -> None:
    rc, report = _run(args, 8)
    assert rc == 2
    assert report["ok"] is False
    assert any(message in e for e in report["errors"]), report["errors"]


# ---------------------------------------------------------------------------
# Supervisor: a worker that hangs or dies natively still yields one JSON line
# ---------------------------------------------------------------------------


def _settings(deadline: int) -> sc.Settings:
    return sc.Settings(
        topology=(2, 2, 2),
        devices_per_chip=1,
        chips_per_host=None,
        distributed=sc.DistributedConfig("127.0.0.1:1", 2, 1),
        bandwidth_mib=1.0,
        iterations=1,
        init_timeout_seconds=1,
        deadline_seconds=deadline,
    )


def _supervise(code: str, deadline: int = 60) -> tuple[int, dict[str, Any]]:
    out = io.StringIO()
    rc = sc.supervise([sys.executable, "-c", code], dict(os.environ), _settings(deadline), out)
    return rc, _parse_output(out.getvalue(), "")


def test_supervisor_passes_worker_report_through() -> None:
    rc, report = _supervise("import json, sys; print(json.dumps({'ok': False, 'errors': ['x']})); sys.exit(1)")
    assert rc == 1
    assert report == {"ok": False, "errors": ["x"]}


def test_supervisor_reports_native_abort() -> None:
    rc, report = _supervise("import os; os.abort()")
    assert rc == 1
    assert report["ok"] is False
    assert report["errors"] == ["worker was killed by SIGABRT before reporting; see its stderr"]
    # What was known up front is still there, so the line can be matched to its pod.
    assert (report["topology"], report["process_id"], report["num_processes"]) == ("2x2x2", 1, 2)
    assert report["expected_global_devices"] == 8


def test_supervisor_flags_crash_after_report() -> None:
    rc, report = _supervise("import json, sys; print(json.dumps({'ok': True, 'errors': []})); sys.exit(3)")
    assert rc == 1
    assert report["ok"] is False
    assert report["errors"] == ["worker exited with code 3 after reporting; see its stderr"]


def test_supervisor_kills_hung_worker_at_deadline() -> None:
    rc, report = _supervise("import time; time.sleep(120)", deadline=1)
    assert rc == 1
    assert report["ok"] is False
    assert "deadline of 1s exceeded" in report["errors"][0]


def test_missing_peer_terminates_with_json() -> None:
    # Process 0 of 2 alone: JAX aborts from C++ when registration times out;
    # the supervisor turns that into exit 1 and a JSON line instead of hanging.
    for _attempt in range(3):
        rc, report = _run(
            [
                "--topology=2x2x2",
                f"--coordinator-address=127.0.0.1:{_free_loopback_port()}",
                "--num-processes=2",
                "--process-id=0",
                "--init-timeout-seconds=1",
                "--deadline-seconds=60",
            ],
            4,
        )
        # The free port can be taken by another test's server between choosing and binding it;
        # that is a clash of the test suite, not the path under test: choose another port.
        if not any("Failed to start RPC server" in e for e in report["errors"]):
            break
    assert rc == 1
    assert report["ok"] is False
    assert report["process_id"] == 0
    assert any("before reporting" in e for e in report["errors"]), report["errors"]
