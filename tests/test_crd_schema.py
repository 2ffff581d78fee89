"""Tests of the offline CRD/core validator (tests/crd_schema.py) against the real
upstream CRDs `make crds` takes from their Go modules, at the versions the project pins."""

from __future__ import annotations

import copy
import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.crd_schema import (
    CRD_ROOT_ENV,
    DEFAULT_K8S_VERSION,
    CrdLoadError,
    CrdRegistry,
    CrdVersion,
    UnevaluatedRule,
    _Walker,
    crd_cache,
    crd_root,
    validate_core,
)

_FOUND = crd_root()
if _FOUND is None:
    pytest.skip(
        f"upstream CRDs not found: run `make crds` (or set {CRD_ROOT_ENV})",
        allow_module_level=True,
    )
ROOT: Path = _FOUND

# Two sets of versions, each served by the Go module proxy (tools/crds/pins.tsv): the program's
# pins and a neighbour of each, so the validator is not tuned to one release.
PINS = {
    "kueue": "v0.19.2",
    "jobset": "v0.11.1",
    "lws": "v0.8.0",
    "gateway-api": "v1.6.1",
    "gateway-api-inference-extension": "v1.5.0",
}
NEWEST = {
    "kueue": "v0.19.2",
    "jobset": "v0.12.0",
    "lws": "v0.9.0",
    "gateway-api": "v1.6.1",
    "gateway-api-inference-extension": "v1.6.0",
}
KUEUE = "kueue.x-k8s.io/v1beta2"


@pytest.fixture(scope="module")
def registry() -> CrdRegistry:
    return CrdRegistry.load(ROOT, PINS)


@pytest.fixture(scope="module")
def newest() -> CrdRegistry:
    return CrdRegistry.load(ROOT, NEWEST)


# --------------------------------------------------------------------------
# Valid objects, shaped like the ones the project generates
# --------------------------------------------------------------------------


def cluster_queue() -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": "tpu-v6e-cq"},
        "spec": {
            "namespaceSelector": {},
            "cohortName": "tpu",
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", "google.com/tpu"],
                    "flavors": [
                        {
                            "name": "tpu-v6e-4x4",
                            "resources": [
                                {"name": "cpu", "nominalQuota": 1000},
                                {"name": "memory", "nominalQuota": "4000Gi"},
                                {"name": "google.com/tpu", "nominalQuota": 64, "borrowingLimit": "16"},
                            ],
                        }
                    ],
                }
            ],
            "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
            "admissionChecksStrategy": {"admissionChecks": [{"name": "dws-prov"}]},
        },
    }


def topology() -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "Topology",
        "metadata": {"name": "gke-tpu-topology"},
        "spec": {
            "levels": [
                {"nodeLabel": "cloud.google.com/gce-topology-block"},
                {"nodeLabel": "cloud.google.com/gke-tpu-slice-4x4-id"},
                {"nodeLabel": "kubernetes.io/hostname"},
            ]
        },
    }


def resource_flavor() -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "ResourceFlavor",
        "metadata": {"name": "tpu-v6e-4x4", "labels": {"app.kubernetes.io/part-of": "tpu-slicing"}},
        "spec": {
            "nodeLabels": {
                "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                "cloud.google.com/gke-tpu-topology": "4x4",
            },
            "topologyName": "gke-tpu-topology",
            "tolerations": [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }


def admission_check() -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "AdmissionCheck",
        "metadata": {"name": "dws-prov"},
        "spec": {
            "controllerName": "kueue.x-k8s.io/provisioning-request",
            "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": "dws-config"},
        },
    }


def local_queue() -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": "tpu-lq", "namespace": "team-a"},
        "spec": {"clusterQueue": "tpu-v6e-cq"},
    }


def priority_class(api_version: str = "kueue.x-k8s.io/v1beta1") -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": "high-priority"},
        "value": 10000,
        "description": "Serving traffic",
    }


