"""Prove that a TPU slice (sub-slice or super-slice) works end to end.

Shipped alone inside a ConfigMap and run on every pod of a JobSet, so this file
must stay self-contained: standard library plus jax/numpy only.

``python slice_check.py`` is a tiny supervisor that re-runs itself as the
worker doing the checks (see ``supervise``), so a native abort or a hang still
ends in one JSON line and a 0/1/2 exit code.

Each process:
  1. joins the JAX distributed system (explicit flags, or auto-detection on
     multi-host Cloud TPU / GKE, or not at all for a single process);
  2. checks the global and local device counts against the requested topology;
  3. builds a mesh shaped like the topology plus a trailing ``core`` axis;
  4. runs a psum over every mesh axis and checks the exact result;
  5. times an all-reduce of a float32 buffer and reports its bandwidth;
  6. prints exactly one JSON line on stdout (logs go to stderr).

Exit codes: 0 all checks passed, 1 a check failed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import json
import logging
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

if TYPE_CHECKING:
    import jax
    from jax.sharding import Mesh, PartitionSpec

# JAX itself is imported inside the functions that run in the worker process:
# the supervising parent (and the unit tests of the pure helpers) then stay
# plain stdlib, start in milliseconds and never touch the TPU runtime.

LOG = logging.getLogger("slice_check")

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2

MIB = 1024 * 1024
FLOAT32_BYTES = 4

# Env vars set by GKE / Cloud TPU on multi-host slices. Each holds a
# comma-separated host list; more than one entry means several processes must
# join one JAX distributed system.
_TPU_HOST_LIST_ENV = ("TPU_WORKER_HOSTNAMES", "TPU_PROCESS_ADDRESSES")
# Set on multislice (Megascale) jobs; more than one slice also needs init.
_MEGASCALE_SLICES_ENV = "MEGASCALE_NUM_SLICES"

# Set by the supervising parent in the child that runs the checks.
_WORKER_ENV = "SLICE_CHECK_WORKER"

_DIMENSION = re.compile(r"[0-9]+")


class UsageError(Exception):
    """A bad flag or env value: reported with exit code 2."""


# --------------------------------------------------------------------------
# Pure helpers (no devices needed; unit-tested directly).
# --------------------------------------------------------------------------


def parse_topology(text: str) -> tuple[int, ...]:
    """Parse ``AxB`` or ``AxBxC`` into a tuple of positive ints."""
    if not text.strip():
        raise ValueError("topology must be a non-empty string like 2x2x2")
    parts = text.strip().split("x")
    if len(parts) not in (2, 3):
        raise ValueError(f"topology {text!r} must have 2 or 3 dimensions (AxB or AxBxC), got {len(parts)}")
    dims: list[int] = []
    for part in parts:
        # fullmatch on [0-9] rejects signs, blanks and non-ASCII digits that
        # int() would otherwise accept.
        if not _DIMENSION.fullmatch(part):
            raise ValueError(f"topology {text!r} has a non-numeric dimension {part!r}")
        if int(part) == 0:
            raise ValueError(f"topology {text!r} has a zero dimension")
        if part.startswith("0"):
            raise ValueError(f"topology {text!r} has a dimension with a leading zero {part!r}")
        dims.append(int(part))
    return tuple(dims)


def format_topology(topology: Sequence[int]) -> str:
    """Inverse of :func:`parse_topology`."""
    return "x".join(str(d) for d in topology)


def expected_global_devices(topology: Sequence[int], devices_per_chip: int) -> int:
    """Devices JAX should see in the whole slice: chips times cores per chip."""
    return math.prod(topology) * devices_per_chip


def mesh_axis_names(topology: Sequence[int]) -> tuple[str, ...]:
    """Physical axes of the topology plus a trailing per-chip ``core`` axis."""
    if len(topology) not in (2, 3):
        raise ValueError(f"topology must have 2 or 3 dimensions, got {len(topology)}")
    return (*("x", "y", "z")[: len(topology)], "core")


def mesh_shape(topology: Sequence[int], devices_per_chip: int) -> tuple[int, ...]:
    """Mesh shape matching :func:`mesh_axis_names`."""
    return (*topology, devices_per_chip)


def expected_index_sum(num_devices: int) -> int:
    """psum of every device's global index 0..n-1."""
    return num_devices * (num_devices - 1) // 2


