"""CPU machine types for the system pool, and what GKE leaves of them for pods (no Pulumi, no pydantic).

The system pool runs every pod without a TPU: the router, the controllers, the Saxml admin server.
A pod that requests more than one node's allocatable CPU or memory stays Pending for good, so the
settings refuse a `cluster.systemMachineType` smaller than the largest such pod of the stack's backend.
"""

from __future__ import annotations

from dataclasses import dataclass

from settings.names import NameRule

GIB_MIB = 1024

# GCE predefined machine types of the general-purpose x86 series (cloud.google.com/compute/docs/
# general-purpose-machines, checked 2026-11; N1 and N2D also in /compute/docs/machine-resource): vCPUs are
# the number in the name; memory is a fixed GiB per vCPU for each family (the API's memoryMb:
# n2-standard-8 = 32768 MB = 32 GiB, n1-standard-1 = 3840 MB = 3.75 GiB), and only the sizes listed exist.
# Shared-core e2-micro/small/medium and f1/g1 are left out: GKE's allocatable for them is not given by the
# formula below. A general-purpose series not listed (C4, C4D, N4D) is refused as unknown, not tainted:
# the program cannot say what it leaves for pods.
_SIZES_E2 = (2, 4, 8, 16, 32)
_SIZES_N1 = (2, 4, 8, 16, 32, 64, 96)
_SIZES_N2 = (2, 4, 8, 16, 32, 48, 64, 80, 96, 128)
_SIZES_N2D = (2, 4, 8, 16, 32, 48, 64, 80, 96, 128, 224)
_SIZES_N4 = (2, 4, 8, 16, 32, 48, 64, 80)
_SIZES_C3 = (4, 8, 22, 44, 88, 176)
_SIZES_C3D = (4, 8, 16, 30, 60, 90, 180, 360)
FAMILIES: dict[str, tuple[float, tuple[int, ...]]] = {
    # family: (GiB per vCPU, vCPU sizes)
    "e2-standard": (4, _SIZES_E2),
    "e2-highmem": (8, (2, 4, 8, 16)),
    "e2-highcpu": (1, _SIZES_E2),
    "n1-standard": (3.75, (1, *_SIZES_N1)),
    "n1-highmem": (6.5, _SIZES_N1),
    "n1-highcpu": (0.9, _SIZES_N1),
    "n2-standard": (4, _SIZES_N2),
    "n2-highmem": (8, _SIZES_N2),
    "n2-highcpu": (1, _SIZES_N2[:-1]),  # n2-highcpu stops at 96
    "n2d-standard": (4, _SIZES_N2D),
    "n2d-highmem": (8, _SIZES_N2D[:-2]),  # n2d-highmem stops at 96
    "n2d-highcpu": (1, _SIZES_N2D),
    "n4-standard": (4, _SIZES_N4),
    "n4-highmem": (8, _SIZES_N4),
    "n4-highcpu": (2, _SIZES_N4),  # N4 and C3 highcpu have 2 GiB per vCPU, N2 and E2 1 GiB
    "t2d-standard": (4, (1, 2, 4, 8, 16, 32, 48, 60)),
    "c3-standard": (4, _SIZES_C3),
    "c3-highmem": (8, _SIZES_C3),
    "c3-highcpu": (2, _SIZES_C3),
    "c3d-standard": (4, _SIZES_C3D),
    "c3d-highmem": (8, _SIZES_C3D),
    "c3d-highcpu": (2, _SIZES_C3D),
}
_NAME = NameRule(r"(?P<family>[a-z][a-z0-9]*-[a-z]+)-(?P<vcpus>[0-9]+)", "<series>-<kind>-<vCPUs>")


@dataclass(frozen=True)
class Taint:
    """A machine series GKE taints, so that no pod without the toleration is scheduled there (GKE, "Control
    scheduling with node taints", cloud.google.com/kubernetes-engine/docs/how-to/node-taints): TPU nodes,
    GPU nodes and Arm nodes, each page cited in `source`. The system pool's pods (controllers, router,
    Saxml admin and HTTP servers, smoke Job) carry none of these tolerations."""

    kind: str  # with its article: "an Arm"
    series: NameRule
    taint: str
    source: str