def job_set() -> dict[str, Any]:
    pod_spec = {
        "restartPolicy": "Never",
        "nodeSelector": {
            "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
            "cloud.google.com/gke-tpu-topology": "4x4",
        },
        "containers": [
            {
                "name": "jax",
                "image": "python:3.11-slim",
                "command": ["python", "-c", "import jax; print(jax.device_count())"],
                "ports": [{"containerPort": 8471}],
                "resources": {"limits": {"google.com/tpu": 4}, "requests": {"cpu": "1", "memory": "8Gi"}},
            }
        ],
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": "tpu-train",
            "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": "tpu-lq"},
            "annotations": {"alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"},
        },
        "spec": {
            "failurePolicy": {"maxRestarts": 3},
            "successPolicy": {"operator": "All"},
            "network": {"enableDNSHostnames": True},
            "replicatedJobs": [
                {
                    "name": "slice",
                    "replicas": 2,
                    "template": {
                        "metadata": {"labels": {"app": "tpu-train"}},
                        "spec": {
                            "parallelism": 4,
                            "completions": 4,
                            "backoffLimit": 0,
                            "template": {"metadata": {"labels": {"app": "tpu-train"}}, "spec": pod_spec},
                        },
                    },
                }
            ],
        },
    }


def leader_worker_set() -> dict[str, Any]:
    container = {
        "name": "vllm",
        "image": "vllm/vllm-tpu:latest",
        "args": ["--model", "meta-llama/Llama-3.1-8B"],
        "ports": [{"containerPort": 8000, "name": "http"}],
        "resources": {"limits": {"google.com/tpu": "4"}},
    }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm", "namespace": "serving"},
        "spec": {
            "replicas": 2,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": 4,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {"metadata": {"labels": {"role": "leader"}}, "spec": {"containers": [container]}},
                "workerTemplate": {"spec": {"containers": [container]}},
            },
            "rolloutStrategy": {"rollingUpdateConfiguration": {"maxSurge": "25%", "maxUnavailable": 1}},
        },
    }


def gateway() -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": "inference-gateway", "namespace": "serving"},
        "spec": {
            "gatewayClassName": "gke-l7-regional-external-managed",
            "listeners": [
                {"name": "http", "protocol": "HTTP", "port": 80},
                {
                    "name": "https",
                    "protocol": "HTTPS",
                    "port": 443,
                    "hostname": "llm.example.com",
                    "tls": {"mode": "Terminate", "certificateRefs": [{"name": "llm-cert"}]},
                },
            ],
            "addresses": [{"type": "IPAddress", "value": "10.0.0.7"}],
            "infrastructure": {"labels": {"team": "ml"}, "annotations": {"example.com/owner": "ml-platform"}},
        },
    }


def http_route() -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "llm-route", "namespace": "serving"},
        "spec": {
            "parentRefs": [{"name": "inference-gateway"}],
            "hostnames": ["llm.example.com"],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
                    "filters": [
                        {
                            "type": "URLRewrite",
                            "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}},
                        },
                        {
                            "type": "RequestHeaderModifier",
                            "requestHeaderModifier": {"set": [{"name": "x-route", "value": "llm"}]},
                        },
                    ],
                    "backendRefs": [
                        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "vllm-pool"}
                    ],
                    "timeouts": {"request": "300s", "backendRequest": "120s"},
                }
            ],
        },
    }


def inference_pool() -> dict[str, Any]:
    return {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": "vllm-pool", "namespace": "serving"},
        "spec": {
            "selector": {"matchLabels": {"app": "vllm"}},
            "targetPorts": [{"number": 8000}],
            "endpointPickerRef": {"name": "vllm-pool-epp", "port": {"number": 9002}},
        },
    }


VALID = {
    "ClusterQueue": cluster_queue,
    "Topology": topology,
    "ResourceFlavor": resource_flavor,
    "AdmissionCheck": admission_check,
    "LocalQueue": local_queue,
    "WorkloadPriorityClass-v1beta2": lambda: priority_class(KUEUE),
    "JobSet": job_set,
    "LeaderWorkerSet": leader_worker_set,
    "Gateway": gateway,
    "HTTPRoute": http_route,
    "InferencePool": inference_pool,
}


def only(errors: list[str]) -> str:
    """The single error, with the whole list shown when there isn't exactly one."""
    assert len(errors) == 1, errors
    return errors[0]


# --------------------------------------------------------------------------
# Loading and lookup
# --------------------------------------------------------------------------


def test_the_default_root_is_what_make_crds_laid_out_from_the_pinned_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CRD_ROOT_ENV, raising=False)
    root = crd_root()
    assert root == crd_cache()
    pins = Path(__file__).resolve().parents[1] / "tools" / "crds" / "pins.tsv"
    rows = [line.split("\t") for line in pins.read_text().splitlines() if line and not line.startswith("#")]
    assert len(rows) == 15
    for component, version, _module, path, sha256 in rows:
        placed = root / component / version / Path(path).name
        assert hashlib.sha256(placed.read_bytes()).hexdigest() == sha256, placed


