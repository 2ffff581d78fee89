"""The tpu-slicing-guardrails policy pack (policy/), tested without the Pulumi CLI.

`PolicyPack(...)` serves gRPC and blocks forever, so the policies are called one by one with
`ResourceValidationArgs` / `StackValidationArgs` built from what the mock engine records for the
committed stacks. Each check runs on the inputs in two forms:

* "recorded": the engine's camelCase inputs as they are (secrets keep their wire marker);
* "analyzer": the same inputs sent through protobuf and pulumi_policy's own deserializer and
  unknown-checking proxy, exactly as its analyzer hands them to a policy under `pulumi preview
  --policy-pack` (numbers become floats, secret markers are stripped, unknowns raise on access).

A few tests drive pulumi_policy's analyzer servicer itself (no server): the path the CLI takes.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import inspect
import ipaddress
import json
import runpy
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pulumi_policy
import pytest
import yaml
from google.protobuf import json_format, struct_pb2
from hypothesis import given, settings
from hypothesis import strategies as st
from pulumi.output import Unknown
from pulumi.runtime import proto, rpc
from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.deserialize import deserialize_properties
from pulumi_policy.policy import _PolicyAnalyzerServicer
from pulumi_policy.proxy import UnknownValueError, unknown_checking_proxy
from pydantic import ValidationError

from plan import engine
from policy import guardrails
from policy.guardrails import (
    POLICIES,
    cluster_deletion_protection,
    no_broad_roles,
    no_public_load_balancer,
    pinned_images,
    secrets_are_secret,
    tpu_network_jumbo_mtu,
    tpu_pool_specific_reservation,
)
from settings import exposure, pins
from settings.model import HttpExposure, Versions

ROOT = Path(__file__).resolve().parent.parent
POLICY_DIR = ROOT / "policy"
FORMS = ("recorded", "analyzer")
NODE_POOL = "gcp:container/nodePool:NodePool"
NETWORK = "gcp:compute/network:Network"
CLUSTER = "gcp:container/cluster:Cluster"
SERVICE = "kubernetes:core/v1:Service"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
LWS = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
JOB = "kubernetes:batch/v1:Job"
RELEASE = "kubernetes:helm.sh/v3:Release"
IAM_MEMBER = "gcp:projects/iAMMember:IAMMember"
BUCKET_IAM_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
K8S_SECRET = "kubernetes:core/v1:Secret"
SECRET_SIG = {rpc._special_sig_key: rpc._special_secret_sig}
DEV_RESERVATION = "projects/example-tpu-project/reservations/example-tpu7x-reservation"
TOKEN = "hf_not-a-real-token-0123456789"


# --- Building validation arguments ------------------------------------------------------------------


def _to_wire(value: Any) -> Any:
    if isinstance(value, Unknown):
        return rpc.UNKNOWN
    if isinstance(value, dict):
        return {k: _to_wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_wire(v) for v in value]
    return value


def _struct(inputs: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(_to_wire(inputs))
    return struct


def as_form(inputs: dict[str, Any], form: str) -> Any:
    """Inputs as a policy sees them: recorded as-is, or as pulumi_policy's analyzer delivers them."""
    if form == "recorded":
        return inputs
    return unknown_checking_proxy(deserialize_properties(json_format.MessageToDict(_struct(inputs))))


def _opts(res: engine.Resource) -> PolicyResourceOptions:
    return PolicyResourceOptions(
        res.protect, res.ignore_changes, res.delete_before_replace, [], PolicyCustomTimeouts(0, 0, 0), [], res.parent
    )


def resource_args(
    res: engine.Resource, props: dict[str, Any] | None = None, *, config: dict[str, Any] | None = None, form: str
) -> ResourceValidationArgs:
    inputs = res.inputs if props is None else props
    return ResourceValidationArgs(res.type, as_form(inputs, form), res.urn, res.name, _opts(res), None, config)


def stack_args(
    resources: Iterable[engine.Resource],
    props: dict[str, dict[str, Any]] | None = None,
    *,
    config: dict[str, Any] | None = None,
    form: str,
) -> StackValidationArgs:
    """StackValidationArgs as the analyzer builds them: parents and dependencies linked by URN."""
    props = props or {}
    resources = list(resources)
    built = {
        r.urn: PolicyResource(
            r.type, as_form(props.get(r.urn, r.inputs), form), r.urn, r.name, _opts(r), None, None, [], {}
        )
        for r in resources
    }
    for r in resources:
        built[r.urn].parent = built.get(r.parent)
        built[r.urn].dependencies = [built[d] for d in r.dependencies if d in built]
    return StackValidationArgs(list(built.values()), config)


def violations(policy: ResourceValidationPolicy | StackValidationPolicy, args: Any) -> list[tuple[str, str | None]]:
    found: list[tuple[str, str | None]] = []

    def report(message: str, urn: str | None = None) -> None:
        found.append((message, urn))

    assert policy.validate(args, report) is None  # every validation is synchronous
    return found


