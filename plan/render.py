"""Text rendering of a plan: the resource tree, capacity, workloads and outputs."""

from __future__ import annotations

import json
from typing import Any

from domain import admission, reservation_health
from domain.topology import GIB, Topology
from plan import cost, scaling, timing
from plan.engine import SECRET_PLACEHOLDER, PlanResult, Resource, mask
from settings import capacity
from settings.model import Backend, StackConfig

BANNER = (
    "This is the DESIRED STATE of the stack, computed offline under the Pulumi SDK's mock runtime.\n"
    "It is not a diff against the cloud: nothing was read from or sent to Google Cloud or a cluster.\n"
    "Values only the cloud knows are shown as '(known after apply)' in preview mode, or as RFC 5737\n"
    "placeholders (203.0.113.x) otherwise."
)

# The settings a reviewer looks for first, per resource type (camelCase input paths).
KEY_SETTINGS: dict[str, tuple[str, ...]] = {
    "gcp:projects/service:Service": ("service",),
    "gcp:compute/previewFeature:PreviewFeature": ("name", "activationStatus"),
    "gcp:compute/network:Network": ("name", "mtu", "routingMode", "autoCreateSubnetworks"),
    "gcp:compute/subnetwork:Subnetwork": ("name", "ipCidrRange", "purpose", "role", "privateIpGoogleAccess"),
    "gcp:compute/firewall:Firewall": ("name", "direction", "sourceRanges"),
    "gcp:compute/resourcePolicy:ResourcePolicy": (
        "name",
        "workloadPolicy.type",
        "workloadPolicy.acceleratorTopology",
        "workloadPolicy.acceleratorTopologyMode",
    ),
    "gcp:container/cluster:Cluster": (
        "name",
        "location",
        "minMasterVersion",
        "releaseChannel.channel",
        "deletionProtection",
        "addonsConfig.sliceControllerConfig.enabled",
        "gatewayApiConfig.channel",
        "datapathProvider",
    ),
    "gcp:container/nodePool:NodePool": (
        "name",
        "nodeConfig.machineType",
        "nodeCount",
        "nodeLocations",
        "placementPolicy.policyName",
        "nodeConfig.reservationAffinity.consumeReservationType",
        "nodeConfig.reservationAffinity.values",
    ),
    "gcp:serviceaccount/account:Account": ("accountId",),
    "kubernetes:helm.sh/v3:Release": ("chart", "version", "namespace"),
    "gcp:projects/iAMMember:IAMMember": ("role", "member"),
    "kubernetes:kueue.x-k8s.io/v1beta2:WorkloadPriorityClass": ("metadata.name", "value"),
}


