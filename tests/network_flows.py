"""The network flows the running system makes, read from their one source: docs/architecture.md,
"Network flows".

That section holds two tables. The first lists every flow the program's NetworkPolicies admit:
source, destination, ports, the policy that admits it, and why; the second, flows that must stay
refused. A source or destination is a pod role as `tests/network_reachability.py` names them
("vllm-prefill leader"), optionally with "(same group)" or "(other group)", or one of the sources
below that are not the program's pods, as GKE presents them. A row counts for a stack where both
its ends exist in that stack, so one table serves every stack.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from contracts import network_policies as np
from tests.network_reachability import Pod

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
SECTION = "## Network flows"
GROUP_SUFFIX = re.compile(r" \((same|other) group\)$")


@dataclass(frozen=True)
class Flow:
    """One row of a flow table. `policy` is empty in the refused table; `<i>` in it stands for the
    group index of a per-group policy."""

    source: str
    destination: str
    ports: tuple[int, ...]
    policy: str
    why: str

    def lines(self) -> set[str]:
        """The row as the reachability functions name a flow: "source -> destination:port"."""
        return {f"{self.source} -> {self.destination}:{port}" for port in self.ports}


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _name(cell: str) -> str:
    if not (cell.startswith("`") and cell.endswith("`")):
        raise ValueError(f"{DOC.name}: {cell!r} is not a `name`")
    return cell.strip("`")


def _tables(text: str) -> list[list[list[str]]]:
    """The Markdown tables of the flows section, each as its body rows' cells."""
    if SECTION not in text:
        raise ValueError(f"{DOC.name} has no {SECTION!r} section")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    tables: list[list[list[str]]] = []
    current: list[list[str]] | None = None
    for line in section.splitlines():
        if not line.startswith("|"):
            current = None
            continue
        if current is None:
            current = []
            tables.append(current)
            continue  # the header
        if set(line) <= set("|-: "):
            continue  # the separator
        current.append(_cells(line))
    return tables


def read(text: str | None = None) -> tuple[list[Flow], list[Flow]]:
    """The admitted flows and the refused ones."""
    tables = _tables(DOC.read_text(encoding="utf-8") if text is None else text)
    if len(tables) != 2:
        raise ValueError(f"{DOC.name} {SECTION}: expected 2 tables (admitted, refused), found {len(tables)}")
    admitted = [Flow(_name(s), _name(d), _ports(p), _name(policy), why) for s, d, p, policy, why in tables[0]]
    refused = [Flow(_name(s), _name(d), _ports(p), "", why) for s, d, p, why in tables[1]]
    return admitted, refused


def _ports(cell: str) -> tuple[int, ...]:
    return tuple(int(port) for port in cell.split(","))


def outside_sources(pod_cidr: str, proxy_cidr: str, serving_namespace: str) -> list[Pod]:
    """The sources that are not the program's pods, as GKE presents them (the list in the section)."""
    pods = ipaddress.ip_network(pod_cidr)
    return [
        Pod("", "gateway proxy", None, {}, address=str(ipaddress.ip_network(proxy_cidr)[5])),
        Pod("", "health checker", None, {}, address="35.191.0.10"),
        Pod("", "outside the pod range", None, {}, address="203.0.113.7"),
        Pod(np.GMP_NAMESPACE, "prometheus", None, dict(np.GMP_COLLECTOR), address=str(pods[-2])),
        Pod("default", "pod of another namespace", None, {"app": "x"}, address=str(pods[-3])),
        Pod(serving_namespace, "unlabelled pod", None, {}, address=str(pods[-4])),
        # The control plane's calls to webhooks and aggregated APIs on GKE (contracts/network_policies.py).
        Pod(np.KONNECTIVITY_NAMESPACE, "konnectivity agent", None, dict(np.KONNECTIVITY_AGENT), address=str(pods[-5])),
    ]


def role_of(end: str) -> str:
    """A table end without its group relation: the pod role or outside source it names."""
    return GROUP_SUFFIX.sub("", end)


def applies(flow: Flow, roles: Iterable[str]) -> bool:
    """Whether both ends of `flow` exist among `roles` (a stack's pod roles and outside sources)."""
    present = set(roles)
    return role_of(flow.source) in present and role_of(flow.destination) in present


def expected(flows: Sequence[Flow], roles: Iterable[str]) -> set[str]:
    """The flows of the table that apply to a stack with `roles`, one line per port."""
    present = set(roles)
    return {line for flow in flows if applies(flow, present) for line in flow.lines()}
