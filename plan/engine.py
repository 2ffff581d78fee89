"""Run this Pulumi program under the SDK's mock runtime and record what it registers.

One engine serves both the offline plan (`python -m plan`) and the test suite:
it executes the real `__main__.py` with a stack's configuration, answers the
few values only a cloud would know (an endpoint, a project number) with
documented placeholders, and records every resource with its inputs, parent,
provider and dependencies. In preview mode those cloud-computed values stay
unknown, as they are for a brand-new stack in `pulumi preview`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import runpy
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.output import Unknown
from pulumi.runtime import mocks as runtime_mocks
from pulumi.runtime import rpc
from pulumi.runtime import settings as runtime_settings
from pulumi.runtime.proto import resource_pb2
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from domain import reservation_health
from domain.gke_versions import version_key as gke_version_key
from settings import esc_environment
from settings.stack_file import StackFileError
from settings.stack_file import read_merged as read_merged_stack_file

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "__main__.py"
PROJECT = "tpu-slicing"
SECRET_PLACEHOLDER = esc_environment.SECRET_PLACEHOLDER
UNKNOWN_PLACEHOLDER = "(known after apply)"

# Values only the cloud knows, answered in apply mode. RFC 5737 documentation
# addresses make it obvious in any output that they are not real.
PLACEHOLDER_ENDPOINT = "203.0.113.10"
PLACEHOLDER_CA = base64.b64encode(b"placeholder-cluster-ca").decode()
PLACEHOLDER_PROJECT_NUMBER = "123456789012"
PLACEHOLDER_GATEWAY_IP = "203.0.113.20"
PLACEHOLDER_LOAD_BALANCER_IP = "203.0.113.30"
# What getEngineVersions answers offline: made-up builds, newest first, above the slice
# controller's floors so that the offline plan exercises the same choice as a real preview.

PLACEHOLDER_CHANNEL_DEFAULTS = {
    "RAPID": "1.36.2-gke.9000000",
    "REGULAR": "1.35.2-gke.1842000",
    "STABLE": "1.34.6-gke.1000000",
}
# Each channel's valid versions, newest first, as GetServerConfig lists them (`channels[].validVersions`).
PLACEHOLDER_CHANNEL_VERSIONS = {
    "RAPID": ["1.37.0-gke.1000000", "1.36.2-gke.9000000", "1.36.0-gke.3712000", "1.35.2-gke.1842000"],
    "REGULAR": ["1.35.2-gke.1842000", "1.34.6-gke.1000000"],
    "STABLE": ["1.34.6-gke.1000000"],
}


@dataclass
class Resource:
    urn: str
    type: str
    name: str
    custom: bool
    remote: bool
    parent: str
    provider: str
    dependencies: list[str]
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    protect: bool = False
    delete_before_replace: bool = False
    ignore_changes: list[str] = field(default_factory=list)
    replace_on_changes: list[str] = field(default_factory=list)

    def get(self, path: str, default: Any = None) -> Any:
        """Input at a dotted camelCase path, e.g. `nodeConfig.reservationAffinity.values`."""
        node: Any = self.inputs
        for part in path.split("."):
            node = _reveal(node)
            if isinstance(node, list) and part.isdigit():
                node = node[int(part)] if int(part) < len(node) else None
            elif isinstance(node, dict):
                node = node.get(part)
            else:
                return default
            if node is None:
                return default
        return unwrap(node)


@dataclass
class StackOutput:
    value: Any
    known: bool
    secret: bool


@dataclass
class PlanResult:
    stack: str
    preview: bool
    resources: list[Resource]
    outputs: dict[str, StackOutput]
    # The bound sub-blocks as the reservation snapshot has them (plan/reservation.py rows); empty when
    # no snapshot was read.
    reservation: list[dict[str, Any]] = field(default_factory=list)

    def of_type(self, type_: str) -> list[Resource]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str, name: str | None = None) -> Resource:
        found = [r for r in self.of_type(type_) if name is None or r.name == name]
        if len(found) != 1:
            raise LookupError(f"expected one {type_} named {name!r}, found {len(found)}")
        return found[0]

    def by_urn(self) -> dict[str, Resource]:
        return {r.urn: r for r in self.resources}

    def depends_on(self, dependent: Resource, dependency: Resource) -> bool:
        """True when `dependent` waits for `dependency`, directly or through other resources.

        Waiting for a component means waiting for all of its children, as the
        engine does; a child also waits for whatever its parents wait for.
        """
        index = self.by_urn()
        children: dict[str, list[str]] = {}
        for r in self.resources:
            children.setdefault(r.parent, []).append(r.urn)

        def expand(urn: str) -> set[str]:
            found = {urn}
            for child in children.get(urn, []):
                found |= expand(child)
            return found

        seen: set[str] = set()
        stack = [dependent.urn]
        while stack:
            urn = stack.pop()
            if urn in seen:
                continue
            seen.add(urn)
            res = index.get(urn)
            if res is None:
                continue
            for dep in res.dependencies:
                stack.extend(expand(dep))
            if res.parent:
                stack.append(res.parent)
        return bool(expand(dependency.urn) & (seen - {dependent.urn}))


def _is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(rpc._special_sig_key) == rpc._special_secret_sig


def _reveal(value: Any) -> Any:
    return value.get("value") if _is_secret(value) else value


def is_secret_input(resource: Resource, path: str) -> bool:
    """True when the input at `path` (or a value containing it) crossed the wire as a secret."""
    node: Any = resource.inputs
    for part in path.split("."):
        if _is_secret(node):
            return True
        if isinstance(node, list) and part.isdigit():
            node = node[int(part)]
        elif isinstance(node, dict):
            node = node.get(part)
        else:
            return False
    return _is_secret(node)


def unwrap(value: Any) -> Any:
    """Strip pulumi's secret wrappers from recorded inputs (for assertions and rendering)."""
    if isinstance(value, dict):
        if _is_secret(value):
            return unwrap(value.get("value"))
        return {k: unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    return value


def mask(value: Any) -> Any:
    """Replace secret values by a placeholder, keeping the rest of the structure."""
    if isinstance(value, Unknown):
        return UNKNOWN_PLACEHOLDER
    if isinstance(value, dict):
        if _is_secret(value):
            return SECRET_PLACEHOLDER
        return {k: mask(v) for k, v in value.items()}
    if isinstance(value, list):
        return [mask(v) for v in value]
    return value


def cloud_state(token: str, name: str, inputs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The id and state a cloud would return on create: the inputs plus what the program reads back.

    Shared by the mock engine and the stand-in GCP provider (`tests/standins/gcp_provider.py`),
    so the offline plan and the real engine see the same placeholders.
    """
    state = dict(inputs)
    if token == "gcp:container/cluster:Cluster":
        state["endpoint"] = PLACEHOLDER_ENDPOINT
        state["masterAuth"] = {"clusterCaCertificate": PLACEHOLDER_CA}
        state.setdefault("location", inputs.get("location"))
    elif token == "gcp:serviceaccount/account:Account":
        email = f"{inputs['accountId']}@{inputs.get('project', 'project')}.iam.gserviceaccount.com"
        state.update(email=email, member=f"serviceAccount:{email}", name=f"projects/-/serviceAccounts/{email}")
    elif token == "gcp:monitoring/dashboard:Dashboard":
        return (f"projects/{PLACEHOLDER_PROJECT_NUMBER}/dashboards/placeholder-{name}", state)
    elif token.startswith("gcp:compute/"):
        state.setdefault("selfLink", f"https://www.googleapis.com/compute/v1/{name}")
    elif token == "kubernetes:core/v1:Service" and (inputs.get("spec") or {}).get("type") == "LoadBalancer":
        state["status"] = {"loadBalancer": {"ingress": [{"ip": PLACEHOLDER_LOAD_BALANCER_IP}]}}
    elif token.startswith("kubernetes:gateway.networking.k8s.io/v1:Gateway"):
        state["status"] = {"addresses": [{"type": "IPAddress", "value": PLACEHOLDER_GATEWAY_IP}]}
    return (f"{name}-id", state)


def engine_versions(
    args: Mapping[str, Any], channels: Mapping[str, Sequence[str]], defaults: Mapping[str, str]
) -> dict[str, Any]:
    """`getEngineVersions` as the data source builds it from GetServerConfig: the version prefix
    filters the location's lists, and each channel's "latest" is its newest valid version with the
    prefix, absent when none has it; the channel's default is not filtered
    (google-beta/services/container/data_source_google_container_engine_versions.go)."""
    prefix = args.get("versionPrefix") or ""
    everything = sorted({v for vs in channels.values() for v in vs}, key=gke_version_key, reverse=True)
    valid = [v for v in everything if v.startswith(prefix)]
    latest = {}
    for channel, versions in channels.items():
        matching = [v for v in versions if v.startswith(prefix)]
        if matching:
            latest[channel] = matching[0]
    return {
        "location": args.get("location"),
        "project": args.get("project"),
        "validMasterVersions": valid,
        "validNodeVersions": valid,
        "latestMasterVersion": valid[0] if valid else "",
        "defaultClusterVersion": defaults.get("REGULAR", ""),
        "releaseChannelDefaultVersion": dict(defaults),
        "releaseChannelLatestVersion": latest,
        "releaseChannelUpgradeTargetVersion": dict(defaults),
        "id": f"projects/{args.get('project')}/locations/{args.get('location')}",
    }


GET_RESERVATION_BLOCK = "gcp:compute/getReservationBlock:getReservationBlock"
GET_RESERVATION_SUB_BLOCK = "gcp:compute/getReservationSubBlock:getReservationSubBlock"


# Invokes answered from their arguments alone.
FIXED_ANSWERS: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "gcp:organizations/getProject:getProject": lambda args: {
        "projectId": args.get("projectId") or "project",
        "number": PLACEHOLDER_PROJECT_NUMBER,
        "name": args.get("projectId") or "project",
    },
    # The offline plan cannot read the bucket: it assumes what the README asks of it (uniform
    # bucket-level access); `pulumi up` reads it before a conditional grant (workloads/bucket_access.py).
    "gcp:storage/getBucket:getBucket": lambda args: {"name": args.get("name"), "uniformBucketLevelAccess": True},
    # The offline plan knows no running pool: the reservation is judged as for a new stack.
    "gcp:container/getCluster:getCluster": lambda args: {
        "name": args.get("name"),
        "location": args.get("location"),
        "nodePools": [],
    },
}


def cloud_invoke(
    token: str, args: Mapping[str, Any], snapshot: reservation_health.Snapshot | None = None
) -> dict[str, Any]:
    """What the cloud answers to the invokes this program makes."""
    # The reservation offline: from the snapshot the user captured (reservation.snapshot or
    # --reservation-snapshot), else a sub-block with no health info, which the program reports as
    # not read (domain/reservation_health.py from_provider) and judges nothing by.
    if token == GET_RESERVATION_BLOCK:
        names = [r.sub_block for r in snapshot.readings] if snapshot is not None else []
        return {"name": args.get("name"), "subBlockNames": names}
    if token == GET_RESERVATION_SUB_BLOCK:
        if snapshot is not None:
            return snapshot.as_provider(str(args.get("name")))
        return {"name": args.get("name")}
    if token in FIXED_ANSWERS:
        return FIXED_ANSWERS[token](args)
    if token == "gcp:container/getEngineVersions:getEngineVersions":
        return engine_versions(args, PLACEHOLDER_CHANNEL_VERSIONS, PLACEHOLDER_CHANNEL_DEFAULTS)
    raise NotImplementedError(f"no placeholder answer for the invoke {token}")


class PlanMocks(pulumi.runtime.Mocks):
    """Echo inputs back as state and add the outputs a real provider would compute."""

    def __init__(self, preview: bool, snapshot: reservation_health.Snapshot | None = None):
        self.preview = preview
        self.snapshot = snapshot

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        if self.preview or not args.custom:
            return (None if self.preview else f"{args.name}-id", dict(args.inputs))
        return cloud_state(args.typ, args.name, args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[Any, Any], list[tuple[str, str]] | None]:
        # An empty failure list: the mock monitor iterates over it.
        return (cloud_invoke(args.token, args.args, self.snapshot), [])


def engine_urn(urn: str) -> str:
    """A URN as the real engine writes it: the root stack is never part of a resource's type chain.

    The SDK's mock monitor builds `...::pulumi:pulumi:Stack$tpu-slicing:infra:Cluster::cluster`
    for a child of the stack; the engine leaves the root stack's type out of the chain
    (pkg/resource/deploy/deployment.go, `generateURN`) and writes `...::tpu-slicing:infra:Cluster::cluster`.
    Found by comparing `pulumi preview --json` with this plan (tests/test_real_engine.py).
    """
    return urn.replace("::pulumi:pulumi:Stack$", "::")


class HookRefusedError(pulumi.RunError):
    """A before_create hook refused a resource: its message, printed alone."""


class RecordingMonitor(runtime_mocks.MockMonitor):
    """A mock monitor that also keeps parent, provider and dependency edges."""

    def __init__(self, mocks: PlanMocks, existing: frozenset[tuple[str, str]] = frozenset()):
        super().__init__(mocks)
        self.preview = mocks.preview
        self.existing = existing  # (type, name) of what already exists: no create, so no hook
        self.refused: list[str] = []  # what before_create hooks refused, in registration order
        self.recorded: list[Resource] = []
        self.real_urns: dict[str, str] = {}  # the mock monitor's URN -> the engine's
        # hook name -> (its callback on the program's callback server, on_dry_run)
        self.hooks: dict[str, tuple[Callable[[bytes], Coroutine[Any, Any, Any]], bool]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None

    def RegisterResourceHook(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
        # Called on the program's event loop, where its settings (the callback server) are in context
        # and where the hooks run; RegisterResource runs in an executor thread without them.
        callbacks = runtime_settings.SETTINGS.callbacks
        if callbacks is not None:
            self.hooks[request.name] = (callbacks._callbacks[request.callback.token], bool(request.on_dry_run))
        self.loop = asyncio.get_running_loop()
        return super().RegisterResourceHook(request)

    def _before_create(self, request: Any) -> None:
        """Run a resource's before_create hooks as the engine does for a create (offline, every
        resource is one): a hook that fails stops the registration with its message
        (pkg/resource/deploy/step_executor.go runs them before the provider's Create)."""
        for name in request.hooks.before_create if request.HasField("hooks") else []:
            callback, on_dry_run = self.hooks[name]
            if (self.preview and not on_dry_run) or self.loop is None:
                continue
            hook_request = resource_pb2.ResourceHookRequest(
                name=request.name, type=request.type, new_inputs=request.object
            )
            answer = asyncio.run_coroutine_threadsafe(callback(hook_request.SerializeToString()), self.loop).result()
            if answer.error:
                # Kept and raised once the program has run (`run`): an exception thrown here, in the
                # SDK's executor thread, would leave the runtime's pending registrations to the next run.
                self.refused.append(answer.error)

    def _real(self, urn: str) -> str:
        """The engine's URN for one the mock monitor made; provider references ("urn::id") too."""
        if urn in self.real_urns:
            return self.real_urns[urn]
        head, sep, tail = urn.rpartition("::")
        if sep and head in self.real_urns:
            return f"{self.real_urns[head]}::{tail}"
        return engine_urn(urn)

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
        if request.custom and (request.type, request.name) not in self.existing:
            self._before_create(request)
        response = super().RegisterResource(request)
        if request.type == "pulumi:pulumi:Stack":
            return response
        # The mock monitor chains only the parent's last type into a child's URN; the engine chains
        # the parent's whole qualified type (pkg/resource/deploy/deployment.go, `generateURN`), so
        # a resource three components deep has another URN. Found by tests/test_real_engine.py.
        parent = self._real(request.parent) if request.parent else ""
        prefix, _, _ = response.urn.rpartition("::")
        stack_project = "::".join(prefix.split("::")[:-1])
        if parent and "::pulumi:pulumi:Stack::" not in parent:
            qualified = f"{parent.split('::')[2]}${request.type}"
        else:
            qualified = request.type
        self.real_urns[response.urn] = engine_urn(f"{stack_project}::{qualified}::{request.name}")
        inputs = rpc.deserialize_properties(request.object)
        registered = self.resources[response.urn]
        self.recorded.append(
            Resource(
                urn=self.real_urns[response.urn],
                type=request.type,
                name=request.name,
                custom=bool(request.custom),
                remote=bool(request.remote),
                parent=parent,
                provider=self._real(request.provider) if request.provider else "",
                dependencies=[self._real(dep) for dep in request.dependencies],
                inputs=dict(inputs),
                outputs=dict(registered.state),
                protect=bool(request.protect),
                delete_before_replace=bool(request.deleteBeforeReplace),
                ignore_changes=list(request.ignoreChanges),
                replace_on_changes=list(request.replaceOnChanges),
            )
        )
        return response


def stack_file(stack: str, root: Path = ROOT) -> Path:
    return root / f"Pulumi.{stack}.yaml"


def read_stack_config(path: Path, opened: Mapping[str, Path] | None = None) -> tuple[dict[str, Any], list[str]]:
    """Config of a stack file as the engine hands it to programs: structured values as JSON.

    Read as the CLI reads it (settings/stack_file.py: YAML 1.2, duplicate keys refused, bare keys
    in the project's namespace), with the ESC environments it imports merged in from `opened`
    (default: $TPU_SLICING_ESC_VALUES, settings/esc_environment.py). Encrypted (`secure:`) values
    cannot be read offline; they become a placeholder that keeps their key secret, which is all the
    plan needs, as an environment's secret does.
    """
    if opened is None:
        try:
            opened = esc_environment.locations_from(os.environ)
        except esc_environment.EscValuesError as err:
            raise StackFileError(f"{path.name}: {err}") from None
    merged = read_merged_stack_file(path, PROJECT, opened)
    config: dict[str, Any] = {}
    secret_keys: list[str] = []
    for key, value in merged.config.items():
        if isinstance(value, dict | list):
            config[key] = json.dumps(value, default=str)
        else:
            config[key] = value if isinstance(value, str) else json.dumps(value)
        if key in merged.secret_keys:
            secret_keys.append(key)
    return config, secret_keys


def run(
    config: Mapping[str, Any],
    *,
    stack: str = "dev",
    secret_keys: Iterable[str] = (),
    preview: bool = False,
    program: Path = PROGRAM,
    snapshot: Path | None = None,
    existing: frozenset[tuple[str, str]] = frozenset(),
) -> PlanResult:
    """Execute the program once under mocks and return everything it registered. `snapshot`: the
    reservation snapshot to answer its reads with, else the stack's reservation.snapshot."""
    read = reservation_snapshot(config, snapshot)
    mocks = PlanMocks(preview, read)
    monitor = RecordingMonitor(mocks, existing)
    runtime_settings.ROOT.set(None)  # a fresh Stack resource, so outputs do not leak between runs
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack, preview=preview, monitor=monitor)
    pulumi.runtime.set_all_config(
        {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}, list(secret_keys)
    )
    try:
        _sync_await(run_pulumi_func(lambda: _execute(program)))
    except Exception as err:
        # Tests use this to prove that bad configuration registers nothing.
        err.registered_resources = list(monitor.recorded)  # type: ignore[attr-defined]
        raise
    if monitor.refused:
        refused = HookRefusedError(monitor.refused[0])
        refused.registered_resources = list(monitor.recorded)  # type: ignore[attr-defined]
        raise refused
    root = runtime_settings.get_root_resource()
    exported: dict[str, Any] = dict(getattr(root, "outputs", {}) or {})
    outputs = {name: _sync_await(_resolve(value)) for name, value in exported.items()}
    rows = reservation_rows(config, read)
    return PlanResult(stack=stack, preview=preview, resources=monitor.recorded, outputs=outputs, reservation=rows)


def reservation_rows(config: Mapping[str, Any], read: reservation_health.Snapshot | None) -> list[dict[str, Any]]:
    """What the plan shows of the reservation: each bound sub-block (every one of the block when the
    pools bind the whole block) as the snapshot has it."""
    if read is None:
        return []
    raw = config.get(f"{PROJECT}:reservation")
    reservation = json.loads(raw) if isinstance(raw, str) else raw
    bound = list((reservation or {}).get("subBlocks") or [r.sub_block for r in read.readings])
    return [reservation_health.row(read.reading(name)) for name in bound]


def reservation_snapshot(config: Mapping[str, Any], override: Path | None = None) -> reservation_health.Snapshot | None:
    """The snapshot the stack's reservation is read from offline: `override`, else the stack's
    `reservation.snapshot` (relative to the project). Refused in one line (SnapshotError) when it
    cannot be read or is of another reservation or block."""
    raw = config.get(f"{PROJECT}:reservation")
    reservation = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(reservation, Mapping) or not reservation.get("block"):
        return None
    path = override or (ROOT / str(reservation["snapshot"]) if reservation.get("snapshot") else None)
    if path is None:
        return None
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise reservation_health.SnapshotError(
            f"reservation snapshot {path}: cannot be read ({err.__class__.__name__}); capture it with gcloud "
            f"compute reservations sub-blocks list {reservation.get('name')} --block-name={reservation['block']} "
            "--zone=<zone> --format=json"
        ) from None
    return reservation_health.read_snapshot(text, str(path), str(reservation.get("name")), str(reservation["block"]))


def _execute(program: Path) -> None:
    runpy.run_path(str(program), run_name="__main__")


def run_stack(stack: str, *, preview: bool = False, root: Path = ROOT) -> PlanResult:
    config, secret_keys = read_stack_config(stack_file(stack, root))
    return run(config, stack=stack, secret_keys=secret_keys, preview=preview)


async def _resolve(value: Any) -> StackOutput:
    output = pulumi.Output.from_input(value)
    known, secret = await asyncio.gather(output.is_known(), output.is_secret())
    resolved = await output.future(with_unknowns=True) if known else None
    return StackOutput(value=resolved, known=known, secret=secret)