def bus_bandwidth_factor(num_devices: int) -> float:
    """Ring all-reduce moves 2*(n-1)/n of the buffer over each link."""
    if num_devices <= 1:
        return 0.0
    return 2.0 * (num_devices - 1) / num_devices


def allreduce_elements(bandwidth_mib: float) -> int:
    """float32 elements in a buffer of ``bandwidth_mib`` MiB (at least one)."""
    return max(1, int(bandwidth_mib * MIB) // FLOAT32_BYTES)


def parse_coordinator_address(text: str) -> tuple[str, int]:
    """Split ``host:port`` (IPv6 as ``[addr]:port``) and validate the port."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(f"coordinator address {text!r} must look like host:port")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise ValueError(f"coordinator port {port} is outside 1..65535")
    return host, port


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def should_auto_initialize(env: Mapping[str, str]) -> bool:
    """Whether the environment describes a multi-host TPU job.

    ``JOBSET_NAME`` alone is not enough: a single-host JobSet sets it too, and
    JAX's auto-detection needs the TPU host list anyway.
    """
    for name in _TPU_HOST_LIST_ENV:
        hosts = [h for h in env.get(name, "").split(",") if h.strip()]
        if len(hosts) > 1:
            return True
    slices = env.get(_MEGASCALE_SLICES_ENV, "").strip()
    return slices.isdigit() and int(slices) > 1


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    coordinator_address: str
    num_processes: int
    process_id: int


def resolve_distributed(
    coordinator_address: str | None,
    num_processes: int | None,
    process_id: int | None,
) -> DistributedConfig | None:
    """All three explicit settings, or none (auto-detect / single process)."""
    given = {
        "--coordinator-address/SLICE_COORDINATOR_ADDRESS": coordinator_address,
        "--num-processes/SLICE_NUM_PROCESSES": num_processes,
        "--process-id/SLICE_PROCESS_ID": process_id,
    }
    missing = [name for name, value in given.items() if value is None]
    if len(missing) == len(given):
        return None
    if missing:
        raise UsageError(
            "explicit distributed setup needs all of coordinator address, "
            f"num processes and process id; missing {', '.join(missing)}"
        )
    assert coordinator_address is not None
    assert num_processes is not None
    assert process_id is not None
    try:
        parse_coordinator_address(coordinator_address)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if process_id >= num_processes:
        raise UsageError(f"process id {process_id} must be < num processes {num_processes}")
    return DistributedConfig(coordinator_address, num_processes, process_id)


# --------------------------------------------------------------------------
# Command line.
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Settings:
    topology: tuple[int, ...]
    devices_per_chip: int
    chips_per_host: int | None
    distributed: DistributedConfig | None
    bandwidth_mib: float
    iterations: int
    init_timeout_seconds: int
    deadline_seconds: int


class _Parser(argparse.ArgumentParser):
    """Raise instead of exiting so main() can still print the JSON line."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _env(env: Mapping[str, str], name: str) -> str | None:
    # An empty env var (e.g. an unset Kubernetes value) means "not given".
    value = env.get(name, "").strip()
    return value or None


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="slice_check.py",
        description="Check a TPU (sub/super) slice: device counts, a psum "
        "collective over the whole mesh and all-reduce bandwidth. Every flag "
        "can also be set by the env var named in its help.",
    )

    def add(flag: str, env_name: str, help_text: str, default: str | None = None) -> None:
        value = _env(env, env_name)
        parser.add_argument(
            flag,
            default=value if value is not None else default,
            help=f"{help_text} (env {env_name}" + (f"; default {default})" if default else ")"),
        )

    add("--topology", "SLICE_TOPOLOGY", "slice topology AxB or AxBxC, required")
    add("--devices-per-chip", "DEVICES_PER_CHIP", "JAX devices per chip", "1")
    add(
        "--chips-per-host",
        "CHIPS_PER_HOST",
        "chips per host; default: local devices / devices per chip",
    )
    add("--coordinator-address", "SLICE_COORDINATOR_ADDRESS", "host:port of process 0")
    add("--num-processes", "SLICE_NUM_PROCESSES", "total number of processes")
    add("--process-id", "SLICE_PROCESS_ID", "this process's id, 0-based")
    add(
        "--bandwidth-mib",
        "SLICE_BANDWIDTH_MIB",
        "all-reduce buffer size per device in MiB",
        "64",
    )
    add("--iterations", "SLICE_ITERATIONS", "timed all-reduce iterations", "5")
    add(
        "--init-timeout-seconds",
        "SLICE_INIT_TIMEOUT_SECONDS",
        "jax.distributed.initialize timeout",
        "300",
    )
    add(
        "--deadline-seconds",
        "SLICE_DEADLINE_SECONDS",
        "wall-clock limit for all checks; a hung run is killed and reported (exit 1); 0 disables",
        "900",
    )
    return parser


