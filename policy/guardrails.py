"""The tpu-slicing-guardrails policies, as module-level policy objects plus `POLICIES`.

Importing this module only builds policy objects; `PolicyPack(...)` (which serves gRPC and blocks
forever) is constructed in `__main__.py` alone.

Every validation reads camelCase inputs, in either of the two shapes they arrive in:

* through the Pulumi CLI (`pulumi preview --policy-pack policy`): pulumi_policy's analyzer wraps the
  inputs in an unknown-checking proxy (reading a value that is unknown during preview raises
  `UnknownValueError`, which the SDK turns into an advisory "can't run policy during preview") and it
  has already stripped Pulumi's secret markers, so a secret looks like a plain value (pulumi-policy#241);
* as recorded by the mock engine (plan/engine.py) and passed directly by the tests: plain dicts in
  which secrets keep their wire form `{"4dabf181...": "1b470612...", "value": ...}` and unknowns are
  `pulumi.output.Unknown`.

Policy configuration (`pulumi config`-style JSON set with `pulumi policy enable --config` or a local
`--policy-pack-config` file) is read with `args.get_config()`; tests pass the same dict as the `config`
argument of `ResourceValidationArgs` / `StackValidationArgs`.

Messages name the resource, the offending value and what is allowed, but never print a secret.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pulumi.output import Unknown
from pulumi_policy import (
    Policy,
    PolicyConfigSchema,
    PolicyResource,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    Secret,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import (
    UNKNOWN_ARCHIVE_VALUE,
    UNKNOWN_ARRAY_VALUE,
    UNKNOWN_ASSET_VALUE,
    UNKNOWN_BOOLEAN_VALUE,
    UNKNOWN_NUMBER_VALUE,
    UNKNOWN_OBJECT_VALUE,
    UNKNOWN_STRING_VALUE,
    UnknownValueError,
)

# Rules the settings model enforces too, imported from the repository (policy/__main__.py puts its
# root on sys.path under the CLI): one definition, so settings and pack reach the same verdict.
from settings.credentials import ALLOWED as CREDENTIALS_ALLOWED
from settings.credentials import kind_of as credential_kind
from settings.exposure import SOURCE_RANGES_ALLOWED, source_ranges_problem
from settings.names import NameRule
from settings.pins import CHART_ALLOWED, IMAGE_ALLOWED, chart_problem, image_problem

PACK_NAME = "tpu-slicing-guardrails"
PACK_DESCRIPTION = (
    "Guardrails for TPU slicing on GKE: reserved TPU capacity, jumbo-frame networks, protected clusters, "
    "internal load balancers, pinned images and charts, narrow IAM and secret credentials."
)

# Resource type tokens.
NODE_POOL = "gcp:container/nodePool:NodePool"
NETWORK = "gcp:compute/network:Network"
CLUSTER = "gcp:container/cluster:Cluster"
SERVICE = "kubernetes:core/v1:Service"
K8S_SECRET = "kubernetes:core/v1:Secret"
HELM_TYPES = frozenset({"kubernetes:helm.sh/v3:Release", "kubernetes:helm.sh/v4:Chart"})
PROJECT_IAM_MEMBER = "gcp:projects/iAMMember:IAMMember"
PROJECT_IAM_BINDING = "gcp:projects/iAMBinding:IAMBinding"
PROJECT_IAM_POLICY = "gcp:projects/iAMPolicy:IAMPolicy"

# TPU machine families on GKE. tpu7x (Ironwood) capacity only exists as a reservation.
TPU7X_PREFIX = "tpu7x-"
TPU_MACHINE_PREFIXES = (TPU7X_PREFIX, "ct6e-", "ct5p-", "ct5lp-", "ct5l-", "ct4p-")
SPECIFIC_RESERVATION = "SPECIFIC_RESERVATION"
NO_RESERVATION = "NO_RESERVATION"
RESERVATION_KEY = "compute.googleapis.com/reservation-name"
# Whole string, no whitespace in a segment (settings/names.py: `$` let a final "\n" through).
RESERVATION_PATH = NameRule(
    r"projects/[^/\s]+/reservations/[^/\s]+(/[^/\s]+/[^/\s]+)*",
    "projects/<project>/reservations/<name>[/<kind>/<name>...]",
)

JUMBO_MTU = 8896

LB_TYPE_ANNOTATION = "networking.gke.io/load-balancer-type"
LEGACY_LB_TYPE_ANNOTATION = "cloud.google.com/load-balancer-type"

CONTAINER_LIST_KEYS = frozenset({"containers", "initContainers", "ephemeralContainers"})

BROAD_PROJECT_ROLES = frozenset({"roles/owner", "roles/editor"})
STORAGE_ROLE_PREFIX = "roles/storage."

# Secret-looking names: the last word, or the last two words, of HF_TOKEN, dbPassword, clientSecret,
# API_KEY... (`tokenizerPath`, `secretName` and `secretKeyRef` do not match).
SECRET_WORDS = frozenset({"token", "password", "passwd", "passphrase", "secret", "apikey", "credentials"})
SECRET_WORD_PAIRS = frozenset({("api", "key"), ("private", "key"), ("access", "key"), ("secret", "key")})

_SECRET_SIG_KEY = "4dabf18193072939515e22adb298388d"
_SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
_UNKNOWN_SENTINELS = frozenset(
    {
        UNKNOWN_BOOLEAN_VALUE,
        UNKNOWN_NUMBER_VALUE,
        UNKNOWN_STRING_VALUE,
        UNKNOWN_ARRAY_VALUE,
        UNKNOWN_ASSET_VALUE,
        UNKNOWN_ARCHIVE_VALUE,
        UNKNOWN_OBJECT_VALUE,
    }
)


# --- Reading inputs in either shape -------------------------------------------------------------


def _is_unknown(value: Any) -> bool:
    return isinstance(value, Unknown) or (isinstance(value, str) and value in _UNKNOWN_SENTINELS)


def _is_secret(value: Any) -> bool:
    """True for a value that still carries Pulumi's secret marker (wire form or pulumi_policy.Secret)."""
    if isinstance(value, Secret):
        return True
    if isinstance(value, Mapping):
        try:
            return bool(value.get(_SECRET_SIG_KEY) == _SECRET_SIG)
        except UnknownValueError:
            return False
    return False