def test_crd_root_env_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CRD_ROOT_ENV, str(tmp_path))
    assert crd_root() == tmp_path
    monkeypatch.setenv(CRD_ROOT_ENV, str(tmp_path / "missing"))
    assert crd_root() is None


def test_load_reports_missing_pinned_version() -> None:
    with pytest.raises(CrdLoadError, match=r"kueue.*v9\.9\.9.*does not exist.*v0\.19\.2"):
        CrdRegistry.load(ROOT, {**PINS, "kueue": "v9.9.9"})


def test_registry_knows_pinned_kinds(registry: CrdRegistry) -> None:
    assert ("kueue.x-k8s.io", "ClusterQueue") in registry.kinds
    assert ("inference.networking.k8s.io", "InferencePool") in registry.kinds
    assert len(registry.kinds) == 12
    crd = registry.lookup(KUEUE, "Topology")
    assert crd is not None and not crd.namespaced and crd.source.parent.name == "v0.19.2"


# --------------------------------------------------------------------------
# Positive cases
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_objects(registry: CrdRegistry, newest: CrdRegistry, name: str) -> None:
    obj = VALID[name]()
    assert registry.validate(obj) == []
    assert newest.validate(obj) == []


def test_validate_does_not_mutate_input(registry: CrdRegistry) -> None:
    obj = cluster_queue()
    before = copy.deepcopy(obj)
    registry.validate(obj)
    assert obj == before  # defaults are applied to a private copy


def test_v1beta1_priority_class_is_valid_but_deprecated(registry: CrdRegistry) -> None:
    # Every Kueue v1beta1 version is deprecated in v0.17.4: schema-valid, yet we
    # should not generate it.
    assert only(registry.validate(priority_class())) == (
        "apiVersion: kueue.x-k8s.io/v1beta1 WorkloadPriorityClass is deprecated "
        "(This version is deprecated. Use v1beta2 instead.); use v1beta2"
    )


def test_integral_floats_are_integers(registry: CrdRegistry) -> None:
    # Pulumi hands every number over as a float; 10000.0 reaches the API server as 10000.
    obj = priority_class(KUEUE)
    obj["value"] = 10000.0
    assert registry.validate(obj) == []
    obj["value"] = 0.5
    assert only(registry.validate(obj)) == "value: Invalid value: 0.5: must be of type integer, got number"


def test_tuples_are_arrays(registry: CrdRegistry) -> None:
    obj = topology()
    obj["spec"]["levels"] = tuple(obj["spec"]["levels"])
    assert registry.validate(obj) == []


def test_rfc1123_and_case_insensitive_patterns(registry: CrdRegistry) -> None:
    # AdmissionCheck parameters.kind uses ^(?i)... which only RE2 accepts mid-pattern.
    obj = admission_check()
    obj["spec"]["parameters"]["kind"] = "provisioningrequestCONFIG"
    assert registry.validate(obj) == []
    obj["spec"]["parameters"]["kind"] = "Provisioning_Request"
    assert "spec.parameters.kind: Invalid value" in only(registry.validate(obj))


# --------------------------------------------------------------------------
# Negative cases: schema
# --------------------------------------------------------------------------


def test_undeclared_field(registry: CrdRegistry) -> None:
    obj = cluster_queue()
    obj["spec"]["resourceGroups"][0]["flavors"][0]["weight"] = 1
    assert only(registry.validate(obj)) == (
        'spec.resourceGroups[0].flavors[0].weight: unknown field "weight": '
        "not declared in the CRD schema (the API server would prune it)"
    )


def test_v1beta1_field_in_v1beta2_is_undeclared(registry: CrdRegistry) -> None:
    # v1beta2 renamed spec.cohort to spec.cohortName; the old name is silently pruned.
    obj = cluster_queue()
    obj["spec"]["cohort"] = obj["spec"].pop("cohortName")
    errors = registry.validate(obj)
    assert 'spec.cohort: unknown field "cohort"' in errors[0]
    # ...and without cohortName the borrowingLimit CEL rule fires too.
    assert errors[1] == "spec: Invalid value: borrowingLimit must be nil when cohort is empty"