TAINTS: tuple[Taint, ...] = (
    Taint(
        "a TPU",
        NameRule(r"ct[0-9][a-z0-9]*|tpu[a-z0-9]*", "ct5lp, ct6e, tpu7x, ..."),
        "google.com/tpu=present:NoSchedule",
        "cloud.google.com/kubernetes-engine/docs/how-to/tpus",
    ),
    Taint(
        "a GPU (accelerator-optimized)",
        NameRule(r"a[0-9][a-z0-9]*|g[2-9][a-z0-9]*", "a2, a3, a4, a4x, g2, g4, ..."),  # g1-small is N1's
        "nvidia.com/gpu=present:NoSchedule",
        "cloud.google.com/kubernetes-engine/docs/how-to/gpus",
    ),
    Taint(
        "an Arm",
        NameRule(r"[a-z][0-9]+a", "t2a, c4a, n4a, ..."),
        "kubernetes.io/arch=arm64:NoSchedule",
        "cloud.google.com/kubernetes-engine/docs/how-to/prepare-arm-workloads-for-deployment",
    ),
)


class MachineTypeError(ValueError):
    pass


@dataclass(frozen=True)
class Machine:
    name: str
    vcpus: int
    memory_gib: float

    @property
    def family(self) -> str:
        return self.name.rsplit("-", 1)[0]

    @property
    def allocatable_millicpu(self) -> int:
        return self.vcpus * 1000 - reserved_millicpu(self.vcpus)

    @property
    def allocatable_memory_mib(self) -> int:
        return round(self.memory_gib * GIB_MIB) - reserved_memory_mib(self.memory_gib)


def _known() -> str:
    return ", ".join(f"{family}-N" for family in FAMILIES)


def taint_of(name: str) -> Taint | None:
    """The taint GKE puts on nodes of `name`'s series, or None."""
    series = name.split("-", 1)[0]
    return next((taint for taint in TAINTS if taint.series.matches(series)), None)


def machine(name: str) -> Machine:
    """The vCPUs and memory of a predefined GCE machine type, from its name."""
    taint = taint_of(name)
    if taint is not None:
        raise MachineTypeError(
            f"{name!r} is {taint.kind} machine type: GKE taints such nodes {taint.taint} ({taint.source}), and "
            f"the system pool's pods tolerate no such taint, so they would stay Pending; allowed: a general-purpose "
            f"x86 machine type GKE leaves untainted, known: {_known()}"
        )
    match = _NAME.match(name)
    family = match.group("family") if match else name
    if family not in FAMILIES:
        raise MachineTypeError(
            f"{name!r} is not a machine type of a known family (the program computes what GKE leaves of each for "
            f"pods); known: {_known()}"
        )
    per_vcpu, sizes = FAMILIES[family]
    vcpus = int(match.group("vcpus")) if match else 0
    if vcpus not in sizes:
        raise MachineTypeError(
            f"{name!r} does not exist: {family} comes in {', '.join(f'{family}-{n}' for n in sizes)}"
        )
    return Machine(name, vcpus, vcpus * per_vcpu)


def reserved_millicpu(vcpus: int) -> int:
    """CPU GKE reserves for the kubelet and system daemons (GKE docs, "Plan node sizes", CPU reservations):
    6% of the first core, 1% of the second, 0.5% of the third and fourth, 0.25% of every core above four."""
    tiers = ((1, 60), (1, 10), (2, 5))
    reserved, left = 0.0, vcpus
    for cores, per_core in tiers:
        used = min(left, cores)
        reserved += used * per_core
        left -= used
    return round(reserved + left * 2.5)


def reserved_memory_mib(memory_gib: float) -> int:
    """Memory GKE reserves (GKE docs, "Plan node sizes", memory reservations): 25% of the first 4 GiB,
    20% of the next 4, 10% of the next 8, 6% of the next 112 and 2% above 128 GiB, plus the kubelet's
    100 MiB eviction threshold (255 MiB for machines under 1 GiB, which the catalog has none of)."""
    tiers = ((4, 0.25), (4, 0.20), (8, 0.10), (112, 0.06))
    reserved, left = 0.0, float(memory_gib)
    for size, share in tiers:
        used = min(left, size)
        reserved += used * share
        left -= used
    return round((reserved + left * 0.02) * GIB_MIB) + 100