def messages(policy: ResourceValidationPolicy, res: engine.Resource, props: Any = None, **kw: Any) -> list[str]:
    return [m for m, _ in violations(policy, resource_args(res, props, **kw))]


def broken(res: engine.Resource, change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    """A deep copy of a recorded resource's inputs with `change` applied."""
    props = copy.deepcopy(res.inputs)
    change(props)
    return props


# --- Fixtures: each stack runs once --------------------------------------------------------------------


@pytest.fixture(scope="module")
def plans(dev_plan: engine.PlanResult, dev_preview: engine.PlanResult) -> dict[str, engine.PlanResult]:
    return {
        "dev": dev_plan,
        "dev-preview": dev_preview,
        "saxml-v5e": engine.run_stack("saxml-v5e"),
        "jetstream-v5e": engine.run_stack("jetstream-v5e"),
    }


@pytest.fixture(scope="module")
def dev(plans: dict[str, engine.PlanResult]) -> engine.PlanResult:
    return plans["dev"]


@pytest.fixture(scope="module")
def saxml(plans: dict[str, engine.PlanResult]) -> engine.PlanResult:
    return plans["saxml-v5e"]


@pytest.fixture(scope="module")
def jetstream(plans: dict[str, engine.PlanResult]) -> engine.PlanResult:
    return plans["jetstream-v5e"]


# --- The pack ------------------------------------------------------------------------------------------


def test_pack_holds_the_eight_policies() -> None:
    assert [p.name for p in POLICIES] == [
        "tpu-pool-specific-reservation",
        "tpu-network-jumbo-mtu",
        "cluster-deletion-protection",
        "no-public-load-balancer",
        "pinned-images",
        "no-broad-roles",
        "secrets-are-secret",
        "tpu-pools-on-healthy-sub-blocks",
    ]
    assert [type(p) for p in POLICIES] == [ResourceValidationPolicy, StackValidationPolicy] + [
        ResourceValidationPolicy
    ] * 6
    schemas = {p.name: sorted(p.config_schema.properties) for p in POLICIES if p.config_schema}
    assert schemas == {
        "tpu-pool-specific-reservation": ["reservation"],
        "cluster-deletion-protection": ["allowClusterDeletion"],
        "no-public-load-balancer": ["allowExternalServices"],
    }
    # Each policy inherits the pack's MANDATORY level from __main__.py.
    assert all(p.enforcement_level is None for p in POLICIES)


def test_main_constructs_the_pack_with_exactly_policies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run policy/__main__.py the way the CLI does (runpy on the pack directory), PolicyPack stubbed."""
    calls: list[inspect.BoundArguments] = []
    signature = inspect.signature(pulumi_policy.PolicyPack)

    def fake_pack(*args: Any, **kwargs: Any) -> None:
        calls.append(signature.bind(*args, **kwargs))

    monkeypatch.setattr(pulumi_policy, "PolicyPack", fake_pack)
    monkeypatch.setitem(sys.modules, "guardrails", guardrails)  # the CLI imports it from the pack dir
    runpy.run_path(str(POLICY_DIR), run_name="__main__")

    assert len(calls) == 1
    bound = calls[0].arguments
    assert bound["name"] == "tpu-slicing-guardrails"
    assert bound["policies"] is POLICIES
    assert bound["enforcement_level"] is EnforcementLevel.MANDATORY


def test_importing_the_policies_never_builds_a_pack(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("PolicyPack constructed while importing the policies")

    monkeypatch.setattr(pulumi_policy, "PolicyPack", refuse)
    spec = importlib.util.spec_from_file_location("guardrails_probe", POLICY_DIR / "guardrails.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # a fresh copy, outside sys.modules
    assert [p.name for p in module.POLICIES] == [p.name for p in POLICIES]


def test_pack_files_match_the_repository_pins() -> None:
    project = yaml.safe_load((POLICY_DIR / "PulumiPolicy.yaml").read_text())
    assert project["runtime"]["name"] == "python"
    assert "tpu-slicing-guardrails" in project["description"]
    # Only fields the CLI's PolicyPackProject knows; the pack's name comes from PolicyPack(name=...).
    assert set(project) <= {"runtime", "version", "main", "description", "author", "website", "license"}

    def pins(path: Path) -> dict[str, str]:
        lines = [line.split("#")[0].strip() for line in path.read_text().splitlines()]
        pairs = [line.split("==") for line in lines if "==" in line]
        return {name.lower().replace("_", "-"): version for name, version in pairs}

    pack = pins(POLICY_DIR / "requirements.txt")
    # detect-secrets: settings/credentials.py's rule set, which the pack's secrets-are-secret runs
    assert pack == {"pulumi-policy": "1.21.0", "pulumi": "3.272.0", "detect-secrets": "1.5.0"}
    repo = pins(ROOT / "constraints.txt")
    assert all(repo[name] == version for name, version in pack.items())


# --- Positive: the committed stacks pass every policy --------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("stack", ["dev", "dev-preview", "saxml-v5e", "jetstream-v5e"])
def test_committed_stacks_pass_every_policy(plans: dict[str, engine.PlanResult], stack: str, form: str) -> None:
    plan = plans[stack]
    found = [
        (res.name, message)
        for res in plan.resources
        for policy in POLICIES
        if isinstance(policy, ResourceValidationPolicy)
        for message, _ in violations(policy, resource_args(res, form=form))
    ]
    assert found == []
    assert violations(tpu_network_jumbo_mtu, stack_args(plan.resources, form=form)) == []


def test_committed_stacks_pass_with_the_dev_reservation_configured(dev: engine.PlanResult) -> None:
    config = {"reservation": DEV_RESERVATION}
    for pool in dev.of_type(NODE_POOL):
        assert messages(tpu_pool_specific_reservation, pool, config=config, form="analyzer") == []


# --- 1. tpu-pool-specific-reservation ------------------------------------------------------------------


def _affinity(props: dict[str, Any]) -> dict[str, Any]:
    affinity: dict[str, Any] = props["nodeConfig"]["reservationAffinity"]
    return affinity


@pytest.mark.parametrize("form", FORMS)
def test_tpu7x_pool_must_consume_its_specific_reservation(dev: engine.PlanResult, form: str) -> None:
    pool = dev.one(NODE_POOL, "cube-sub-block-0")
    for bad in ("ANY_RESERVATION", "NO_RESERVATION"):

        def consume(p: dict[str, Any], bad: str = bad) -> None:
            _affinity(p).update(consumeReservationType=bad)

        props = broken(pool, consume)
        [message] = messages(tpu_pool_specific_reservation, pool, props, form=form)
        assert "NodePool 'cube-sub-block-0'" in message
        assert "tpu7x-standard-4t" in message
        assert f"consumeReservationType is '{bad}'" in message
        assert "allowed: SPECIFIC_RESERVATION" in message


@pytest.mark.parametrize("form", FORMS)
def test_v5e_pool_may_be_on_demand_but_not_any_reservation(saxml: engine.PlanResult, form: str) -> None:
    pool = saxml.one(NODE_POOL, "cube-1")
    assert messages(tpu_pool_specific_reservation, pool, form=form) == []  # NO_RESERVATION, on demand
    props = broken(pool, lambda p: _affinity(p).update(consumeReservationType="ANY_RESERVATION"))
    [message] = messages(tpu_pool_specific_reservation, pool, props, form=form)
    assert "NodePool 'cube-1' (ct5lp-hightpu-4t)" in message
    assert "'ANY_RESERVATION'" in message
    assert "SPECIFIC_RESERVATION, or NO_RESERVATION" in message


def test_tpu_pool_without_reservation_affinity_is_rejected(saxml: engine.PlanResult) -> None:
    pool = saxml.one(NODE_POOL, "cube-2")
    props = broken(pool, lambda p: p["nodeConfig"].pop("reservationAffinity"))
    [message] = messages(tpu_pool_specific_reservation, pool, props, form="recorded")
    assert "NodePool 'cube-2'" in message and "unset" in message and "ANY_RESERVATION" in message


def test_specific_reservation_needs_the_key_and_reservation_paths(dev: engine.PlanResult) -> None:
    pool = dev.one(NODE_POOL, "cube-sub-block-1")

    def change(p: dict[str, Any]) -> None:
        _affinity(p).update(key="reservation", values=["example-tpu7x-reservation"])

    found = messages(tpu_pool_specific_reservation, pool, broken(pool, change), form="recorded")
    assert len(found) == 2
    assert "key is 'reservation'" in found[0] and "compute.googleapis.com/reservation-name" in found[0]
    assert "values has 'example-tpu7x-reservation'" in found[1] and "projects/P/reservations/R" in found[1]

    empty = broken(pool, lambda p: _affinity(p).update(values=[]))
    [message] = messages(tpu_pool_specific_reservation, pool, empty, form="recorded")
    assert "NodePool 'cube-sub-block-1'" in message and "values is empty" in message


def test_cpu_pools_are_not_checked(dev: engine.PlanResult) -> None:
    pool = dev.one(NODE_POOL, "system-pool")
    props = broken(pool, lambda p: p["nodeConfig"].update(reservationAffinity={"consumeReservationType": "ANY"}))
    assert messages(tpu_pool_specific_reservation, pool, props, form="recorded") == []


@pytest.mark.parametrize("form", FORMS)
def test_reservation_config_rejects_other_reservations(dev: engine.PlanResult, form: str) -> None:
    pool = dev.one(NODE_POOL, "cube-sub-block-0")
    value = _affinity(pool.inputs)["values"][0]
    for other in ("projects/example-tpu-project/reservations/other", f"{DEV_RESERVATION[:-3]}"):
        [message] = messages(tpu_pool_specific_reservation, pool, config={"reservation": other}, form=form)
        assert "NodePool 'cube-sub-block-0'" in message
        assert f"values has '{value}'" in message
        assert f"allowed: the reservation '{other}'" in message
    assert messages(tpu_pool_specific_reservation, pool, config={"reservation": DEV_RESERVATION + "/"}, form=form) == []


# --- 2. tpu-network-jumbo-mtu --------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_network_under_tpu_pools_needs_jumbo_mtu(dev: engine.PlanResult, form: str) -> None:
    vpc = dev.one(NETWORK, "vpc")
    props = {vpc.urn: broken(vpc, lambda p: p.update(mtu=1460))}
    [(message, urn)] = violations(tpu_network_jumbo_mtu, stack_args(dev.resources, props, form=form))
    assert urn == vpc.urn
    assert "Network 'vpc' mtu is 1460; allowed: 8896" in message
    assert "cube-sub-block-0" in message and "cube-sub-block-1" in message and "system-pool" not in message

    unset = {vpc.urn: broken(vpc, lambda p: p.pop("mtu"))}
    [(message, _)] = violations(tpu_network_jumbo_mtu, stack_args(dev.resources, unset, form=form))
    assert "Network 'vpc' mtu is unset (GCP default 1460)" in message


def test_network_mtu_is_free_without_tpu_pools(saxml: engine.PlanResult) -> None:
    vpc = saxml.one(NETWORK, "vpc")
    without_tpus = [
        r for r in saxml.resources if not (r.type == NODE_POOL and r.get("nodeConfig.machineType", "").startswith("ct"))
    ]
    props = {vpc.urn: broken(vpc, lambda p: p.update(mtu=1460))}
    assert violations(tpu_network_jumbo_mtu, stack_args(without_tpus, props, form="recorded")) == []
    assert len(violations(tpu_network_jumbo_mtu, stack_args(saxml.resources, props, form="recorded"))) == 1


# --- 3. cluster-deletion-protection --------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_cluster_keeps_deletion_protection(jetstream: engine.PlanResult, form: str) -> None:
    cluster = jetstream.one(CLUSTER)
    props = broken(cluster, lambda p: p.update(deletionProtection=False))
    [message] = messages(cluster_deletion_protection, cluster, props, form=form)
    assert "Cluster 'cluster' deletionProtection is false; allowed: true" in message
    assert "allowClusterDeletion" in message

    unset = broken(cluster, lambda p: p.pop("deletionProtection"))
    [message] = messages(cluster_deletion_protection, cluster, unset, form=form)
    assert "deletionProtection is unset" in message

    assert messages(cluster_deletion_protection, cluster, props, config={"allowClusterDeletion": True}, form=form) == []
    assert messages(cluster_deletion_protection, cluster, props, config={"allowClusterDeletion": False}, form=form)


# --- 4. no-public-load-balancer ------------------------------------------------------------------------


def _annotations(props: dict[str, Any]) -> dict[str, Any]:
    annotations: dict[str, Any] = props["metadata"]["annotations"]
    return annotations


@pytest.mark.parametrize("form", FORMS)
def test_load_balancer_must_be_internal(saxml: engine.PlanResult, form: str) -> None:
    service = saxml.one(SERVICE, "http-service")
    removed = broken(service, lambda p: p["metadata"].pop("annotations"))
    [message] = messages(no_public_load_balancer, service, removed, form=form)
    assert "Service 'http-service' is a LoadBalancer" in message
    assert "networking.gke.io/load-balancer-type unset" in message
    assert "allowed: annotation networking.gke.io/load-balancer-type: Internal" in message

    external = broken(service, lambda p: _annotations(p).update({"networking.gke.io/load-balancer-type": "External"}))
    [message] = messages(no_public_load_balancer, service, external, form=form)
    assert "'External'" in message


def test_cluster_ip_services_need_no_annotation(dev: engine.PlanResult) -> None:
    service = dev.one(SERVICE, "epp-service")
    assert service.get("spec.type") == "ClusterIP"
    assert messages(no_public_load_balancer, service, form="analyzer") == []


@pytest.mark.parametrize("form", FORMS)
def test_external_load_balancer_needs_config_and_source_ranges(jetstream: engine.PlanResult, form: str) -> None:
    service = jetstream.one(SERVICE, "jetstream-service")
    allow = {"allowExternalServices": True}
    external = broken(service, lambda p: p["metadata"].pop("annotations"))

    [message] = messages(no_public_load_balancer, service, external, config=allow, form=form)
    assert "Service 'jetstream-service' is an external LoadBalancer with no spec.loadBalancerSourceRanges" in message

    def ranges(*cidrs: str) -> dict[str, Any]:
        return broken(
            service,
            lambda p: (p["metadata"].pop("annotations"), p["spec"].update(loadBalancerSourceRanges=list(cidrs))),
        )

    assert messages(no_public_load_balancer, service, ranges("10.0.0.0/8"), config=allow, form=form) == []
    [message] = messages(no_public_load_balancer, service, ranges("10.0.0.0/8", "0.0.0.0/0"), config=allow, form=form)
    assert "Service 'jetstream-service' spec.loadBalancerSourceRanges ['10.0.0.0/8', '0.0.0.0/0']" in message
    assert "together cover 0.0.0.0/0, wider than a /8" in message
    # The settings' rule, by union: two halves of the internet are the internet (settings/exposure.py).
    [message] = messages(no_public_load_balancer, service, ranges("0.0.0.0/1", "128.0.0.0/1"), config=allow, form=form)
    assert "together cover 0.0.0.0/0" in message and "allowed: ranges whose union has no block wider than /8" in message
    [message] = messages(no_public_load_balancer, service, ranges("::/0"), config=allow, form=form)
    assert "'::/0', wider than an IPv6 /32" in message
    # Source ranges alone do not make an external load balancer acceptable without the config.
    assert messages(no_public_load_balancer, service, ranges("10.0.0.0/8"), form=form)


# --- 5. pinned-images ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "problem"),
    [
        ("ghcr.io/llm-d/llm-d-router-endpoint-picker", "no tag"),
        ("ghcr.io/llm-d/llm-d-router-endpoint-picker:latest", "'latest'"),
        ("localhost:5000/epp", "no tag"),
        ("docker.io/vllm/vllm-tpu:nightly-20260101", "'nightly-20260101'"),
        ("docker.io/vllm/vllm-tpu:v0", "'v0'"),
        ("docker.io/vllm/vllm-tpu:main", "'main'"),
        ("python:3", "'3'"),
        ("python:3.12-slim", "'3.12-slim'"),
        ("docker.io/vllm/vllm-tpu:v1", "'v1' (a major-version line)"),
        ("python@sha256:1234", "malformed digest"),
    ],
)
def test_floating_image_references_are_named(image: str, problem: str) -> None:
    found = guardrails.image_problem(image)
    assert found is not None and problem in found


@pytest.mark.parametrize(
    "image",
    [
        "docker.io/vllm/vllm-tpu:v0.26.0",
        "localhost:5000/epp:v1.2.3",
        "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:jax-0.5.3",
        "us-docker.pkg.dev/cloud-tpu-images/jax-ai-image/tpu:jax0.8.1-rev1",
        "tpuongke/kueue-slice-controller:v0.8.0-200",
        "example.com/builds/tool:20260101",
        "python:3.12.13-slim@sha256:423ed6ab25b1921a477529254bfeeabf5855151dc2c3141699a1bfc852199fbf",
    ],
)
def test_pinned_image_references_pass(image: str) -> None:
    assert guardrails.image_problem(image) is None


@pytest.mark.parametrize("form", FORMS)
def test_workload_images_must_be_pinned(
    dev: engine.PlanResult, saxml: engine.PlanResult, jetstream: engine.PlanResult, form: str
) -> None:
    epp = dev.one(DEPLOYMENT, "epp")
    props = broken(
        epp, lambda p: p["spec"]["template"]["spec"]["containers"][0].update(image="ghcr.io/llm-d/epp:latest")
    )
    [message] = messages(pinned_images, epp, props, form=form)
    assert "Deployment 'epp' container" in message
    assert "image 'ghcr.io/llm-d/epp:latest' has the moving tag 'latest'" in message
    assert "allowed: a pinned tag or digest" in message

    decode = dev.one(LWS, "decode-lws")
    leader = ["spec", "leaderWorkerTemplate", "leaderTemplate", "spec"]

    def untag_sidecar(p: dict[str, Any]) -> None:
        pod = p
        for key in leader:
            pod = pod[key]
        pod["initContainers"][0]["image"] = "ghcr.io/llm-d/llm-d-router-disagg-sidecar"

    [message] = messages(pinned_images, decode, broken(decode, untag_sidecar), form=form)
    assert (
        "LeaderWorkerSet 'decode-lws'" in message
        and "'ghcr.io/llm-d/llm-d-router-disagg-sidecar' has no tag" in message
    )

    jobset = saxml.one(JOBSET, "model-server-set")

    def nightly(p: dict[str, Any]) -> None:
        p["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["image"] = "sax:nightly"

    [message] = messages(pinned_images, jobset, broken(jobset, nightly), form=form)
    assert "JobSet 'model-server-set'" in message and "'sax:nightly'" in message

    lws = jetstream.one(LWS, "jetstream-lws")

    def v0_everywhere(p: dict[str, Any]) -> None:
        for template in ("leaderTemplate", "workerTemplate"):
            for container in p["spec"]["leaderWorkerTemplate"][template]["spec"]["containers"]:
                container["image"] = container["image"].rsplit(":", 1)[0] + ":v0"

    found = messages(pinned_images, lws, broken(lws, v0_everywhere), form=form)
    assert len(found) == 5  # four leader containers and one worker
    assert all("LeaderWorkerSet 'jetstream-lws'" in m and "moving tag 'v0'" in m for m in found)


def test_job_image_digest_is_pinned(dev: engine.PlanResult) -> None:
    job = dev.one(JOB, "job")
    assert "@sha256:" in job.get("spec.template.spec.containers.0.image")
    assert messages(pinned_images, job, form="analyzer") == []


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    ("version", "shown"),
    [("v0", "'v0'"), ("latest", "'latest'"), ("^0.11.0", "'^0.11.0'"), ("0.11", "'0.11'"), (None, "unset")],
)
def test_helm_release_needs_an_exact_version(
    dev: engine.PlanResult, form: str, version: str | None, shown: str
) -> None:
    release = dev.one(RELEASE, "jobset")
    props = broken(release, lambda p: p.update(version=version) if version else p.pop("version"))
    [message] = messages(pinned_images, release, props, form=form)
    assert "Release 'jobset' chart 'oci://registry.k8s.io/jobset/charts/jobset'" in message
    assert f"version is {shown}" in message
    assert "allowed: an exact semantic version" in message


# --- 6. no-broad-roles ---------------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("role", ["roles/storage.admin", "roles/owner", "roles/editor", "roles/storage.objectViewer"])
def test_project_iam_never_grants_broad_roles(saxml: engine.PlanResult, form: str, role: str) -> None:
    member = saxml.one(IAM_MEMBER, "node-account-role")
    [message] = messages(no_broad_roles, member, broken(member, lambda p: p.update(role=role)), form=form)
    assert f"IAMMember 'node-account-role' grants '{role}' on project 'example-tpu-project'" in message
    assert "allowed: narrowly scoped project roles" in message


def test_bindings_and_policies_are_checked_too(saxml: engine.PlanResult) -> None:
    member = saxml.one(IAM_MEMBER, "node-account-role")
    binding = engine.Resource(
        urn=member.urn.replace("iAMMember:IAMMember", "iAMBinding:IAMBinding"),
        type="gcp:projects/iAMBinding:IAMBinding",
        name="owners",
        custom=True,
        remote=False,
        parent=member.parent,
        provider="",
        dependencies=[],
        inputs={"project": "example-tpu-project", "role": "roles/owner", "members": ["user:a@example.com"]},
        outputs={},
    )
    [message] = messages(no_broad_roles, binding, form="analyzer")
    assert "IAMBinding 'owners' grants 'roles/owner'" in message

    document = {"bindings": [{"role": "roles/viewer", "members": []}, {"role": "roles/storage.admin", "members": []}]}
    policy = dataclasses.replace(
        binding,
        type="gcp:projects/iAMPolicy:IAMPolicy",
        name="project-policy",
        inputs={"policyData": json.dumps(document)},
    )
    [message] = messages(no_broad_roles, policy, form="recorded")
    assert "IAMPolicy 'project-policy' grants 'roles/storage.admin'" in message


def test_bucket_level_storage_roles_are_fine(dev: engine.PlanResult) -> None:
    for grant in dev.of_type(BUCKET_IAM_MEMBER):
        assert grant.get("role").startswith("roles/storage.")
        assert messages(no_broad_roles, grant, form="recorded") == []


# --- 7. secrets-are-secret -----------------------------------------------------------------------------


def test_secret_looking_names() -> None:
    for name in ("HF_TOKEN", "DB_PASSWORD", "clientSecret", "API_KEY", "privateKey", "token"):
        assert guardrails.looks_secret(name), name
    for name in ("TOKENIZER_PATH", "secretName", "secretKeyRef", "HF_HOME", "tokenizerPath", "key"):
        assert not guardrails.looks_secret(name), name


def test_kubernetes_secret_data_must_be_pulumi_secrets(dev: engine.PlanResult) -> None:
    cert = dev.one(K8S_SECRET, "webhook-cert")
    plain = broken(cert, lambda p: p.update(stringData={"tls.key": TOKEN}))
    [message] = messages(secrets_are_secret, cert, plain, form="recorded")
    assert "Secret 'webhook-cert' stringData.tls.key is a plain string" in message
    assert "allowed: a Pulumi secret" in message
    assert TOKEN not in message

    per_value = broken(cert, lambda p: p.update(data={"tls.key": {**SECRET_SIG, "value": TOKEN}}))
    whole_map = broken(cert, lambda p: p.update(stringData={**SECRET_SIG, "value": {"tls.key": TOKEN}}))
    assert messages(secrets_are_secret, cert, per_value, form="recorded") == []
    assert messages(secrets_are_secret, cert, whole_map, form="recorded") == []


def test_secret_markers_do_not_survive_the_analyzer(dev: engine.PlanResult) -> None:
    """pulumi_policy strips secret markers before a policy runs: secretness cannot be checked under the CLI.

    The policy therefore stays silent on plain-vs-secret questions there (rather than flagging every
    real secret as plain) and keeps only the structural env check, which works in both forms.
    """
    cert = dev.one(K8S_SECRET, "webhook-cert")
    wrapped = broken(cert, lambda p: p.update(stringData={**SECRET_SIG, "value": {"tls.key": TOKEN}}))
    assert as_form(wrapped, "analyzer")["stringData"] == {"tls.key": TOKEN}  # marker gone
    plain = broken(cert, lambda p: p.update(stringData={"tls.key": TOKEN}))
    assert messages(secrets_are_secret, cert, plain, form="analyzer") == []


def _leader_env(props: dict[str, Any]) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = props["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["env"]
    return env


@pytest.mark.parametrize("form", FORMS)
def test_token_env_vars_come_from_secrets(dev: engine.PlanResult, form: str) -> None:
    prefill = dev.one(LWS, "prefill-lws")
    for value in (TOKEN, {**SECRET_SIG, "value": TOKEN}):  # a Pulumi secret still lands in the pod spec

        def add_token(p: dict[str, Any], value: Any = value) -> None:
            _leader_env(p).append({"name": "HF_TOKEN", "value": value})

        props = broken(prefill, add_token)
        [message] = messages(secrets_are_secret, prefill, props, form=form)
        assert "LeaderWorkerSet 'prefill-lws' container" in message
        assert "env HF_TOKEN has a literal value; allowed: valueFrom.secretKeyRef" in message
        assert TOKEN not in message

    from_secret = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-secret", "key": "hf_api_token"}}}
    props = broken(prefill, lambda p: _leader_env(p).append(from_secret))
    assert messages(secrets_are_secret, prefill, props, form=form) == []


def test_secret_looking_inputs_must_be_secret(dev: engine.PlanResult) -> None:
    release = dev.one(RELEASE, "kueue")
    props = broken(release, lambda p: p["values"].update(huggingface={"token": TOKEN}))
    [message] = messages(secrets_are_secret, release, props, form="recorded")
    assert "Release 'kueue' input values.huggingface.token is a plain string" in message
    assert TOKEN not in message
    secret = broken(release, lambda p: p["values"].update(huggingface={"token": {**SECRET_SIG, "value": TOKEN}}))
    assert messages(secrets_are_secret, release, secret, form="recorded") == []


# --- Unknown values (preview) --------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_an_unknown_value_a_policy_needs_raises_like_the_sdk_proxy(dev: engine.PlanResult, form: str) -> None:
    cluster = dev.one(CLUSTER)
    props = broken(cluster, lambda p: p.update(deletionProtection=Unknown()))
    with pytest.raises(UnknownValueError) as raised:
        messages(cluster_deletion_protection, cluster, props, form=form)
    assert raised.value.message == "string value at .deletionProtection can't be known during preview"


# --- Through pulumi_policy's analyzer servicer (the CLI's path, without the server) -----------------------


def _servicer(config: dict[str, dict[str, Any]] | None = None) -> _PolicyAnalyzerServicer:
    servicer = _PolicyAnalyzerServicer(guardrails.PACK_NAME, "0.1.0", POLICIES, EnforcementLevel.MANDATORY)
    if config:
        request = proto.ConfigureAnalyzerRequest()
        for name, properties in config.items():
            request.policyConfig[name].properties.update(properties)
        servicer.Configure(request, None)
    return servicer


def _analyze(servicer: _PolicyAnalyzerServicer, res: engine.Resource, props: dict[str, Any] | None = None) -> Any:
    request = proto.AnalyzeRequest(type=res.type, urn=res.urn, name=res.name, properties=_struct(props or res.inputs))
    return servicer.Analyze(request, None).diagnostics


def test_servicer_finds_nothing_in_the_dev_stack(dev: engine.PlanResult) -> None:
    servicer = _servicer()
    assert [d.message for res in dev.resources for d in _analyze(servicer, res)] == []
    stack = proto.AnalyzeStackRequest(
        resources=[
            proto.AnalyzerResource(type=r.type, urn=r.urn, name=r.name, properties=_struct(r.inputs))
            for r in dev.resources
        ]
    )
    assert list(servicer.AnalyzeStack(stack, None).diagnostics) == []


def test_servicer_reports_mandatory_violations_and_applies_config(dev: engine.PlanResult) -> None:
    cluster = dev.one(CLUSTER)
    props = broken(cluster, lambda p: p.update(deletionProtection=False))
    [diagnostic] = _analyze(_servicer(), cluster, props)
    assert diagnostic.policyName == "cluster-deletion-protection"
    assert diagnostic.enforcementLevel == proto.MANDATORY
    assert "Cluster 'cluster' deletionProtection is false" in diagnostic.message

    allowed = _servicer({"cluster-deletion-protection": {"allowClusterDeletion": True}})
    assert list(_analyze(allowed, cluster, props)) == []


def test_servicer_downgrades_unknowns_to_advisory(dev: engine.PlanResult) -> None:
    cluster = dev.one(CLUSTER)
    props = broken(cluster, lambda p: p.update(deletionProtection=Unknown()))
    [diagnostic] = _analyze(_servicer(), cluster, props)
    assert diagnostic.enforcementLevel == proto.ADVISORY
    assert "can't run policy 'cluster-deletion-protection'" in diagnostic.message


# --- Rules shared with the settings: one definition, the same verdict ----------------------------------


def test_the_pack_runs_the_settings_own_rules() -> None:
    """pinned-images and no-public-load-balancer call settings/pins.py and settings/exposure.py, not copies."""
    assert guardrails.image_problem is pins.image_problem
    assert guardrails.chart_problem is pins.chart_problem
    assert guardrails.source_ranges_problem is exposure.source_ranges_problem
    source = (POLICY_DIR / "guardrails.py").read_text()
    assert "def image_problem" not in source and "SEMVER" not in source and "collapse_addresses" not in source


def test_the_pack_imports_the_shared_rules_in_its_own_virtualenv() -> None:
    """As the CLI runs it: policy/venv's interpreter, cwd policy/, only the pack directory on the path."""
    python = POLICY_DIR / "venv" / "bin" / "python"
    if not python.exists():
        pytest.skip("policy/venv is not built (make policy-venv)")
    script = (
        "import runpy, sys, pulumi_policy\n"
        "made = []\n"
        "pulumi_policy.PolicyPack = lambda **kw: made.append(kw)\n"
        "sys.path.insert(0, '.')\n"
        "runpy.run_path('.', run_name='__main__')\n"
        "import settings.pins\n"
        "print(len(made[0]['policies']), settings.pins.__file__, 'pydantic' in sys.modules)\n"
    )
    done = subprocess.run(
        [str(python), "-c", script], cwd=POLICY_DIR, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    count, path, pydantic = done.stdout.split()
    assert int(count) == len(POLICIES)
    assert Path(path) == ROOT / "settings" / "pins.py"
    assert pydantic == "False"  # the shared rules are standard library only


_TAGS = st.one_of(
    st.sampled_from(["latest", "main", "nightly-20260101", "v1", "3", "3.12-slim", "stable", "", "dev-1"]),
    st.builds(
        lambda prefix, x, y, z, suffix: f"{prefix}{x}.{y}.{z}{suffix}",
        st.sampled_from(["", "v", "jax", "jax-", "nightly-"]),
        st.integers(0, 30),
        st.integers(0, 30),
        st.integers(0, 30),
        st.sampled_from(["", "-200", "-rev1", "-slim"]),
    ),
    st.text(st.sampled_from("av19.-_"), min_size=1, max_size=12),
)


@settings(deadline=None, max_examples=60)
@given(tag=_TAGS, digest=st.booleans())
def test_settings_and_pack_agree_on_every_image(dev: engine.PlanResult, tag: str, digest: bool) -> None:
    image = f"ghcr.io/llm-d/llm-d-router-endpoint-picker:{tag}" + (f"@sha256:{'a' * 64}" if digest else "")
    try:
        # The sidecar of the same release, so only the picker's own pin decides.
        sidecar = image.replace("-endpoint-picker", "-disagg-sidecar")
        Versions.model_validate({"endpointPickerImage": image, "routingSidecarImage": sidecar})
        accepted = True
    except ValidationError:
        accepted = False
    epp = dev.one(DEPLOYMENT, "epp")
    props = broken(epp, lambda p: p["spec"]["template"]["spec"]["containers"][0].update(image=image))
    assert (messages(pinned_images, epp, props, form="recorded") == []) == accepted, image


_NETWORKS = st.builds(
    lambda address, prefix: str(ipaddress.IPv4Network((address, prefix), strict=False)),
    st.integers(0, 2**32 - 1),
    st.integers(0, 32),
)


@settings(deadline=None, max_examples=60)
@given(st.lists(_NETWORKS, min_size=1, max_size=6))
def test_settings_and_pack_agree_on_every_source_range_list(jetstream: engine.PlanResult, ranges: list[str]) -> None:
    try:
        HttpExposure.model_validate({"type": "external", "sourceRanges": ranges})
        accepted = True
    except ValidationError:
        accepted = False
    service = jetstream.one(SERVICE, "jetstream-service")
    props = broken(
        service, lambda p: (p["metadata"].pop("annotations"), p["spec"].update(loadBalancerSourceRanges=ranges))
    )
    found = messages(no_public_load_balancer, service, props, config={"allowExternalServices": True}, form="recorded")
    assert (found == []) == accepted, (ranges, found)