def _short(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # numbers cross the mock RPC boundary as floats
    if isinstance(value, list):
        return "[" + ", ".join(_short(v) for v in value) + "]"
    return str(value)


JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
LWS = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
# Where a TPU workload names its slice shape: the slice controller's annotation (cubes) or the
# node selector of a fixed multi-host slice.
SHAPE_KEYS = ("cloud.google.com/gke-tpu-slice-topology", "cloud.google.com/gke-tpu-topology")
# TPU workloads: what Kueue admits. Their shape, replicas and priority are what cost TPU time.
WORKLOAD_REPLICAS = {JOBSET: "spec.replicatedJobs.0.replicas", LWS: "spec.replicas"}


def _at(inputs: Any, path: str) -> Any:
    node = inputs
    for part in path.split("."):
        if isinstance(node, list) and part.isdigit():
            node = node[int(part)] if int(part) < len(node) else None
        elif isinstance(node, dict):
            node = node.get(part)
        else:
            return None
    return node


def _find_key(node: Any, keys: tuple[str, ...]) -> Any:
    """The first value under any of `keys`, depth first (labels and annotations hold dotted keys)."""
    if isinstance(node, dict):
        for key in keys:
            if isinstance(node.get(key), str):
                return node[key]
        for value in node.values():
            found = _find_key(value, keys)
            if found is not None:
                return found
    elif isinstance(node, list):
        for value in node:
            found = _find_key(value, keys)
            if found is not None:
                return found
    return None


def key_settings(type_: str, inputs: Any) -> list[tuple[str, Any]]:
    """(label, value) of the settings a reviewer checks first, from (masked) inputs."""
    inputs = mask(inputs)
    if type_ in WORKLOAD_REPLICAS:
        found: list[tuple[str, Any]] = [
            ("metadata.namespace", _at(inputs, "metadata.namespace")),
            ("metadata.name", _at(inputs, "metadata.name")),
            ("shape", _find_key(inputs, SHAPE_KEYS)),
            ("replicas", _at(inputs, WORKLOAD_REPLICAS[type_])),
        ]
        if type_ == LWS:
            found.append(("size", _at(inputs, "spec.leaderWorkerTemplate.size")))
        found.append(("priority", (_at(inputs, "metadata.labels") or {}).get(PRIORITY_LABEL)))
        return [(label, value) for label, value in found if value is not None]
    default: tuple[str, ...] = ("metadata.namespace", "metadata.name") if type_.startswith("kubernetes:") else ()
    paths = KEY_SETTINGS.get(type_, default)
    return [(path, value) for path in paths if (value := _at(inputs, path)) is not None]


def settings_text(type_: str, inputs: Any) -> str:
    return "  ".join(f"{label}={_short(value)}" for label, value in key_settings(type_, inputs))


def settings_line(resource: Resource) -> str:
    return settings_text(resource.type, resource.inputs)


def tree(result: PlanResult) -> list[str]:
    children: dict[str, list[Resource]] = {}
    for r in result.resources:
        children.setdefault(r.parent, []).append(r)
    roots = [r for r in result.resources if r.parent not in {x.urn for x in result.resources}]
    lines: list[str] = []

    def walk(resource: Resource, depth: int) -> None:
        settings = settings_line(resource)
        label = f"{'  ' * depth}{resource.type}  {resource.name}"
        lines.append(f"{label}    {settings}" if settings else label)
        for child in sorted(children.get(resource.urn, []), key=lambda r: (r.type, r.name)):
            walk(child, depth + 1)

    for root in sorted(roots, key=lambda r: (not r.type.startswith("tpu-slicing:"), r.type, r.name)):
        walk(root, 1)
    return lines


def capacity_lines(config: StackConfig) -> list[str]:
    cap = capacity.capacity(config)
    lines = [
        f"  {cap.pools} {cap.unit}(s) of {cap.pool_topology} {cap.generation}: {cap.vms} VMs, {cap.chips} chips, "
        f"{cap.devices} JAX devices, {cap.hbm_gib} GiB HBM",
    ]
    pools = config.pool_names()
    lines += [
        f"  {pool} -> {path or 'on-demand capacity (no reservation)'}"
        for pool, path in zip(pools, cap.reservation_paths, strict=True)
    ]
    work = capacity.workloads(config)
    if work:
        lines.append(
            "  TPU workloads (Kueue admits them by priority; higher preempts lower):"
            if config.serving.dynamic_slicing
            else "  TPU workloads (one group per node pool; no Kueue):"
        )
        for w in work:
            lines.append(
                f"    {w.name:<22} {w.kind:<16} priority={w.priority:<6} {w.slices} x {w.shape} "
                f"= {w.chips} chips ({w.vms_per_slice} VMs and {w.hbm_gib_per_slice} GiB HBM per slice)"
            )
    return lines


def admission_lines(config: StackConfig) -> list[str]:
    """What Kueue's topology-aware admission would do with the stack's TPU workloads (domain/admission.py)."""
    if not config.serving.dynamic_slicing:
        return ["  not used: this backend runs one group per node pool without Kueue"]
    work = capacity.workloads(config)
    if not work:
        return ["  no TPU workloads"]
    priorities = dict(config.kueue.priorities.items())
    prediction = admission.predict(
        admission.requests_from_workloads(work, priorities), config.tpu.cubes, config.tpu.generation
    )
    names = {value: level for level, value in priorities.items()}
    lines = [f"  {line}" for line in admission.narrative(prediction, names)]
    lines += [f"  {line}" for line in admission.render_map(prediction, priority_names=names)]
    return lines


def software_lines(result: PlanResult, config: StackConfig) -> list[str]:
    lines = []
    for release in sorted(result.of_type("kubernetes:helm.sh/v3:Release"), key=lambda r: r.name):
        chart = f"{release.get('chart')} {release.get('version')}"
        lines.append(f"  {release.get('name'):<8} {chart} -> ns {release.get('namespace')}")
    for deployment in sorted(result.of_type("kubernetes:apps/v1:Deployment"), key=lambda r: r.urn):
        for container in deployment.get("spec.template.spec.containers") or []:
            lines.append(f"  {deployment.get('metadata.name')}: {container['image']}")
    for cq in result.of_type("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"):
        quotas = cq.get("spec.resourceGroups.0.flavors.0.resources") or []
        shown = ", ".join(f"{q['name']}={q['nominalQuota']}" for q in quotas)
        lines.append(f"  ClusterQueue {cq.get('metadata.name')}: {shown}; preemption within queue: LowerPriority")
    for wpc in sorted(
        result.of_type("kubernetes:kueue.x-k8s.io/v1beta2:WorkloadPriorityClass"), key=lambda r: r.get("value")
    ):
        lines.append(f"  WorkloadPriorityClass {wpc.get('metadata.name')} = {_short(wpc.get('value'))}")
    return lines


def serving_lines(result: PlanResult, config: StackConfig) -> list[str]:
    serving = config.serving
    if serving.backend is Backend.NONE:
        return ["  backend: none (the TPU platform and its checks only)"]
    if serving.backend is not Backend.VLLM_PD:
        return fixed_slice_lines(result, config)
    generation = config.tpu.generation
    model = serving.model
    weights = model.weights_bytes / GIB
    billions, each = model.size
    lines = [
        f"  backend vllm-pd: model {model.name} ({billions:g}B parameters x "
        f"{each:g} B = {weights:.0f} GiB of weights) from gs://{model.weights_bucket}/{model.path}",
    ]
    for role in ("prefill", "decode"):
        cfg = getattr(serving, role)
        shape = Topology.parse(cfg.topology)
        hbm = generation.hbm_bytes(shape) / GIB
        tp = serving.vllm.tensor_parallel_size or generation.devices(shape)
        lines.append(
            f"  {role:<8} {cfg.replicas} x {cfg.topology} slices = {cfg.replicas * shape.chips} chips, "
            f"{generation.vms(shape)} VMs per slice, TP {tp}; "
            f"weights use {weights / hbm:.0%} of {hbm:.0f} GiB HBM per slice"
        )
    gateway = result.outputs.get("gatewayIp")
    address = gateway.value if gateway and gateway.known else "(known after apply)"
    lines.append(f"  endpoints: http://{address}/v1/completions and /v1/chat/completions (internal to the VPC)")
    return lines


def fixed_slice_lines(result: PlanResult, config: StackConfig) -> list[str]:
    serving = config.serving
    generation, shape = serving.slice.generation, serving.slice.shape
    model = serving.model
    weights = model.weights_bytes / GIB
    hbm = generation.hbm_bytes(shape) / GIB
    what = (
        f"model key {serving.saxml.model_key} ({serving.saxml.model_path}, checkpoint {serving.saxml.checkpoint})"
        if serving.backend is Backend.SAXML
        else f"MaxText {serving.jetstream.maxtext_model} from gs://{model.weights_bucket}/{model.path}"
    )
    output, port = ("saxHttpAddress", 8888) if serving.backend is Backend.SAXML else ("jetstreamAddress", 8000)
    address = result.outputs.get(output)
    shown = address.value if address and address.known and address.value else "(known after apply)"
    return [
        f"  backend {serving.backend.value}: {what}",
        f"  {serving.slices} x {shape} {generation.name} slices, "
        f"{serving.slice.vms} {serving.slice.machine_type} VMs and {shape.chips} chips each; "
        f"{weights:.0f} GiB of weights use {weights / hbm:.0%} of {hbm:.0f} GiB HBM per slice",
        f"  endpoint: http://{shown}:{port} ({serving.http.type} load balancer)",
    ]


def observability_lines(result: PlanResult) -> list[str]:
    lines = []
    for monitor in sorted(
        result.of_type("kubernetes:monitoring.googleapis.com/v1:PodMonitoring"), key=lambda r: r.name
    ):
        selector = ", ".join(f"{k}={v}" for k, v in (monitor.get("spec.selector.matchLabels") or {}).items())
        for endpoint in monitor.get("spec.endpoints") or []:
            lines.append(
                f"  scrape {monitor.get('metadata.name')}: pods {{{selector}}} port {_short(endpoint.get('port'))} "
                f"{endpoint.get('path', '/metrics')} every {endpoint.get('interval')}"
            )
    for board in result.of_type("gcp:monitoring/dashboard:Dashboard"):
        spec = json.loads(board.get("dashboardJson") or "{}")
        titles = [t.get("widget", {}).get("title") for t in spec.get("mosaicLayout", {}).get("tiles", [])]
        lines.append(f"  dashboard {spec.get('displayName')!r}: {len([t for t in titles if t])} charts")
        lines += [f"    - {title}" for title in titles if title]
    policies = result.of_type("gcp:monitoring/alertPolicy:AlertPolicy")
    lines += [f"  alert: {p.get('displayName')}" for p in policies] or ["  alerts: off (observability.alerts.enabled)"]
    return lines or ["  nothing scraped or charted"]


def output_lines(result: PlanResult) -> list[str]:
    lines = []
    for name in sorted(result.outputs):
        out = result.outputs[name]
        if out.secret:
            shown = SECRET_PLACEHOLDER
        elif not out.known:
            shown = "(known after apply)"
        elif isinstance(out.value, str) and "\n" in out.value:
            shown = out.value.splitlines()[0] + " ..."
        else:
            shown = _short(out.value)
        lines.append(f"  {name} = {shown}")
    return lines


def render(result: PlanResult, config: StackConfig, manifests_dir: str | None = None) -> str:
    mode = "preview (a brand-new stack)" if result.preview else "apply"
    sections = [
        f"tpu-slicing plan for stack '{result.stack}' ({mode} mode)",
        BANNER,
        "",
        f"Resources ({len(result.resources)}):",
        *tree(result),
        "",
        "Cluster software:",
        *software_lines(result, config),
        "",
        "Capacity and TPU workloads:",
        *capacity_lines(config),
        "",
        "Cost (plan/cost.py; the chips of the stack's pools, busy or idle):",
        *cost.lines(config),
        "",
        "Kueue admission preview (a model of topology-aware admission; assumptions in domain/admission.py):",
        *admission_lines(config),
        "",
        *(
            [
                "Autoscaling: the admission preview at each autoscaled role's max (plan/scaling.py):",
                *scaling.lines(config),
                "",
            ]
            if scaling.bounds(config)
            else []
        ),
        "Serving:",
        *serving_lines(result, config),
        "",
        "Observability:",
        *observability_lines(result),
        "",
        "Time to serving (typical durations per resource kind, see plan/timing.py):",
        *timing.lines(result),
        "",
        "Stack outputs:",
        *output_lines(result),
    ]
    if result.reservation:
        # From the snapshot the plan read (reservation.snapshot); without one the plan warns instead.
        readings = [reservation_health.from_row(row) for row in result.reservation]
        sections += [
            "",
            "Reservation (bound sub-blocks, from the snapshot):",
            *reservation_health.table(readings, {r.sub_block: [result.stack] for r in readings}),
        ]
    if manifests_dir:
        sections += ["", f"Kubernetes objects and Helm values written for review to {manifests_dir}/"]
    return "\n".join(sections) + "\n"