@dataclass(frozen=True)
class SystemPod:
    """A pod without a TPU, so on the system pool: its requests, where they are set, and who runs it."""

    what: str
    millicpu: int
    memory_mib: int
    source: str
    backends: frozenset[str]


_CUBE = frozenset({"vllm-pd", "none"})
_LWS = frozenset({"vllm-pd", "none", "jetstream"})
_JOBSET = frozenset({"vllm-pd", "none", "saxml"})
# Controllers per backend as __main__.py installs them (needed_controllers); requests from the code or
# the chart's values.yaml at the pinned tag (settings/model.py Versions).
SYSTEM_PODS: tuple[SystemPod, ...] = (
    SystemPod("the EPP router", 4000, 8 * GIB_MIB, "k8s/router.py", frozenset({"vllm-pd"})),
    SystemPod("the slice controller", 500, 1024, "k8s/slice_controller.py", _CUBE),
    SystemPod("the Kueue controller", 500, 512, "kubernetes-sigs/kueue v0.19.2 charts/kueue/values.yaml", _CUBE),
    SystemPod("the LWS controller", 1000, 1024, "kubernetes-sigs/lws v0.8.0 charts/lws/values.yaml", _LWS),
    SystemPod("the JobSet controller", 500, 128, "kubernetes-sigs/jobset v0.12.0 charts/jobset/values.yaml", _JOBSET),
    SystemPod("the smoke-test Job", 100, 128, "workloads/smoke_job.py", frozenset({"vllm-pd"})),
    SystemPod("the Saxml admin server", 1000, 2048, "workloads/saxml.py", frozenset({"saxml"})),
    SystemPod("the Saxml HTTP server", 1000, 2048, "workloads/saxml.py", frozenset({"saxml"})),
)


def largest_pods(backend: str) -> tuple[SystemPod, SystemPod]:
    """The system pods of `backend` with the largest CPU and the largest memory request."""
    pods = [pod for pod in SYSTEM_PODS if backend in pod.backends]
    return max(pods, key=lambda p: p.millicpu), max(pods, key=lambda p: p.memory_mib)


def smallest_fitting(family: str, millicpu: int, memory_mib: int) -> Machine | None:
    for vcpus in FAMILIES[family][1]:
        candidate = machine(f"{family}-{vcpus}")
        if candidate.allocatable_millicpu >= millicpu and candidate.allocatable_memory_mib >= memory_mib:
            return candidate
    return None


def system_machine_problem(name: str, backend: str) -> str | None:
    """Why `name` cannot hold the largest system pod of `backend` (a sentence), or None."""
    try:
        found = machine(name)
    except MachineTypeError as err:
        return f"{err}"
    by_cpu, by_memory = largest_pods(backend)
    cpu_short = found.allocatable_millicpu < by_cpu.millicpu
    memory_short = found.allocatable_memory_mib < by_memory.memory_mib
    if not (cpu_short or memory_short):
        return None
    pod = by_cpu if cpu_short else by_memory
    asks = f"{pod.millicpu / 1000:g} vCPU" if cpu_short else f"{pod.memory_mib / GIB_MIB:g} GiB"
    fit = smallest_fitting(found.family, by_cpu.millicpu, by_memory.memory_mib)
    example = f", e.g. {fit.name}" if fit else ""
    return (
        f"{name!r} leaves {found.allocatable_millicpu / 1000:.2f} vCPU and {found.allocatable_memory_mib / GIB_MIB:.1f}"
        f" GiB for pods after GKE's reservation, but {pod.what} ({pod.source}) that serving.backend {backend!r} "
        f"runs there requests {asks}, so it would stay Pending; allowed: a machine type with at least "
        f"{by_cpu.millicpu / 1000:g} vCPU and {by_memory.memory_mib / GIB_MIB:g} GiB allocatable{example}"
    )