def _to_int(value: str | None, name: str, minimum: int) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise UsageError(f"{name} must be an integer, got {value!r}") from None
    if number < minimum:
        raise UsageError(f"{name} must be >= {minimum}, got {number}")
    return number


def _required_int(value: str | None, name: str, minimum: int) -> int:
    number = _to_int(value, name, minimum)
    if number is None:
        raise UsageError(f"{name} is required")
    return number


def parse_settings(argv: Sequence[str] | None, env: Mapping[str, str]) -> Settings:
    """Parse flags (falling back to env vars) into validated :class:`Settings`."""
    ns = build_parser(env).parse_args(argv)
    if ns.topology is None:
        raise UsageError("--topology/SLICE_TOPOLOGY is required")
    try:
        topology = parse_topology(ns.topology)
    except ValueError as exc:
        raise UsageError(f"--topology/SLICE_TOPOLOGY: {exc}") from None

    try:
        bandwidth_mib = float(ns.bandwidth_mib)
    except ValueError:
        raise UsageError(f"--bandwidth-mib/SLICE_BANDWIDTH_MIB must be a number, got {ns.bandwidth_mib!r}") from None
    if not math.isfinite(bandwidth_mib) or bandwidth_mib <= 0:
        raise UsageError(f"--bandwidth-mib/SLICE_BANDWIDTH_MIB must be > 0, got {bandwidth_mib}")

    init_timeout = _required_int(ns.init_timeout_seconds, "--init-timeout-seconds/SLICE_INIT_TIMEOUT_SECONDS", 1)
    deadline = _required_int(ns.deadline_seconds, "--deadline-seconds/SLICE_DEADLINE_SECONDS", 0)
    if 0 < deadline <= init_timeout:
        # Otherwise the supervisor would kill the worker before initialize()
        # could time out and log its own, more useful error.
        raise UsageError(
            f"--deadline-seconds ({deadline}) must exceed --init-timeout-seconds ({init_timeout}), or be 0 to disable"
        )

    return Settings(
        topology=topology,
        devices_per_chip=_required_int(ns.devices_per_chip, "--devices-per-chip/DEVICES_PER_CHIP", 1),
        chips_per_host=_to_int(ns.chips_per_host, "--chips-per-host/CHIPS_PER_HOST", 1),
        distributed=resolve_distributed(
            ns.coordinator_address,
            _to_int(ns.num_processes, "--num-processes/SLICE_NUM_PROCESSES", 1),
            _to_int(ns.process_id, "--process-id/SLICE_PROCESS_ID", 0),
        ),
        bandwidth_mib=bandwidth_mib,
        iterations=_required_int(ns.iterations, "--iterations/SLICE_ITERATIONS", 1),
        init_timeout_seconds=init_timeout,
        deadline_seconds=deadline,
    )


# --------------------------------------------------------------------------
# Report: exactly one JSON line per process.
# --------------------------------------------------------------------------


@dataclasses.dataclass
class Report:
    ok: bool = False
    topology: str | None = None
    devices_per_chip: int | None = None
    chips_per_host: int | None = None
    process_id: int | None = None
    num_processes: int | None = None
    global_devices: int | None = None
    expected_global_devices: int | None = None
    local_devices: int | None = None
    mesh_shape: list[int] | None = None
    mesh_axes: list[str] | None = None
    collective_ok: bool = False
    collective_expected: int | None = None
    collective_observed: int | None = None
    allreduce_bytes: int | None = None
    allreduce_seconds: float | None = None
    algbw_gbps: float | None = None
    busbw_gbps: float | None = None
    errors: list[str] = dataclasses.field(default_factory=list)
    platform: str | None = None


def reserve_stdout() -> TextIO:
    """Keep the real stdout for the JSON line; send everything else to stderr.

    Native code writes to fd 1 directly (gloo prints "[Gloo] Rank ..." lines
    on CPU, TPU runtimes may log too), which would break "one JSON line on
    stdout". Point fd 1 at stderr and return a private handle on the original.
    """
    sys.stdout.flush()
    json_fd = os.dup(1)
    os.dup2(2, 1)
    return os.fdopen(json_fd, "w", encoding="utf-8")


