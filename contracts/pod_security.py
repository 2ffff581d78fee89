"""Pod Security Standards levels of a pod template (no Pulumi).

The checks of Kubernetes' pod-security-admission (k8s.io/pod-security-admission, policy/
check_*.go) that a generated pod can trip, reduced to what decides its level: `privileged`
when a baseline check fails, `baseline` when a restricted one does, otherwise `restricted`.
Used by the tests to prove each namespace's `enforce` label is the strictest its pods meet.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

LEVELS = ("privileged", "baseline", "restricted")
ENFORCE = "pod-security.kubernetes.io/enforce"
WARN = "pod-security.kubernetes.io/warn"
AUDIT = "pod-security.kubernetes.io/audit"

# check_capabilities_baseline.go
BASELINE_CAPABILITIES = frozenset(
    {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE"}
    | {"SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
)
# check_restrictedVolumes.go
RESTRICTED_VOLUMES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)
# check_sysctls.go (safe sysctls at 1.29+)
SAFE_SYSCTLS = frozenset(
    {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start"}
    | {"net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports"}
    | {"net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl"}
    | {"net.ipv4.tcp_keepalive_probes"}
)


def _containers(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def baseline_problems(spec: Mapping[str, Any]) -> list[str]:
    problems = [f"spec.{key}" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    pod_context = spec.get("securityContext") or {}
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            problems.append(f"hostPath volume {volume.get('name')}")
    for sysctl in pod_context.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            problems.append(f"sysctl {sysctl.get('name')}")
    if (pod_context.get("seccompProfile") or {}).get("type") == "Unconfined":
        problems.append("pod seccompProfile Unconfined")
    for container in _containers(spec):
        name = container.get("name")
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            problems.append(f"{name}: privileged")
        added = set((context.get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            problems.append(f"{name}: capabilities {sorted(added - BASELINE_CAPABILITIES)}")
        if any(port.get("hostPort") for port in container.get("ports") or []):
            problems.append(f"{name}: hostPort")
        if context.get("procMount") not in (None, "Default"):
            problems.append(f"{name}: procMount")
        if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
            problems.append(f"{name}: seccompProfile Unconfined")
    return problems


def restricted_problems(spec: Mapping[str, Any]) -> list[str]:
    problems = []
    pod_context = spec.get("securityContext") or {}
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            problems.append(f"volume {volume.get('name')}: {sorted(kinds)}")
    pod_non_root = pod_context.get("runAsNonRoot") is True
    pod_seccomp = (pod_context.get("seccompProfile") or {}).get("type") in ("RuntimeDefault", "Localhost")
    if pod_context.get("runAsUser") == 0:
        problems.append("pod runAsUser 0")
    for container in _containers(spec):
        name = container.get("name")
        context = container.get("securityContext") or {}
        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation not false")
        if not (context.get("runAsNonRoot") is True or (pod_non_root and context.get("runAsNonRoot") is not False)):
            problems.append(f"{name}: runAsNonRoot not true")
        if context.get("runAsUser") == 0:
            problems.append(f"{name}: runAsUser 0")
        seccomp = (context.get("seccompProfile") or {}).get("type")
        if not (seccomp in ("RuntimeDefault", "Localhost") or (seccomp is None and pod_seccomp)):
            problems.append(f"{name}: seccompProfile not RuntimeDefault")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            problems.append(f"{name}: capabilities not dropping ALL")
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            problems.append(f"{name}: capabilities added")
    return problems


def level(spec: Mapping[str, Any]) -> str:
    """The strictest Pod Security level a pod spec meets."""
    if baseline_problems(spec):
        return "privileged"
    if restricted_problems(spec):
        return "baseline"
    return "restricted"


def strictest(levels: list[str]) -> str:
    """The strictest level every one of these pods meets (the weakest of their levels)."""
    return min(levels, key=LEVELS.index) if levels else "restricted"


def pod_specs(body: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Every pod spec inside a workload object: Deployment, Job, StatefulSet, JobSet, LWS."""
    spec = body.get("spec") or {}
    kind = body.get("kind")
    if kind in ("Deployment", "StatefulSet", "Job", "DaemonSet", "ReplicaSet"):
        yield (spec.get("template") or {}).get("spec") or {}
    elif kind == "JobSet":
        for job in spec.get("replicatedJobs") or []:
            yield ((job.get("template") or {}).get("spec") or {}).get("template", {}).get("spec") or {}
    elif kind == "LeaderWorkerSet":
        template = spec.get("leaderWorkerTemplate") or {}
        for part in ("leaderTemplate", "workerTemplate"):
            if template.get(part):
                yield template[part].get("spec") or {}
    elif kind == "Pod":
        yield spec


def namespace_labels(enforce: str) -> dict[str, str]:
    """Pod Security labels for a namespace the program creates: enforce what its pods meet, and
    warn and audit at restricted so that every step short of it is visible."""
    if enforce not in LEVELS:
        raise ValueError(f"{enforce!r} is not a Pod Security level: {LEVELS}")
    return {ENFORCE: enforce, WARN: "restricted", AUDIT: "restricted"}


# The strictest level the pods of each kind of namespace meet today (tests/test_pod_security.py
# checks every generated pod against it). Serving pods run images that need root or write their
# own filesystem (vLLM TPU, Saxml, JetStream/Pathways), so baseline; the slice controller and the
# metrics adapter meet restricted.
SERVING = "baseline"
SLICE_CONTROLLER = "restricted"
METRICS_ADAPTER = "restricted"


# What every container gets unless it sets its own context. No container may gain privileges
# or leave the runtime's default seccomp profile. CPU containers drop every capability; TPU
# containers drop NET_RAW only, as GKE Autopilot does for every pod, TPU serving included
# (cloud.google.com/kubernetes-engine/docs/concepts/autopilot-security): whether the TPU runtime
# (libtpu, Ray) tolerates dropping the rest can only be shown on a real TPU node.
TPU_RESOURCE = "google.com/tpu"


def container_context(container: Mapping[str, Any]) -> dict[str, Any]:
    resources = container.get("resources") or {}
    tpu = any(TPU_RESOURCE in (resources.get(kind) or {}) for kind in ("requests", "limits"))
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["NET_RAW"] if tpu else ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def harden(spec: dict[str, Any], *, api_access: bool = False) -> dict[str, Any]:
    """Give each container of a pod spec without a security context the default above, and mount
    a ServiceAccount token only for a pod that calls the Kubernetes API. Returns `spec`."""
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            container.setdefault("securityContext", container_context(container))
    spec["automountServiceAccountToken"] = api_access
    return spec
