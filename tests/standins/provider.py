"""The part of a stand-in resource provider that does not depend on what it provisions.

It answers the engine's calls the way a provider that keeps no remote state would: Check
accepts the inputs, Diff compares them with the recorded state, Create/Update return the inputs
plus whatever `compute` adds, Read returns the state it is given, Delete succeeds. What it
cannot show, for any stand-in built on it: a real provider's input validation and defaults,
which fields force a replacement, and anything the real API would refuse or change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import grpc
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime.proto import plugin_pb2, provider_pb2, provider_pb2_grpc

from tests.standins.serve import plugin_main

Compute = Callable[[str, str, dict[str, Any]], tuple[str, dict[str, Any]]]
Invoke = Callable[[str, dict[str, Any]], dict[str, Any]]


def to_dict(value: struct_pb2.Struct) -> dict[str, Any]:
    return json_format.MessageToDict(value)


def to_struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    result = struct_pb2.Struct()
    result.update(dict(value))
    return result


def resource_type(urn: str) -> str:
    # urn:pulumi:<stack>::<project>::<parent types$>type::name
    return urn.split("::", 3)[2].rsplit("$", maxsplit=1)[-1]


def resource_name(urn: str) -> str:
    return urn.rsplit("::", 1)[1]


def _at(node: Any, path: str) -> tuple[bool, Any]:
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def changed_paths(olds: Mapping[str, Any], news: Mapping[str, Any], tracked: frozenset[str] = frozenset()) -> list[str]:
    """Where the desired inputs differ from the recorded state, as a bridged provider sees it.

    A value the program sets is compared with the state, field by field; a field the program
    leaves out is not (Optional+Computed in Terraform terms: the cloud may fill it in), except
    the `tracked` paths, where a value the cloud reported back and the program does not set
    reads as a removal (Optional, not Computed).
    """
    found: list[str] = []

    def walk(old: Any, new: Any, prefix: str) -> None:
        if isinstance(new, dict) and isinstance(old, dict):
            for key, value in new.items():
                walk(old.get(key), value, f"{prefix}{key}.")
            return
        if old != new:
            found.append(prefix.rstrip("."))

    walk(dict(olds), dict(news), "")
    for path in sorted(tracked):
        in_old, _ = _at(olds, path)
        in_new, _ = _at(news, path)
        if in_old and not in_new:
            found.append(path)
    return sorted(set(found))


class StandInProvider(provider_pb2_grpc.ResourceProviderServicer):
    def __init__(
        self,
        version: str,
        compute: Compute,
        invoke: Invoke | None = None,
        tracked: Mapping[str, frozenset[str]] | None = None,
        force_new: Mapping[str, frozenset[str]] | None = None,
    ):
        self.version = version
        self.compute = compute
        self.invoke = invoke
        self.tracked = tracked or {}  # per resource type: fields the cloud reports back, not Computed
        self.force_new = force_new or {}  # per resource type: fields whose change replaces the resource

    def Handshake(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC names
        return provider_pb2.ProviderHandshakeResponse(accept_secrets=True, accept_resources=True)

    def GetPluginInfo(self, request: Any, context: Any) -> Any:  # noqa: N802
        return plugin_pb2.PluginInfo(version=self.version)

    def CheckConfig(self, request: Any, context: Any) -> Any:  # noqa: N802
        return provider_pb2.CheckResponse(inputs=request.news)

    def DiffConfig(self, request: Any, context: Any) -> Any:  # noqa: N802
        return provider_pb2.DiffResponse(changes=provider_pb2.DiffResponse.DIFF_NONE)

    def Configure(self, request: Any, context: Any) -> Any:  # noqa: N802
        return provider_pb2.ConfigureResponse(acceptSecrets=True, supportsPreview=True, acceptResources=True)

    def Check(self, request: Any, context: Any) -> Any:  # noqa: N802
        return provider_pb2.CheckResponse(inputs=request.news)

    def Diff(self, request: Any, context: Any) -> Any:  # noqa: N802
        token = request.type or resource_type(request.urn)
        olds, news = to_dict(request.olds), to_dict(request.news)
        ignored = tuple(request.ignoreChanges)
        changed = [
            path
            for path in changed_paths(olds, news, self.tracked.get(token, frozenset()))
            if not any(path == i or path.startswith(i + ".") for i in ignored)
        ]
        changed += sorted(k for k in to_dict(request.old_inputs) if k not in news and k not in ignored)
        if not changed:
            return provider_pb2.DiffResponse(changes=provider_pb2.DiffResponse.DIFF_NONE)
        force_new = self.force_new.get(token, frozenset())
        replaces = sorted({p for p in changed if any(p == f or p.startswith(f + ".") for f in force_new)})
        top = sorted({p.split(".")[0] for p in changed})
        return provider_pb2.DiffResponse(
            changes=provider_pb2.DiffResponse.DIFF_SOME, diffs=top, replaces=sorted({p.split(".")[0] for p in replaces})
        )

    def Create(self, request: Any, context: Any) -> Any:  # noqa: N802
        inputs = to_dict(request.properties)
        if request.preview:
            return provider_pb2.CreateResponse(properties=request.properties)
        token = request.type or resource_type(request.urn)
        resource_id, state = self.compute(token, request.name or resource_name(request.urn), inputs)
        return provider_pb2.CreateResponse(id=resource_id, properties=to_struct(state))

    def Read(self, request: Any, context: Any) -> Any:  # noqa: N802
        return provider_pb2.ReadResponse(id=request.id, properties=request.properties, inputs=request.inputs)

    def Update(self, request: Any, context: Any) -> Any:  # noqa: N802
        if request.preview:
            return provider_pb2.UpdateResponse(properties=request.news)
        token = request.type or resource_type(request.urn)
        _, state = self.compute(token, request.name or resource_name(request.urn), to_dict(request.news))
        return provider_pb2.UpdateResponse(properties=to_struct(state))

    def Delete(self, request: Any, context: Any) -> Any:  # noqa: N802
        return empty_pb2.Empty()

    def Invoke(self, request: Any, context: Any) -> Any:  # noqa: N802
        invoke = self.invoke
        if invoke is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, f"this stand-in answers no invoke ({request.tok})")
            raise AssertionError("abort raises")
        try:
            answer = invoke(request.tok, to_dict(request.args))
        except NotImplementedError as err:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, str(err))
        return provider_pb2.InvokeResponse(**{"return": to_struct(answer)})

    def Cancel(self, request: Any, context: Any) -> Any:  # noqa: N802
        return empty_pb2.Empty()


def run(provider: StandInProvider) -> None:
    plugin_main(lambda server: provider_pb2_grpc.add_ResourceProviderServicer_to_server(provider, server))