def write_json_line(value: Mapping[str, Any], out: TextIO) -> None:
    out.write(json.dumps(dict(value)) + "\n")
    out.flush()


def base_report(settings: Settings) -> Report:
    """What is known before JAX starts (all a failure report may have)."""
    dist = settings.distributed
    return Report(
        topology=format_topology(settings.topology),
        devices_per_chip=settings.devices_per_chip,
        chips_per_host=settings.chips_per_host,
        # Explicit ids let a failure line be matched to its pod.
        process_id=dist.process_id if dist else None,
        num_processes=dist.num_processes if dist else None,
        expected_global_devices=expected_global_devices(settings.topology, settings.devices_per_chip),
    )


# --------------------------------------------------------------------------
# Supervisor: the checks run in a child process.
#
# JAX's distributed client aborts the whole process from C++ (SIGABRT, no
# Python exception) when initialisation times out or a peer dies, and a broken
# ICI link can hang a collective forever. Neither can be handled inside the
# process, so a small parent enforces the deadline and turns any abnormal end
# into the promised JSON line and exit code 1.
# --------------------------------------------------------------------------


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


def _last_json_object(text: str) -> dict[str, Any] | None:
    for line in reversed(text.splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def supervise(command: Sequence[str], env: Mapping[str, str], settings: Settings, out: TextIO) -> int:
    """Run ``command`` as the worker; always emit one JSON line; return 0/1/2."""
    child = subprocess.Popen(list(command), env={**env, _WORKER_ENV: "1"}, stdout=subprocess.PIPE, text=True)

    def forward(signum: int, _frame: object) -> None:
        # Kubernetes stops a pod with SIGTERM to PID 1 (this parent).
        child.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    timeout = settings.deadline_seconds or None
    problem: str | None = None
    try:
        stdout, _ = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        stdout, _ = child.communicate()
        problem = f"deadline of {timeout}s exceeded: a check hung and was killed"
    finally:
        signal.signal(signal.SIGTERM, previous)

    reported = _last_json_object(stdout)
    code = child.returncode
    if problem is None and reported is not None and code in (EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE):
        write_json_line(reported, out)
        return code

    if problem is None:
        when = "after" if reported is not None else "before"
        problem = f"worker {_describe_exit(code)} {when} reporting; see its stderr"
    LOG.error("%s", problem)
    if reported is None:
        reported = dataclasses.asdict(base_report(settings))
    reported["ok"] = False
    reported["errors"] = [*reported.get("errors", []), problem]
    write_json_line(reported, out)
    return EXIT_CHECK_FAILED


# --------------------------------------------------------------------------
# JAX side.
# --------------------------------------------------------------------------


def _cpu_platform_requested() -> bool:
    import jax

    # The backend is not initialised yet (initialize() must come first), so
    # look at the requested platform list rather than jax.devices().
    # getattr: the attribute exists at runtime (mirrors JAX_PLATFORMS) but is
    # not in jax's type stubs; config.read() refuses it in jax 0.10.
    platforms = getattr(jax.config, "jax_platforms", None) or ""
    return str(platforms).split(",")[0].strip() == "cpu"


def initialize_distributed(settings: Settings, env: Mapping[str, str]) -> None:
    """Join the JAX distributed system if more than one process is involved."""
    import jax

    dist = settings.distributed
    multi_process = (dist is not None and dist.num_processes > 1) or (dist is None and should_auto_initialize(env))
    if multi_process and _cpu_platform_requested():
        # CPU has no ICI: cross-process collectives need a host transport.
        # gloo is the jax 0.10.x default, but older releases defaulted to none
        # (cross-process CPU programs then fail), so pin it explicitly. Only on
        # CPU so TPU runs keep JAX's defaults untouched.
        jax.config.update("jax_cpu_collectives_implementation", "gloo")

    if dist is not None:
        host, _ = parse_coordinator_address(dist.coordinator_address)
        # A loopback coordinator is only reachable from this machine, so there
        # is no reason to listen on every interface (JAX's default).
        bind = dist.coordinator_address if is_loopback_host(host) else None
        LOG.info(
            "jax.distributed.initialize(coordinator=%s, num_processes=%d, process_id=%d)",
            dist.coordinator_address,
            dist.num_processes,
            dist.process_id,
        )
        jax.distributed.initialize(
            coordinator_address=dist.coordinator_address,
            num_processes=dist.num_processes,
            process_id=dist.process_id,
            initialization_timeout=settings.init_timeout_seconds,
            coordinator_bind_address=bind,
        )
    elif should_auto_initialize(env):
        # Multi-host Cloud TPU / GKE: JAX reads coordinator, process count and
        # id from the TPU environment / metadata server.
        LOG.info("multi-host TPU environment detected; jax.distributed.initialize()")
        jax.distributed.initialize(initialization_timeout=settings.init_timeout_seconds)
    else:
        LOG.info("single process; not initialising jax.distributed")


def check_device_counts(settings: Settings, report: Report) -> bool:
    """Fill counts into the report; return whether the mesh can be built."""
    import jax

    report.platform = jax.default_backend()
    report.process_id = jax.process_index()
    report.num_processes = jax.process_count()
    report.global_devices = jax.device_count()
    report.local_devices = jax.local_device_count()
    expected = expected_global_devices(settings.topology, settings.devices_per_chip)
    report.expected_global_devices = expected
    topo = format_topology(settings.topology)

    if report.global_devices != expected:
        report.errors.append(
            f"expected {expected} global devices (topology {topo} x "
            f"{settings.devices_per_chip} per chip) but observed {report.global_devices}"
        )
    if report.local_devices * report.num_processes != report.global_devices:
        report.errors.append(
            f"local devices {report.local_devices} x processes {report.num_processes} "
            f"!= global devices {report.global_devices}"
        )

    if report.local_devices % settings.devices_per_chip:
        report.errors.append(
            f"local devices {report.local_devices} not divisible by {settings.devices_per_chip} devices per chip"
        )
    chips_per_host = settings.chips_per_host or max(1, report.local_devices // settings.devices_per_chip)
    report.chips_per_host = chips_per_host
    if settings.chips_per_host is not None:
        wanted_local = settings.chips_per_host * settings.devices_per_chip
        if report.local_devices != wanted_local:
            report.errors.append(
                f"expected {wanted_local} local devices ({settings.chips_per_host} "
                f"chips x {settings.devices_per_chip}) but observed {report.local_devices}"
            )
    chips = math.prod(settings.topology)
    if chips % chips_per_host:
        report.errors.append(f"topology {topo} ({chips} chips) is not a whole number of {chips_per_host}-chip hosts")
    elif chips // chips_per_host != report.num_processes:
        report.errors.append(
            f"expected {chips // chips_per_host} processes ({chips} chips / "
            f"{chips_per_host} per host) but observed {report.num_processes}"
        )
    # Only the global count decides whether the mesh reshape is possible.
    return report.global_devices == expected


def build_mesh(shape: tuple[int, ...], axes: tuple[str, ...]) -> Mesh:
    """Mesh over all global devices, ICI-aware on TPU."""
    import jax
    import numpy as np
    from jax.experimental import mesh_utils
    from jax.sharding import Mesh

    devices = jax.devices()
    if devices[0].platform == "tpu":
        try:
            # Maps logical axes onto the physical torus so neighbours in the
            # mesh are neighbours on ICI.
            return Mesh(mesh_utils.create_device_mesh(shape, devices=devices), axes)
        except (ValueError, NotImplementedError, AssertionError) as exc:
            # mesh_utils signals "cannot map this shape/topology" with these.
            LOG.warning("create_device_mesh refused (%s); using plain reshape", exc)
    # Fine on CPU and still a valid mesh on TPU, just not topology-optimised.
    return Mesh(np.array(devices).reshape(shape), axes)


def _psum_all(mesh: Mesh, spec: PartitionSpec) -> Any:
    """jit(shard_map(psum over every mesh axis))."""
    import jax

    axes = tuple(mesh.axis_names)

    def body(block: jax.Array) -> jax.Array:
        return jax.lax.psum(block, axes)

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec))