def _reveal(value: Any) -> Any:
    while _is_secret(value):
        value = value.value if isinstance(value, Secret) else value.get("value")
    return value


def _secret_markers_visible(props: Mapping[str, Any]) -> bool:
    """False when the inputs came through pulumi_policy's analyzer, which strips secret markers.

    `Analyze`/`AnalyzeStack` always hand policies `unknown_checking_proxy(deserialize_properties(...))`,
    a `pulumi_policy.proxy._DictProxy`, and deserialize_properties drops the markers there. Inputs given
    any other way (the mock engine's recording) keep them.
    """
    return type(props).__module__ != "pulumi_policy.proxy"


def _unknown_error(value: Any, path: Sequence[str]) -> UnknownValueError:
    sentinel = value if isinstance(value, str) and value in _UNKNOWN_SENTINELS else UNKNOWN_STRING_VALUE
    return UnknownValueError(sentinel, list(path))


def _get(node: Any, *path: str) -> Any:
    """The input at `path` with secrets revealed; None when absent.

    A value that is unknown (during preview) raises `UnknownValueError`, as pulumi_policy's own proxy
    does: a policy that needs the value cannot decide, and the SDK reports that as advisory.
    """
    for depth, key in enumerate(path):
        node = _reveal(node)
        if not isinstance(node, Mapping):
            return None
        value = _reveal(node.get(key))
        if _is_unknown(value):
            raise _unknown_error(value, path[: depth + 1])
        if value is None:
            return None
        node = value
    return node