def test_wrong_type(registry: CrdRegistry) -> None:
    obj = leader_worker_set()
    obj["spec"]["replicas"] = "2"
    assert only(registry.validate(obj)) == 'spec.replicas: Invalid value: "2": must be of type integer, got string'


def test_int_or_string(registry: CrdRegistry) -> None:
    obj = cluster_queue()
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 1.5
    assert only(registry.validate(obj)) == (
        "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: "
        "Invalid value: 1.5: must be an integer or a string (int-or-string)"
    )


def test_quantity_pattern(registry: CrdRegistry) -> None:
    obj = cluster_queue()
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = "4 TB"
    error = only(registry.validate(obj))
    assert error.startswith('spec.resourceGroups[0].flavors[0].resources[1].nominalQuota: Invalid value: "4 TB"')


def test_bad_enum(registry: CrdRegistry) -> None:
    obj = cluster_queue()
    obj["spec"]["queueingStrategy"] = "FIFO"
    assert only(registry.validate(obj)) == (
        'spec.queueingStrategy: Unsupported value: "FIFO": supported values: "StrictFIFO", "BestEffortFIFO"'
    )


def test_missing_required(registry: CrdRegistry) -> None:
    obj = cluster_queue()
    del obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"]
    assert only(registry.validate(obj)) == "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: Required value"


def test_required_satisfied_by_default(registry: CrdRegistry) -> None:
    # rolloutStrategy.type is required but defaulted, as the API server does.
    obj = leader_worker_set()
    assert "type" not in obj["spec"]["rolloutStrategy"]
    assert registry.validate(obj) == []


def test_pattern_mismatch(registry: CrdRegistry) -> None:
    obj = cluster_queue()
    obj["spec"]["resourceGroups"][0]["flavors"][0]["name"] = "TPU_v6e"
    assert only(registry.validate(obj)).startswith(
        'spec.resourceGroups[0].flavors[0].name: Invalid value: "TPU_v6e": should match \'^[a-z0-9]'
    )


def test_length_and_range(registry: CrdRegistry) -> None:
    obj = inference_pool()
    obj["spec"]["targetPorts"][0]["number"] = 70000
    obj["spec"]["endpointPickerRef"]["name"] = ""
    assert sorted(registry.validate(obj)) == [
        'spec.endpointPickerRef.name: Invalid value: "": should be at least 1 chars long',
        "spec.targetPorts[0].number: Invalid value: 70000: should be less than or equal to 65535",
    ]


def test_min_max_items_and_properties(registry: CrdRegistry) -> None:
    obj = topology()
    obj["spec"]["levels"] = []
    assert only(registry.validate(obj)) == "spec.levels: Invalid value: 0 items: should have at least 1 items"
    obj = resource_flavor()
    obj["spec"]["nodeLabels"] = {f"example.com/l{i}": "x" for i in range(9)}
    assert only(registry.validate(obj)) == "spec.nodeLabels: Too many: 9: must have at most 8 properties"


def test_int32_range(registry: CrdRegistry) -> None:
    obj = priority_class(KUEUE)
    obj["value"] = 2**31
    assert only(registry.validate(obj)) == "value: Invalid value: 2147483648: out of range for int32"


def test_list_map_keys_unique(registry: CrdRegistry) -> None:
    obj = cluster_queue()
    flavors = obj["spec"]["resourceGroups"][0]["flavors"]
    flavors.append(copy.deepcopy(flavors[0]))
    assert only(registry.validate(obj)) == (
        'spec.resourceGroups[0].flavors[1]: Duplicate value: map list entry with name="tpu-v6e-4x4"'
    )


def test_list_set_unique(registry: CrdRegistry) -> None:
    obj = cluster_queue()
    obj["spec"]["admissionChecksStrategy"]["admissionChecks"][0]["onFlavors"] = ["a", "a"]
    assert only(registry.validate(obj)) == (
        'spec.admissionChecksStrategy.admissionChecks[0].onFlavors[1]: Duplicate value: "a"'
    )


def test_null_is_flagged(registry: CrdRegistry) -> None:
    obj = local_queue()
    obj["spec"]["clusterQueue"] = None
    assert only(registry.validate(obj)).startswith("spec.clusterQueue: Invalid value: null: field is not nullable")