def run_collective_check(mesh: Mesh, report: Report) -> None:
    """Every device contributes its global index; all must see sum(0..n-1)."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    n = mesh.size
    spec = P(*mesh.axis_names)  # one element per device
    values = np.arange(n, dtype=np.int32).reshape(mesh.devices.shape)
    # The callback only runs for this process's devices, so each process
    # builds just its own shards of the global array.
    inputs = jax.make_array_from_callback(values.shape, NamedSharding(mesh, spec), lambda index: values[index])
    summed = _psum_all(mesh, spec)(inputs)

    expected = expected_index_sum(n)
    report.collective_expected = expected
    bad: list[str] = []
    first_wrong: int | None = None
    for shard in summed.addressable_shards:
        value = int(np.asarray(shard.data).reshape(-1)[0])
        if value != expected:
            bad.append(f"{shard.device}={value}")
            if first_wrong is None:
                first_wrong = value
    # One int either way: the agreed value, or the first wrong one seen.
    report.collective_observed = expected if first_wrong is None else first_wrong
    report.collective_ok = not bad
    if bad:
        report.errors.append(
            f"psum of device indices expected {expected} on every device; "
            f"wrong on {len(bad)} local device(s): {', '.join(bad[:8])}"
        )


def run_bandwidth(mesh: Mesh, settings: Settings, report: Report) -> None:
    """Time a float32 all-reduce of ``bandwidth_mib`` MiB per device."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    n = mesh.size
    elements = allreduce_elements(settings.bandwidth_mib)
    # Dim 0 is split over all mesh axes jointly: one row per device.
    spec = P(tuple(mesh.axis_names), None)
    sharding = NamedSharding(mesh, spec)
    # Create the buffer on device; shipping it from the host would cost
    # n * size of host memory and transfer time that has nothing to do with ICI.
    make_buffer = jax.jit(lambda: jnp.ones((n, elements), dtype=jnp.float32), out_shardings=sharding)
    buffer = make_buffer()
    allreduce = _psum_all(mesh, spec)

    allreduce(buffer).block_until_ready()  # warm-up: compile + first run
    seconds: list[float] = []
    result = buffer
    for _ in range(settings.iterations):
        start = time.perf_counter()
        result = allreduce(buffer)
        result.block_until_ready()
        seconds.append(time.perf_counter() - start)

    # Cheap correctness probe so a silently broken all-reduce is not reported
    # as "fast": every element must equal n (exact in float32 for n < 2**24).
    first = float(np.asarray(result.addressable_shards[0].data[0, :1])[0])
    if first != float(n):
        report.errors.append(f"all-reduce produced {first}, expected {float(n)}")

    size = elements * FLOAT32_BYTES
    mean = sum(seconds) / len(seconds)
    algbw = size / mean / 1e9 if mean > 0 else 0.0
    report.allreduce_bytes = size
    report.allreduce_seconds = mean
    report.algbw_gbps = algbw
    report.busbw_gbps = algbw * bus_bandwidth_factor(n)
    LOG.info(
        "all-reduce %d bytes/device over %d devices: %.6fs, algbw %.3f GB/s, busbw %.3f GB/s",
        size,
        n,
        mean,
        algbw,
        report.busbw_gbps,
    )