def _children(node: Any) -> Iterator[tuple[Any, Any]]:
    """(key, value) pairs of a mapping or list, secrets of the node itself revealed; unknowns skipped."""
    node = _reveal(node)
    keys: Sequence[Any]
    if isinstance(node, Mapping):
        keys = list(node)
    elif isinstance(node, Sequence) and not isinstance(node, str | bytes):
        keys = range(len(node))
    else:
        return
    for key in keys:
        try:
            value = node[key]
        except UnknownValueError:
            continue
        if _is_unknown(value) or _is_unknown(_reveal(value)):
            continue
        yield key, value


def _kind(resource_type: str) -> str:
    return resource_type.rsplit(":", 1)[-1]


def _who(resource_type: str, name: str) -> str:
    return f"{_kind(resource_type)} '{name}'"


def _show(value: Any) -> str:
    """A value as it reads in a stack file: 1460 not 1460.0, true not True, 'unset' for None."""
    if value is None:
        return "unset"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    return f"'{value}'"


def _config(args: ResourceValidationArgs | StackValidationArgs) -> Mapping[str, Any]:
    config = args.get_config()
    return config if isinstance(config, Mapping) else {}


def _flag(config: Mapping[str, Any], key: str) -> bool:
    value = config.get(key)
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def _is_tpu_machine(machine_type: Any) -> bool:
    return isinstance(machine_type, str) and machine_type.startswith(TPU_MACHINE_PREFIXES)


# --- 1. tpu-pool-specific-reservation -------------------------------------------------------------


def _reservation_problems(machine_type: str, affinity: Any, prefix: str | None) -> list[str]:
    consume = _get(affinity, "consumeReservationType")
    tpu7x = machine_type.startswith(TPU7X_PREFIX)
    allowed = (
        f"{SPECIFIC_RESERVATION} (TPU7x capacity exists only as a reservation)"
        if tpu7x
        else f"{SPECIFIC_RESERVATION}, or {NO_RESERVATION} for an on-demand stack"
    )
    if consume is None:
        return [
            f"nodeConfig.reservationAffinity.consumeReservationType is unset (GKE then consumes ANY_RESERVATION);"
            f" allowed: {allowed}"
        ]
    if consume == NO_RESERVATION and not tpu7x:
        return []
    if consume != SPECIFIC_RESERVATION:
        return [f"nodeConfig.reservationAffinity.consumeReservationType is {_show(consume)}; allowed: {allowed}"]

    problems = []
    key = _get(affinity, "key")
    if key != RESERVATION_KEY:
        problems.append(f"nodeConfig.reservationAffinity.key is {_show(key)}; allowed: '{RESERVATION_KEY}'")
    values = _get(affinity, "values")
    names = [_reveal(v) for _, v in _children(values)] if values is not None else []
    if not names:
        problems.append(
            "nodeConfig.reservationAffinity.values is empty; allowed: reservation paths"
            " 'projects/P/reservations/R[/reservationBlocks/B[/reservationSubBlocks/S]]'"
        )
    for value in names:
        if not isinstance(value, str) or not RESERVATION_PATH.matches(value):
            problems.append(
                f"nodeConfig.reservationAffinity.values has {_show(value)}; allowed: a reservation path"
                " 'projects/P/reservations/R[/reservationBlocks/B[/reservationSubBlocks/S]]'"
            )
        elif prefix and value != prefix and not value.startswith(prefix + "/"):
            problems.append(
                f"nodeConfig.reservationAffinity.values has '{value}'; allowed: the reservation '{prefix}'"
                " or one of its blocks (policy config `reservation`)"
            )
    return problems