def test_non_json_value(registry: CrdRegistry) -> None:
    class Output:  # stands in for a pulumi.Output leaking into a manifest
        pass

    obj = local_queue()
    obj["spec"]["clusterQueue"] = Output()
    assert only(registry.validate(obj)) == (
        "spec.clusterQueue: Invalid value: non-JSON value of Python type Output: not representable in JSON"
    )


def test_one_of_and_format(registry: CrdRegistry) -> None:
    obj = gateway()
    obj["spec"]["addresses"] = [{"type": "IPAddress", "value": "10.0.0.300"}]
    error = only(registry.validate(obj))
    assert error.startswith("spec.addresses[0]: Invalid value: must match exactly one oneOf schema, matched 0")
    assert "must be a valid ipv4" in error and "must be a valid ipv6" in error


def test_status_is_flagged(registry: CrdRegistry) -> None:
    obj = local_queue()
    obj["status"] = {}
    assert only(registry.validate(obj)).startswith("status: Forbidden: the status subresource is enabled")


# --------------------------------------------------------------------------
# Negative cases: CEL rules (real x-kubernetes-validations from the CRDs)
# --------------------------------------------------------------------------


def test_cel_borrowing_limit_needs_cohort(registry: CrdRegistry) -> None:
    obj = cluster_queue()
    del obj["spec"]["cohortName"]
    assert only(registry.validate(obj)) == "spec: Invalid value: borrowingLimit must be nil when cohort is empty"


def test_cel_flavor_resources_match_covered_resources(registry: CrdRegistry) -> None:
    obj = cluster_queue()
    obj["spec"]["resourceGroups"][0]["coveredResources"].append("nvidia.com/gpu")
    assert only(registry.validate(obj)) == (
        "spec.resourceGroups[0]: Invalid value: flavors must have the same number of resources as the coveredResources"
    )


def test_cel_sees_defaults(registry: CrdRegistry) -> None:
    # whenCanBorrow defaults to MayStopSearch, so preference alone violates the rule.
    obj = cluster_queue()
    obj["spec"]["flavorFungibility"] = {"preference": "BorrowingOverPreemption"}
    assert only(registry.validate(obj)) == (
        "spec.flavorFungibility: Invalid value: preference can only be set when both "
        "whenCanBorrow and whenCanPreempt are TryNextFlavor"
    )
    obj["spec"]["flavorFungibility"]["whenCanBorrow"] = "TryNextFlavor"
    assert registry.validate(obj) == []


