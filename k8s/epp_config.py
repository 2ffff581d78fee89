"""The endpoint picker's plugin configuration, ordered the way its loader needs (no Pulumi).

llm-d-router v0.9.0 builds plugins strictly in list order (pkg/epp/config/loader/configloader.go,
`instantiatePlugins`), and a plugin whose factory names another one looks it up at once: the
disaggregation handler fails with `deciders.prefill plugin not found` when its decider comes
later (pkg/epp/framework/plugins/.../profilehandler/disagg/disagg_profile_handler.go; the
plugin README says deciders must be "declared earlier", as deploy/config/pd-epp-config.yaml
does). So the list is not written in an order: it is sorted, each plugin after every plugin
its parameters name, and a name that is not declared is an error here, not at pod start.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

API_VERSION = "llm-d.ai/v1alpha1"
KIND = "EndpointPickerConfig"


@dataclass(frozen=True)
class Plugin:
    type: str
    parameters: Mapping[str, Any] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return {"type": self.type, **({"parameters": dict(self.parameters)} if self.parameters else {})}


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, Mapping):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list | tuple):
        for value in node:
            yield from _strings(value)


def references(plugin: Plugin, declared: set[str]) -> list[str]:
    """The other plugins a plugin's parameters name (its factory looks them up when it is built)."""
    return sorted({s for s in _strings(plugin.parameters) if s in declared and s != plugin.type})


def ordered(plugins: Sequence[Plugin]) -> list[Plugin]:
    """Every plugin after the plugins it names; otherwise the given order. Cycles are refused."""
    declared = {p.type for p in plugins}
    by_type = {p.type: p for p in plugins}
    done: list[Plugin] = []
    placed: set[str] = set()

    def place(plugin: Plugin, path: tuple[str, ...]) -> None:
        if plugin.type in placed:
            return
        if plugin.type in path:
            raise ValueError(f"endpoint-picker plugins name each other in a cycle: {' -> '.join((*path, plugin.type))}")
        for name in references(plugin, declared):
            place(by_type[name], (*path, plugin.type))
        placed.add(plugin.type)
        done.append(plugin)

    for plugin in plugins:
        place(plugin, ())
    return done


def config(plugins: Sequence[Plugin], profiles: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The EndpointPickerConfig document; every profile's pluginRef must name a declared plugin."""
    declared = {p.type for p in plugins}
    for profile in profiles:
        for ref in profile.get("plugins", []):
            if ref["pluginRef"] not in declared:
                raise ValueError(f"scheduling profile {profile['name']!r} names undeclared plugin {ref['pluginRef']!r}")
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "plugins": [p.body() for p in ordered(plugins)],
        "schedulingProfiles": [dict(p) for p in profiles],
    }


def load_order_problems(document: Mapping[str, Any]) -> list[str]:
    """What the loader would refuse: a plugin's parameters or a profile naming a plugin not yet built."""
    built: set[str] = set()
    declared = {p["type"] for p in document.get("plugins", [])}
    problems = []
    for entry in document.get("plugins", []):
        plugin = Plugin(entry["type"], entry.get("parameters") or {})
        for name in references(plugin, declared):
            if name not in built:
                problems.append(f"{plugin.type}: {name} plugin not found (declared later)")
        built.add(plugin.type)
    for profile in document.get("schedulingProfiles", []):
        for ref in profile.get("plugins", []):
            if ref["pluginRef"] not in built:
                problems.append(f"profile {profile['name']}: {ref['pluginRef']} plugin not found")
    return problems
