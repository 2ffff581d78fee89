"""Who reaches which port: the networking.k8s.io/v1 NetworkPolicy semantics over the plan's objects.

A model, not the enforcer (the enforcer is GKE Dataplane V2, which nothing here can run): it
expands every workload into the pods its controller would create, with the labels that
controller adds (the LWS, JobSet and Job label names are in contracts/network_policies.py), and
evaluates ingress by the rules of the API reference (NetworkPolicySpec, NetworkPolicyPeer):

- a pod selected by no policy with `Ingress` in its types accepts everything;
- otherwise a connection is allowed when one rule of one selecting policy admits its source
  (a bare `podSelector` means the policy's namespace; `namespaceSelector` with `podSelector`
  both must match; `ipBlock` takes the source address minus `except`) and its port (no `ports`
  means all; a number matches the container port; a name resolves against the target's ports).

Pods get addresses inside the pod range; outside sources get theirs, so `ipBlock` rules decide
as they would on the cluster.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contracts import network_policies as np

NAMESPACE_LABEL = np.NAMESPACE_NAME_LABEL


@dataclass(frozen=True)
class Pod:
    """A pod the controllers would create. `role` names its kind for the tables ("vllm-prefill
    leader"); `group` tells the pods of one LWS group or JobSet child Job apart."""

    namespace: str
    role: str
    group: int | None
    labels: Mapping[str, str]
    ports: Mapping[int, str] = field(default_factory=dict)  # number -> name ("" when unnamed)
    address: str = ""

    @property
    def name(self) -> str:
        return self.role if self.group is None else f"{self.role}#{self.group}"


def _ports(spec: Mapping[str, Any]) -> dict[int, str]:
    found: dict[int, str] = {}
    sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    for container in [*(spec.get("containers") or []), *sidecars]:
        for port in container.get("ports") or []:
            found[int(port["containerPort"])] = port.get("name", "")
    return found


def _template(spec: Mapping[str, Any]) -> tuple[dict[str, str], Mapping[str, Any]]:
    return dict((spec.get("metadata") or {}).get("labels") or {}), spec.get("spec") or {}


def pods_of(body: Mapping[str, Any]) -> Iterator[Pod]:
    """The pods a workload object stands for, labelled as their controllers label them."""
    meta = body.get("metadata") or {}
    name, namespace, spec = meta.get("name", ""), meta.get("namespace", ""), body.get("spec") or {}
    kind = body.get("kind")
    if kind == "Deployment":
        labels, pod = _template(spec.get("template") or {})
        yield Pod(namespace, name, None, labels, _ports(pod))
    elif kind == "Job":
        labels, pod = _template(spec.get("template") or {})
        yield Pod(namespace, name, None, {**labels, np.JOB_NAME_LABEL: name, "job-name": name}, _ports(pod))
    elif kind == "JobSet":
        for job in spec.get("replicatedJobs") or []:
            job_spec = (job.get("template") or {}).get("spec") or {}
            labels, pod = _template(job_spec.get("template") or {})
            for index in range(int(job.get("replicas", 1))):
                added = {
                    np.JOBSET_NAME_LABEL: name,
                    "jobset.sigs.k8s.io/replicatedjob-name": job["name"],
                    np.JOBSET_JOB_INDEX_LABEL: str(index),
                }
                for _ in range(int(job_spec.get("parallelism", 1))):
                    yield Pod(namespace, f"{name}/{job['name']}", index, {**labels, **added}, _ports(pod))
    elif kind == "LeaderWorkerSet":
        template = spec.get("leaderWorkerTemplate") or {}
        for index in range(int(spec.get("replicas", 1))):
            added = {np.LWS_NAME_LABEL: name, np.LWS_GROUP_INDEX_LABEL: str(index)}
            # The leader, then size-1 workers (a missing workerTemplate means the leader's).
            size = int(template.get("size", 1))
            leader = template.get("leaderTemplate") or template.get("workerTemplate") or {}
            worker = template.get("workerTemplate") or leader
            for role, part, count in (("leader", leader, 1), ("worker", worker, size - 1)):
                labels, pod = _template(part)
                for _ in range(count):
                    yield Pod(namespace, f"{name} {role}", index, {**labels, **added}, _ports(pod))


def _matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    if selector is None:
        return False
    if set(selector) - {"matchLabels"}:
        raise NotImplementedError(f"selector {selector}: only matchLabels is modelled")
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def _in_block(address: str, block: Mapping[str, Any]) -> bool:
    ip = ipaddress.ip_address(address)
    if ip not in ipaddress.ip_network(block["cidr"]):
        return False
    return not any(ip in ipaddress.ip_network(e) for e in block.get("except") or [])


def _peer_admits(peer: Mapping[str, Any], policy_namespace: str, source: Pod) -> bool:
    if "ipBlock" in peer:
        return _in_block(source.address, peer["ipBlock"])
    if "namespaceSelector" in peer:
        if not source.namespace or not _matches(peer["namespaceSelector"], {NAMESPACE_LABEL: source.namespace}):
            return False
        return _matches(peer.get("podSelector") or {}, source.labels)
    # A bare podSelector selects pods in the policy's own namespace.
    return source.namespace == policy_namespace and _matches(peer["podSelector"], source.labels)


def _port_admits(rule_ports: Iterable[Mapping[str, Any]] | None, port: int, target: Pod) -> bool:
    if not rule_ports:
        return True
    for entry in rule_ports:
        if entry.get("protocol", "TCP") != "TCP":
            continue
        wanted = entry.get("port")
        if wanted is None or wanted == port or (isinstance(wanted, str) and target.ports.get(port) == wanted):
            return True
    return False


def allowed(policies: Iterable[Mapping[str, Any]], source: Pod, target: Pod, port: int) -> bool:
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == target.namespace
        and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
        and (p["spec"]["podSelector"] == {} or _matches(p["spec"]["podSelector"], target.labels))
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            peers = rule.get("from")
            admitted = not peers or any(_peer_admits(peer, target.namespace, source) for peer in peers)
            if admitted and _port_admits(rule.get("ports"), port, target):
                return True
    return False


def address_pods(pods: list[Pod], pod_cidr: str) -> list[Pod]:
    """Give each pod its own address in the pod range."""
    hosts = ipaddress.ip_network(pod_cidr).hosts()
    return [Pod(p.namespace, p.role, p.group, p.labels, p.ports, str(next(hosts))) for p in pods]


def reachable(policies: Sequence[Mapping[str, Any]], sources: Sequence[Pod], targets: Sequence[Pod]) -> set[str]:
    """Every allowed (source, target, port) as "source -> target:port", with groups shown as
    `same group` / `other group` when both sides belong to groups of one workload."""
    found = set()
    for target in targets:
        for source in sources:
            if source is target:
                continue
            for port in sorted(target.ports):
                if allowed(policies, source, target, port):
                    found.add(f"{_relation(source, target)} -> {target.role}:{port}")
    return found


def _workload(role: str) -> str:
    return role.rsplit(" ", 1)[0]


def _relation(source: Pod, target: Pod) -> str:
    if source.group is not None and target.group is not None and _workload(source.role) == _workload(target.role):
        return f"{source.role} ({'same' if source.group == target.group else 'other'} group)"
    return source.role