def test_cel_preemption(registry: CrdRegistry) -> None:
    obj = cluster_queue()
    obj["spec"]["preemption"] = {"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "LowerPriority"}}
    assert only(registry.validate(obj)) == (
        "spec.preemption: Invalid value: reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never"
    )


def test_cel_topology_hostname_must_be_last(registry: CrdRegistry) -> None:
    obj = topology()
    obj["spec"]["levels"].reverse()
    assert only(registry.validate(obj)) == (
        "spec.levels: Invalid value: the kubernetes.io/hostname label can only be used at the lowest level of topology"
    )


def test_cel_topology_levels_unique(registry: CrdRegistry) -> None:
    obj = topology()
    obj["spec"]["levels"].insert(0, {"nodeLabel": "cloud.google.com/gce-topology-block"})
    assert only(registry.validate(obj)) == "spec.levels: Invalid value: must be unique"


def test_cel_resource_flavor_topology_needs_node_labels(registry: CrdRegistry) -> None:
    obj = resource_flavor()
    obj["spec"]["nodeLabels"] = {}
    message = "at least one nodeLabel is required when topology is set"
    assert only(registry.validate(obj)) == f"spec: Invalid value: {message}"


def test_cel_tolerations(registry: CrdRegistry) -> None:
    obj = resource_flavor()
    obj["spec"]["tolerations"] = [{"operator": "Equal", "value": "x"}]
    assert only(registry.validate(obj)) == (
        "spec.tolerations: Invalid value: operator must be Exists when 'key' is empty, "
        "which means 'match all values and all keys'"
    )


def test_cel_inference_pool_epp_port_required(registry: CrdRegistry, newest: CrdRegistry) -> None:
    # kind defaults to Service, so the rule needs the default applied to fire.
    obj = inference_pool()
    del obj["spec"]["endpointPickerRef"]["port"]
    message = "port is required when kind is 'Service' or unspecified (defaults to 'Service')"
    assert only(registry.validate(obj)) == f"spec.endpointPickerRef: Invalid value: {message}"
    assert only(newest.validate(obj)) == f"spec.endpointPickerRef: Invalid value: {message}"


def test_inference_pool_epp_required_only_in_v1_5(registry: CrdRegistry, newest: CrdRegistry) -> None:
    obj = inference_pool()
    del obj["spec"]["endpointPickerRef"]
    assert only(registry.validate(obj)) == "spec.endpointPickerRef: Required value"
    assert newest.validate(obj) == []


def test_cel_inference_pool_ports_unique(registry: CrdRegistry) -> None:
    obj = inference_pool()
    obj["spec"]["targetPorts"] = [{"number": 8000}, {"number": 8000}]
    assert only(registry.validate(obj)) == "spec.targetPorts: Invalid value: port number must be unique"


def test_cel_jobset_startup_policy_vs_depends_on(registry: CrdRegistry) -> None:
    obj = job_set()
    second = copy.deepcopy(obj["spec"]["replicatedJobs"][0])
    second["name"] = "workers"
    second["dependsOn"] = [{"name": "slice", "status": "Ready"}]
    obj["spec"]["replicatedJobs"].append(second)
    assert registry.validate(obj) == []
    obj["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    message = "StartupPolicy and DependsOn APIs are mutually exclusive"
    assert only(registry.validate(obj)) == f"spec: Invalid value: {message}"


def test_cel_gateway_listener_names_unique(registry: CrdRegistry) -> None:
    obj = gateway()
    obj["spec"]["listeners"][1]["name"] = "http"
    errors = registry.validate(obj)
    assert 'spec.listeners[1]: Duplicate value: map list entry with name="http"' in errors
    assert "spec.listeners: Invalid value: Listener name must be unique within the Gateway" in errors


def test_cel_gateway_split_and_matches(registry: CrdRegistry) -> None:
    # Uses the strings-library split() bound by the validator, and RE2 matches().
    obj = gateway()
    obj["spec"]["infrastructure"]["labels"] = {"Bad Key": "x"}
    error = only(registry.validate(obj))
    assert error.startswith("spec.infrastructure.labels: Invalid value: Label keys must be in the form")


def test_cel_gateway_split_prefix_length(registry: CrdRegistry) -> None:
    obj = gateway()
    obj["spec"]["infrastructure"]["labels"] = {"a" * 253 + "/team": "ml"}
    assert only(registry.validate(obj)) == (
        "spec.infrastructure.labels: Invalid value: If specified, the label key's prefix must be a DNS "
        "subdomain not longer than 253 characters in total."
    )


def test_cel_root_rule_sees_metadata_name() -> None:
    # No shipped CRD has a root-level rule, so exercise the API server's root view here.
    schema = {
        "type": "object",
        "properties": {"metadata": {"type": "object"}},
        "x-kubernetes-validations": [{"rule": "self.metadata.name.startsWith('tpu-')", "message": "prefix"}],
    }
    crd = CrdVersion("xs.example.com", "example.com", "X", "v1", False, True, True, False, None, False, schema, ROOT)
    walker = _Walker(CrdRegistry([crd]), crd)
    walker.node({"metadata": {"name": "gpu-a", "labels": {"a": "b"}}}, schema, ())
    assert walker.errors == ["<root>: Invalid value: prefix"]


def test_cel_http_route_filters(registry: CrdRegistry) -> None:
    obj = http_route()
    filters = obj["spec"]["rules"][0]["filters"]
    filters.append({"type": "RequestRedirect", "requestRedirect": {"statusCode": 302}})
    assert registry.validate(obj) == [
        "spec.rules[0].filters: Invalid value: May specify either httpRouteFilterRequestRedirect "
        "or httpRouteFilterRequestRewrite, but not both",
        "spec.rules[0]: Invalid value: RequestRedirect filter must not be used together with backendRefs",
    ]


def test_cel_http_route_timeouts_use_duration(registry: CrdRegistry) -> None:
    obj = http_route()
    obj["spec"]["rules"][0]["timeouts"] = {"request": "10s", "backendRequest": "20s"}
    assert only(registry.validate(obj)) == (
        "spec.rules[0].timeouts: Invalid value: backendRequest timeout cannot be longer than request timeout"
    )


# --------------------------------------------------------------------------
# Negative cases: kind, version, metadata
# --------------------------------------------------------------------------


def test_unknown_kind(registry: CrdRegistry) -> None:
    # Cohort is a real Kueue kind, but its CRD is not among the pinned files.
    obj = {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": "tpu"}, "spec": {}}
    error = only(registry.validate(obj))
    assert error.startswith("kind: unknown kind 'Cohort' for apiVersion 'kueue.x-k8s.io/v1beta2' (known kinds in")
    assert "ClusterQueue" in error


def test_unknown_group_and_core_kinds(registry: CrdRegistry) -> None:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "y"}}
    assert only(registry.validate(obj)) == (
        "kind: unknown kind 'ConfigMap' for apiVersion 'v1' (core API group; use validate_core())"
    )


def test_unserved_version(registry: CrdRegistry) -> None:
    obj = cluster_queue()
    obj["apiVersion"] = "kueue.x-k8s.io/v1alpha1"
    assert only(registry.validate(obj)) == (
        "apiVersion: version 'v1alpha1' is not served by CRD clusterqueues.kueue.x-k8s.io (served: v1beta1, v1beta2)"
    )


def test_deprecated_version_is_still_schema_checked(registry: CrdRegistry) -> None:
    obj = cluster_queue()
    obj["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    errors = registry.validate(obj)
    assert errors[0].startswith("apiVersion: kueue.x-k8s.io/v1beta1 ClusterQueue is deprecated")
    assert 'spec.cohortName: unknown field "cohortName"' in errors[1]


def test_namespace_on_cluster_scoped_kind(registry: CrdRegistry) -> None:
    obj = cluster_queue()
    obj["metadata"]["namespace"] = "default"
    assert only(registry.validate(obj)) == (
        "metadata.namespace: Forbidden: ClusterQueue is cluster-scoped and must not set a namespace"
    )


def test_namespaced_kind_needs_namespace(registry: CrdRegistry) -> None:
    obj = local_queue()
    del obj["metadata"]["namespace"]
    assert only(registry.validate(obj)) == "metadata.namespace: Required value: LocalQueue is namespaced"


def test_metadata_name_and_labels(registry: CrdRegistry) -> None:
    obj = topology()
    obj["metadata"] = {"name": "GKE_Topology", "labels": {"bad key/x/y": "ok", "app": "-bad-"}, "labels2": {}}
    errors = registry.validate(obj)
    assert errors[0].startswith("metadata.labels2: unknown ObjectMeta field")
    assert errors[1].startswith("metadata.name: Invalid value: 'GKE_Topology': a lowercase RFC 1123 subdomain")
    assert errors[2].startswith("metadata.labels[bad key/x/y]: Invalid value")
    assert errors[-1].startswith("metadata.labels.app: Invalid value: '-bad-': a valid label")
    obj["metadata"] = {}
    assert only(registry.validate(obj)) == "metadata.name: Required value"
    obj["metadata"] = {"name": "x" * 254}
    assert only(registry.validate(obj)).endswith("must be no more than 253 characters")


# --------------------------------------------------------------------------
# CEL coverage
# --------------------------------------------------------------------------

# The only rules not evaluated for the pinned versions are transition rules
# (they compare with oldSelf, which exists only on update), one entry per
# served version of the CRD that carries them.
OLD_SELF_RULES = {
    ("admissionchecks.kueue.x-k8s.io", "spec.controllerName"): 1,
    ("localqueues.kueue.x-k8s.io", "spec.clusterQueue"): 1,
    ("resourceflavors.kueue.x-k8s.io", "spec"): 3,
    ("topologies.kueue.x-k8s.io", "spec.levels"): 1,
    ("jobsets.jobset.x-k8s.io", "spec.failurePolicy"): 1,
    ("jobsets.jobset.x-k8s.io", "spec.network"): 1,
    ("jobsets.jobset.x-k8s.io", "spec.replicatedJobs[*].dependsOn"): 1,
    ("jobsets.jobset.x-k8s.io", "spec.startupPolicy"): 1,
    ("jobsets.jobset.x-k8s.io", "spec.successPolicy"): 1,
    ("jobsets.jobset.x-k8s.io", "spec.volumeClaimPolicies"): 1,
    ("gatewayclasses.gateway.networking.k8s.io", "spec.controllerName"): 1,
}


def _transition(rules: list[UnevaluatedRule]) -> Iterator[UnevaluatedRule]:
    return (r for r in rules if "oldSelf" in r.rule)


def test_unevaluated_rules(registry: CrdRegistry) -> None:
    assert all(rule.reason for rule in registry.unevaluated_rules)
    others = {(r.crd, r.path, r.reason) for r in registry.unevaluated_rules if "oldSelf" not in r.rule}
    assert others == set()
    counts: dict[tuple[str, str], int] = {}
    versions: dict[str, set[str]] = {}
    for rule in _transition(registry.unevaluated_rules):
        assert rule.reason == "transition rule: references oldSelf, which only exists on update"
        version, _, path = rule.path.partition(":")
        versions.setdefault(rule.crd, set()).add(version)
        counts[(rule.crd, path)] = counts.get((rule.crd, path), 0) + 1
    expected = {key: n * len(versions[key[0]]) for key, n in OLD_SELF_RULES.items()}
    assert counts == expected
    assert len(registry.unevaluated_rules) == 20


def test_unevaluated_rules_newest(newest: CrdRegistry) -> None:
    assert {(r.crd, r.path) for r in newest.unevaluated_rules if "oldSelf" not in r.rule} == set()


# --------------------------------------------------------------------------
# Built-in kinds (kubernetes-validate)
# --------------------------------------------------------------------------


def deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "epp", "namespace": "serving", "labels": {"app": "epp"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "epp"}},
            "template": {
                "metadata": {"labels": {"app": "epp"}},
                "spec": {
                    "serviceAccountName": "epp",
                    "containers": [
                        {"name": "epp", "image": "registry.k8s.io/epp:v1.5.0", "ports": [{"containerPort": 9002}]}
                    ],
                },
            },
        },
    }


