"""The stack's dependency picture: components as groups, resources as nodes, dependencies as edges."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from plan.engine import PlanResult, Resource

_ID = re.compile(r"[^A-Za-z0-9_]")


def _node_id(resource: Resource) -> str:
    """Short, stable ids: c_<component> for groups, r_<component>_<kind>_<name> for resources."""
    owner = resource.urn.split("::")[-2].split("$")
    kind = resource.type.split(":")[-1]
    if not resource.custom:
        return "c_" + _ID.sub("_", resource.name)
    parent = owner[-2].split(":")[-1] if len(owner) > 1 else "stack"
    return "r_" + _ID.sub("_", f"{parent}_{kind}_{resource.name}")


def _label(resource: Resource) -> str:
    kind = resource.type.split(":")[-1]
    return f"{kind}<br/>{resource.name}"


def edges(result: PlanResult) -> list[tuple[Resource, Resource]]:
    """(dependent, dependency) pairs; a dependency on every resource of a component is drawn
    as one edge to the component, which is how the program states it."""
    by_urn = result.by_urn()
    children: dict[str, list[str]] = {}
    for resource in result.resources:
        children.setdefault(resource.parent, []).append(resource.urn)

    def descendants(urn: str) -> set[str]:
        found: set[str] = set()
        for child in children.get(urn, []):
            found |= {child} if by_urn[child].custom else set()
            found |= descendants(child)
        return found

    def depth(urn: str) -> int:
        return 0 if urn not in by_urn else 1 + depth(by_urn[urn].parent)

    components = sorted((r for r in result.resources if not r.custom), key=lambda r: (depth(r.urn), r.urn))
    groups = [(c.urn, descendants(c.urn)) for c in components]
    pairs = set()
    for resource in result.resources:
        deps = {d for d in resource.dependencies if d in by_urn and d != resource.urn}
        for component, members in groups:
            if members and members <= deps and resource.urn not in members:
                deps = (deps - members) | {component}
        pairs |= {(resource.urn, d) for d in deps}
    return [(by_urn[a], by_urn[b]) for a, b in sorted(pairs)]


def mermaid(result: PlanResult) -> str:
    """Mermaid `flowchart`: renders in GitHub READMEs and pull-request comments."""
    by_urn = result.by_urn()
    children: dict[str, list[Resource]] = {}
    for resource in result.resources:
        children.setdefault(resource.parent, []).append(resource)
    lines = ["flowchart LR"]

    def emit(resource: Resource, depth: int) -> None:
        pad = "  " * depth
        kids = sorted(children.get(resource.urn, []), key=lambda r: (r.type, r.name))
        if not resource.custom:
            lines.append(f'{pad}subgraph {_node_id(resource)}["{resource.type.split(":")[-1]} {resource.name}"]')
            for kid in kids:
                emit(kid, depth + 1)
            lines.append(f"{pad}end")
        else:
            lines.append(f'{pad}{_node_id(resource)}["{_label(resource)}"]')

    roots = [r for r in result.resources if r.parent not in by_urn]
    for root in sorted(roots, key=lambda r: (r.type, r.name)):
        emit(root, 1)
    for dependent, dependency in edges(result):
        lines.append(f"  {_node_id(dependent)} --> {_node_id(dependency)}")
    return "\n".join(lines) + "\n"


def dot(result: PlanResult) -> str:
    """Graphviz DOT of the same graph, for an SVG or PNG rendering."""
    by_urn = result.by_urn()
    children: dict[str, list[Resource]] = {}
    for resource in result.resources:
        children.setdefault(resource.parent, []).append(resource)
    lines = [
        "digraph stack {",
        "  rankdir=LR;",
        "  compound=true;",
        '  node [shape=box, fontname="Helvetica", fontsize=10];',
    ]

    def emit(resource: Resource, depth: int) -> None:
        pad = "  " * depth
        if not resource.custom:
            lines.append(f"{pad}subgraph cluster_{_node_id(resource)} {{")
            lines.append(f'{pad}  label="{resource.type.split(":")[-1]} {resource.name}";')
            lines.append(f"{pad}  {_node_id(resource)} [shape=point, style=invis];")
            for kid in sorted(children.get(resource.urn, []), key=lambda r: (r.type, r.name)):
                emit(kid, depth + 1)
            lines.append(f"{pad}}}")
        else:
            label = _label(resource).replace("<br/>", "\\n")
            lines.append(f'{pad}{_node_id(resource)} [label="{label}"];')

    for root in sorted((r for r in result.resources if r.parent not in by_urn), key=lambda r: (r.type, r.name)):
        emit(root, 1)
    for dependent, dependency in edges(result):
        # An edge to a component ends at its cluster's border.
        head = "" if dependency.custom else f" [lhead=cluster_{_node_id(dependency)}]"
        lines.append(f"  {_node_id(dependent)} -> {_node_id(dependency)}{head};")
    lines.append("}")
    return "\n".join(lines) + "\n"


class RenderError(RuntimeError):
    pass


def render_image(dot_source: str, target: Path) -> bool:
    """Render with Graphviz's `dot` when it is installed; False when it is not, RenderError (one
    line, dot's own words) when it fails, e.g. on a format it does not know."""
    binary = shutil.which("dot")
    if binary is None:
        return False
    fmt = target.suffix.lstrip(".") or "svg"
    done = subprocess.run(
        [binary, f"-T{fmt}", "-o", str(target)], input=dot_source, text=True, capture_output=True, check=False
    )
    if done.returncode:
        raise RenderError(f"Graphviz dot failed: {' '.join(done.stderr.split())[:400]}")
    return True