def run_checks(settings: Settings, report: Report, env: Mapping[str, str]) -> None:
    initialize_distributed(settings, env)
    if not check_device_counts(settings, report):
        return  # the mesh reshape cannot work; errors already say why
    shape = mesh_shape(settings.topology, settings.devices_per_chip)
    axes = mesh_axis_names(settings.topology)
    mesh = build_mesh(shape, axes)
    report.mesh_shape = list(mesh.devices.shape)
    report.mesh_axes = [str(a) for a in mesh.axis_names]
    run_collective_check(mesh, report)
    run_bandwidth(mesh, settings, report)


def run_worker(settings: Settings, env: Mapping[str, str], out: TextIO) -> int:
    report = base_report(settings)
    try:
        run_checks(settings, report, env)
    except Exception as exc:  # any failure must still report JSON
        LOG.exception("check failed with an exception")
        report.errors.append(f"{type(exc).__name__}: {exc}")
    report.ok = report.collective_ok and not report.errors
    write_json_line(dataclasses.asdict(report), out)
    return EXIT_OK if report.ok else EXIT_CHECK_FAILED


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s slice_check %(levelname)s %(message)s",
    )
    argv = sys.argv[1:] if argv is None else list(argv)
    env = os.environ if env is None else env
    try:
        settings = parse_settings(argv, env)
    except UsageError as exc:
        LOG.error("bad arguments: %s (see --help)", exc)
        write_json_line(dataclasses.asdict(Report(errors=[f"bad arguments: {exc}"])), sys.stdout)
        return EXIT_USAGE

    if env.get(_WORKER_ENV) == "1":
        return run_worker(settings, env, reserve_stdout())
    script = os.path.abspath(__file__)
    return supervise([sys.executable, script, *argv], env, settings, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