CORE_VALID: list[dict[str, Any]] = [
    deployment(),
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "serving"}},
    {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "epp", "namespace": "serving"}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "serving"}, "data": {"a": "b"}},
    {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "serving"}, "stringData": {"k": "v"}},
    {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "epp", "namespace": "serving"},
        "spec": {"selector": {"app": "epp"}, "ports": [{"name": "grpc", "port": 9002, "targetPort": 9002}]},
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "system:tpu-slicing:reader"},
        "rules": [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues"], "verbs": ["get", "list"]}],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "epp", "namespace": "serving"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "epp"},
        "subjects": [{"kind": "ServiceAccount", "name": "epp", "namespace": "serving"}],
    },
    {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "smoke", "namespace": "team-a", "labels": {"kueue.x-k8s.io/queue-name": "tpu-lq"}},
        "spec": {
            "suspend": True,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}},
        },
    },
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "tpu-slicing"},
        "webhooks": [
            {
                "name": "pods.tpu-slicing.example.com",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "clientConfig": {"service": {"name": "hook", "namespace": "serving", "path": "/mutate"}},
            }
        ],
    },
]


@pytest.mark.parametrize("obj", CORE_VALID, ids=lambda o: str(o["kind"]))
def test_core_valid(obj: dict[str, Any]) -> None:
    assert validate_core(obj) == []