def validate_tpu_pool_reservation(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """TPU node pools: SPECIFIC_RESERVATION with reservation paths (tpu7x always; others may be on demand)."""
    if args.resource_type != NODE_POOL:
        return
    machine_type = _get(args.props, "nodeConfig", "machineType")
    if not _is_tpu_machine(machine_type):
        return
    prefix = _config(args).get("reservation")
    prefix = prefix.rstrip("/") if isinstance(prefix, str) and prefix.strip() else None
    affinity = _get(args.props, "nodeConfig", "reservationAffinity") or {}
    for problem in _reservation_problems(machine_type, affinity, prefix):
        report_violation(f"{_who(args.resource_type, args.name)} ({machine_type}): {problem}", None)


tpu_pool_specific_reservation = ResourceValidationPolicy(
    name="tpu-pool-specific-reservation",
    description=(
        "TPU node pools consume a specific reservation (compute.googleapis.com/reservation-name); "
        "only non-TPU7x on-demand pools may use NO_RESERVATION."
    ),
    validate=validate_tpu_pool_reservation,
    config_schema=PolicyConfigSchema(
        properties={
            "reservation": {
                "type": "string",
                "description": "Expected reservation, projects/P/reservations/R: every reservation value "
                "must be it or one of its blocks/sub-blocks.",
                "pattern": "^projects/[^/]+/reservations/[^/]+/?$",
            }
        }
    ),
)


# --- 2. tpu-network-jumbo-mtu ---------------------------------------------------------------------


def validate_tpu_network_mtu(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """Once the stack has a TPU node pool, every Network in it needs MTU 8896.

    All networks rather than only the cluster's: the pool -> cluster -> network links are resource
    references (IDs, unknown in preview), so the stack-wide rule is the one that can always be decided.
    """
    tpu_pools = [
        r.name
        for r in args.resources
        if r.resource_type == NODE_POOL and _is_tpu_machine(_get(r.props, "nodeConfig", "machineType"))
    ]
    if not tpu_pools:
        return
    networks: list[PolicyResource] = [r for r in args.resources if r.resource_type == NETWORK]
    for network in networks:
        mtu = _get(network.props, "mtu")
        if isinstance(mtu, int | float) and not isinstance(mtu, bool) and mtu == JUMBO_MTU:
            continue
        shown = "unset (GCP default 1460)" if mtu is None else _show(mtu)
        report_violation(
            f"{_who(network.resource_type, network.name)} mtu is {shown}; allowed: {JUMBO_MTU} "
            f"(jumbo frames for the TPU node pools {', '.join(sorted(tpu_pools))})",
            network.urn,
        )


tpu_network_jumbo_mtu = StackValidationPolicy(
    name="tpu-network-jumbo-mtu",
    description=f"A stack with TPU node pools puts them on VPC networks with MTU {JUMBO_MTU}.",
    validate=validate_tpu_network_mtu,
)


# --- 3. cluster-deletion-protection ---------------------------------------------------------------


def validate_cluster_deletion_protection(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """deletionProtection must be an explicit true (the provider default may change); config can waive it."""
    if args.resource_type != CLUSTER or _flag(_config(args), "allowClusterDeletion"):
        return
    protection = _get(args.props, "deletionProtection")
    if protection is True:
        return
    report_violation(
        f"{_who(args.resource_type, args.name)} deletionProtection is {_show(protection)}; allowed: true "
        "(set policy config allowClusterDeletion: true to tear the cluster down)",
        None,
    )


cluster_deletion_protection = ResourceValidationPolicy(
    name="cluster-deletion-protection",
    description="GKE clusters keep deletionProtection: true unless the pack's config allows deletion.",
    validate=validate_cluster_deletion_protection,
    config_schema=PolicyConfigSchema(
        properties={
            "allowClusterDeletion": {
                "type": "boolean",
                "default": False,
                "description": "Allow clusters without deletion protection (for a planned teardown).",
            }
        }
    ),
)


# --- 4. no-public-load-balancer -------------------------------------------------------------------


def validate_no_public_load_balancer(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """LoadBalancer Services are internal; with allowExternalServices, external ones need source ranges."""
    if args.resource_type != SERVICE or _get(args.props, "spec", "type") != "LoadBalancer":
        return
    who = _who(args.resource_type, args.name)
    annotations = _get(args.props, "metadata", "annotations")
    lb_type = _get(annotations, LB_TYPE_ANNOTATION) or _get(annotations, LEGACY_LB_TYPE_ANNOTATION)
    if lb_type == "Internal":
        return
    if not _flag(_config(args), "allowExternalServices"):
        report_violation(
            f"{who} is a LoadBalancer with {LB_TYPE_ANNOTATION} {_show(lb_type)}; allowed: "
            f"annotation {LB_TYPE_ANNOTATION}: Internal (or policy config allowExternalServices: true "
            "with spec.loadBalancerSourceRanges)",
            None,
        )
        return
    ranges = [_reveal(v) for _, v in _children(_get(args.props, "spec", "loadBalancerSourceRanges"))]
    if not ranges:
        report_violation(
            f"{who} is an external LoadBalancer with no spec.loadBalancerSourceRanges (open to 0.0.0.0/0); "
            "allowed: a non-empty list of source CIDRs other than 0.0.0.0/0",
            None,
        )
    # The settings' serving.http.sourceRanges rule (settings/exposure.py), on what the Service carries.
    problem = source_ranges_problem(str(cidr) for cidr in ranges) if ranges else None
    if problem:
        report_violation(
            f"{who} spec.loadBalancerSourceRanges {[str(c) for c in ranges]} has {problem}: the service's API "
            f"has no authentication; {SOURCE_RANGES_ALLOWED}",
            None,
        )


no_public_load_balancer = ResourceValidationPolicy(
    name="no-public-load-balancer",
    description=(
        "LoadBalancer Services are internal (networking.gke.io/load-balancer-type: Internal); external ones "
        "need policy config allowExternalServices and restrictive loadBalancerSourceRanges."
    ),
    validate=validate_no_public_load_balancer,
    config_schema=PolicyConfigSchema(
        properties={
            "allowExternalServices": {
                "type": "boolean",
                "default": False,
                "description": "Allow external LoadBalancer Services that set loadBalancerSourceRanges.",
            }
        }
    ),
)


# --- 5. pinned-images -----------------------------------------------------------------------------


def _containers(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, container) for every entry of a containers/initContainers/ephemeralContainers list."""
    for key, value in _children(node):
        child_path = f"{path}.{key}" if path else str(key)
        revealed = _reveal(value)
        if key in CONTAINER_LIST_KEYS and isinstance(revealed, Sequence) and not isinstance(revealed, str):
            for index, container in _children(value):
                if isinstance(_reveal(container), Mapping):
                    yield f"{child_path}[{index}]", container
        else:
            yield from _containers(value, child_path)


def _container_name(container: Any, path: str) -> str:
    try:
        name = _get(container, "name")
    except UnknownValueError:
        name = None
    return f"'{name}'" if isinstance(name, str) else path


def _kubernetes_workload(resource_type: str) -> bool:
    """Any Kubernetes resource that may hold pod templates (Deployment, Job, JobSet, LeaderWorkerSet...)."""
    return (
        resource_type.startswith("kubernetes:")
        and resource_type not in HELM_TYPES
        and not resource_type.startswith("kubernetes:apiextensions.k8s.io/")
    )


def validate_pinned_images(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """Every container image in a Kubernetes resource is pinned; Helm charts have an exact version."""
    who = _who(args.resource_type, args.name)
    if args.resource_type in HELM_TYPES:
        version = _get(args.props, "version")
        if not (isinstance(version, str) and chart_problem(version) is None):
            shown = "unset (Helm installs the newest chart)" if version is None else _show(version)
            report_violation(
                f"{who} chart {_show(_get(args.props, 'chart'))} version is {shown}; {CHART_ALLOWED}", None
            )
        return
    if not _kubernetes_workload(args.resource_type):
        return
    for path, container in _containers(args.props):
        try:
            image = _get(container, "image")
        except UnknownValueError:
            continue  # computed during preview; checked again at update time
        if image is None:
            continue
        problem = image_problem(image) if isinstance(image, str) else f"a non-string value {_show(image)}"
        if problem:
            report_violation(
                f"{who} container {_container_name(container, path)} image '{image}' has {problem}; {IMAGE_ALLOWED}",
                None,
            )


pinned_images = ResourceValidationPolicy(
    name="pinned-images",
    description=(
        "Container images in Kubernetes workloads carry an immutable tag or digest, and Helm releases an "
        "exact chart version."
    ),
    validate=validate_pinned_images,
)


# --- 6. no-broad-roles ----------------------------------------------------------------------------


def _broad(role: Any) -> bool:
    return isinstance(role, str) and (role in BROAD_PROJECT_ROLES or role.startswith(STORAGE_ROLE_PREFIX))


def validate_no_broad_roles(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """Project IAMMember/IAMBinding/IAMPolicy: no roles/owner, roles/editor or roles/storage.*."""
    if args.resource_type in (PROJECT_IAM_MEMBER, PROJECT_IAM_BINDING):
        roles = [_get(args.props, "role")]
    elif args.resource_type == PROJECT_IAM_POLICY:
        policy_data = _get(args.props, "policyData")
        try:
            document = json.loads(policy_data) if isinstance(policy_data, str) else {}
        except ValueError:
            document = {}
        bindings = document.get("bindings", []) if isinstance(document, dict) else []
        roles = [b.get("role") for b in bindings if isinstance(b, dict)]
    else:
        return
    project = _get(args.props, "project")
    where = f"project '{project}'" if isinstance(project, str) else "the provider's project"
    for role in roles:
        if _broad(role):
            report_violation(
                f"{_who(args.resource_type, args.name)} grants {_show(role)} on {where}; allowed: narrowly "
                "scoped project roles, never roles/owner, roles/editor or roles/storage.* at project level "
                "(grant storage roles on the bucket with gcp:storage/bucketIAMMember)",
                None,
            )


no_broad_roles = ResourceValidationPolicy(
    name="no-broad-roles",
    description="Project-level IAM never grants roles/owner, roles/editor or any roles/storage.* role.",
    validate=validate_no_broad_roles,
)


# --- 7. secrets-are-secret ------------------------------------------------------------------------


def _words(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return [w.lower() for w in re.split(r"[^A-Za-z0-9]+", spaced) if w]


def looks_secret(name: str) -> bool:
    """True for names such as HF_TOKEN, dbPassword, clientSecret or API_KEY."""
    words = _words(name)
    return bool(words) and (words[-1] in SECRET_WORDS or tuple(words[-2:]) in SECRET_WORD_PAIRS)


def _plain(value: Any) -> bool:
    """A non-empty literal string (a secret value, if its name says so, that is not marked secret)."""
    return isinstance(value, str) and value != ""


def _secret_data_problems(props: Mapping[str, Any]) -> Iterator[str]:
    for field in ("data", "stringData"):
        try:
            entries = props.get(field)
        except UnknownValueError:
            continue
        if entries is None or _is_unknown(entries) or _is_secret(entries):
            continue
        for key, value in _children(entries):
            if not _is_secret(value) and _plain(value):
                yield (
                    f"{field}.{key} is a plain string; allowed: a Pulumi secret "
                    "(pulumi.Output.secret(...) or `pulumi config set --secret`)"
                )


def _env_problems(props: Mapping[str, Any]) -> Iterator[str]:
    for path, container in _containers(props):
        try:
            env = _get(container, "env")
        except UnknownValueError:
            continue
        for _, entry in _children(env):
            try:
                name = _get(entry, "name")
                value = _get(entry, "value")
            except UnknownValueError:
                continue
            if isinstance(name, str) and looks_secret(name) and _plain(value):
                yield (
                    f"container {_container_name(container, path)} env {name} has a literal value; allowed: "
                    "valueFrom.secretKeyRef (a literal, even a Pulumi secret, is stored in clear text in "
                    "the pod spec)"
                )


def _input_problems(node: Any, path: str, skip: frozenset[str]) -> Iterator[str]:
    """Secret-looking keys anywhere in the inputs whose value is a plain, unmarked string."""
    if _is_secret(node):
        return
    for key, value in _children(node):
        child_path = f"{path}.{key}" if path else str(key)
        if child_path in skip:
            continue
        if isinstance(key, str) and looks_secret(key) and not _is_secret(value) and _plain(value):
            yield f"input {child_path} is a plain string; allowed: a Pulumi secret (pulumi.Output.secret(...))"
        else:
            yield from _input_problems(value, child_path, skip)


def _credential_problems(node: Any, path: str) -> Iterator[str]:
    """Plain strings shaped like a credential (settings/credentials.py, the settings' own rule)."""
    if _is_secret(node):
        return
    if isinstance(node, str):
        kind = credential_kind(node)
        if kind:
            yield f"input {path} holds {kind} in plain text; {CREDENTIALS_ALLOWED}"
        return
    for key, value in _children(node):
        yield from _credential_problems(value, f"{path}.{key}" if path else str(key))


def validate_secrets_are_secret(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """Secret-looking env vars use valueFrom; Secret data and secret-looking inputs are Pulumi secrets."""
    problems = list(_env_problems(args.props)) if _kubernetes_workload(args.resource_type) else []
    # Whether a value is a Pulumi secret is only observable while its marker is; pulumi_policy's
    # analyzer strips markers, so under the CLI these two checks cannot tell and stay silent.
    if _secret_markers_visible(args.props):
        if args.resource_type == K8S_SECRET:
            problems += _secret_data_problems(args.props)
        checked = frozenset({"data", "stringData"}) if args.resource_type == K8S_SECRET else frozenset()
        problems += _input_problems(args.props, "", checked)
    # A token pasted into an ordinary setting lands in pod args, env and labels: only a Secret's data
    # may hold one (its value is checked above), and a provider's own inputs are not the workload's.
    if args.resource_type != K8S_SECRET and not args.resource_type.startswith("pulumi:providers:"):
        problems += _credential_problems(args.props, "")
    for problem in problems:
        report_violation(f"{_who(args.resource_type, args.name)} {problem}", None)


secrets_are_secret = ResourceValidationPolicy(
    name="secrets-are-secret",
    description=(
        "Kubernetes Secret data and secret-looking inputs (token, password, secret, API key) are Pulumi "
        "secrets; secret-looking container env vars come from valueFrom, never a literal value; no input "
        "outside a Secret holds a credential-shaped string (a Hugging Face or OAuth token, a private key)."
    ),
    validate=validate_secrets_are_secret,
)


TPU_POOLS = "tpu-slicing:infra:TpuPools"


def validate_tpu_pools_on_healthy_sub_blocks(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """The TpuPools component's `reservation` input (infra/reservation.py `bound`): each bound
    sub-block as read at preview. One read and not HEALTHY (DEGRADED, HEALTH_STATUS_UNSPECIFIED) is
    refused unless the stack accepts it with a reason (reservation.accept); one not read (no health:
    the offline plan without a snapshot) is not judged, and an unknown read (a bare project's first
    preview) makes the policy advisory, as every unknown does."""
    if args.resource_type != TPU_POOLS:
        return
    try:
        rows = list(_children(_get(args.props, "reservation")))
    except UnknownValueError:
        return  # read only once the Compute API is on: a bare project's first preview
    for _, row in rows:
        try:
            health, accepted = _get(row, "health"), _get(row, "accepted")
        except UnknownValueError:
            continue
        if not isinstance(health, str) or health == "HEALTHY" or (isinstance(accepted, str) and accepted.strip()):
            continue
        sub_block = _get(row, "subBlock")
        report_violation(
            f"{_who(args.resource_type, args.name)} binds sub-block {sub_block}, read {health}; allowed: a HEALTHY "
            f"sub-block in tpu-slicing:reservation.subBlocks, or tpu-slicing:reservation.accept: "
            f"{{{sub_block}: <reason>}}",
            None,
        )


tpu_pools_on_healthy_sub_blocks = ResourceValidationPolicy(
    name="tpu-pools-on-healthy-sub-blocks",
    description=(
        "TPU pools bind only sub-blocks the reservation reports HEALTHY at preview, unless the stack "
        "accepts one with a reason (reservation.accept)."
    ),
    validate=validate_tpu_pools_on_healthy_sub_blocks,
)


POLICIES: list[Policy] = [
    tpu_pool_specific_reservation,
    tpu_network_jumbo_mtu,
    cluster_deletion_protection,
    no_public_load_balancer,
    pinned_images,
    no_broad_roles,
    secrets_are_secret,
    tpu_pools_on_healthy_sub_blocks,
]