def test_core_default_version() -> None:
    assert DEFAULT_K8S_VERSION == "1.36.0"
    assert validate_core(deployment(), "1.33.0") == []


def test_core_unknown_field_strict() -> None:
    obj = deployment()
    obj["spec"]["replica"] = 2
    error = only(validate_core(obj))
    assert error.startswith("spec: Additional properties are not allowed ('replica' was unexpected)")


def test_core_wrong_type() -> None:
    obj = deployment()
    obj["spec"]["replicas"] = "2"
    assert only(validate_core(obj)).startswith("spec.replicas: '2' is not of type 'integer'")


def test_core_unknown_kind_and_scope() -> None:
    assert only(validate_core({"apiVersion": "v1", "kind": "Widget", "metadata": {"name": "x"}})).startswith(
        "kind: Couldn't find schema for kind Widget"
    )
    obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "serving", "namespace": "default"}}
    assert only(validate_core(obj)) == (
        "metadata.namespace: Forbidden: Namespace is cluster-scoped and must not set a namespace"
    )
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name", "namespace": "serving"}}
    assert only(validate_core(obj)).startswith("metadata.name: Invalid value: 'Bad_Name'")


def test_validation_is_fast(registry: CrdRegistry) -> None:
    # HTTPRoute (89 CEL rules through celpy's interpreter) dominates, at ~0.1 s.
    start = time.perf_counter()
    for _ in range(3):
        for make in VALID.values():
            registry.validate(make())
    assert time.perf_counter() - start < 3
