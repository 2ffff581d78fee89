"""JetStream's Kubernetes bodies, built directly from its pure functions (no Pulumi engine)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any, NamedTuple, cast

import pytest

from contracts.awaits import LOAD_BALANCER_ADDRESS
from contracts.labels import COMMON_LABELS
from domain.topology import CATALOG, Topology, TopologyError
from tests.crd_schema import CrdRegistry, crd_root, validate_core
from workloads import jetstream
from workloads.jetstream import JetstreamArgs

IMAGES = {
    "maxengine": "us-docker.pkg.dev/cloud-tpu-images/inference/maxengine-server:v0.2.2",
    "http": "us-docker.pkg.dev/cloud-tpu-images/inference/jetstream-http:v0.2.3",
    "pathways": "us-docker.pkg.dev/cloud-tpu-images/inference/jetstream-pathways:v0.2.0",
    "pathways_server": "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:jax-0.5.3",
    "pathways_proxy": "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:jax-0.5.3",
}
CHECKPOINT = "final/unscanned/gemma_7b-it/0/checkpoints/0/items"
TPU_TOLERATION = {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}

SINGLE = JetstreamArgs(
    provider=cast(Any, None),  # the body functions never touch the provider
    project="my-project",
    namespace="jetstream",
    service_account="js-stack-jetstream",
    generation=CATALOG["v5e"],
    topology="2x4",
    machine_type="ct5lp-hightpu-8t",
    slices=2,
    bucket="weights",
    checkpoint_path=CHECKPOINT,
    maxtext_model="gemma-7b",
    tokenizer_path="assets/tokenizer.gemma",
    per_device_batch_size=4,
    max_prefill_predict_length=1024,
    max_target_length=2048,
    quantization="",
    images=IMAGES,
    exposure="internal",
    source_ranges=(),
    pod_cidr="10.16.0.0/14",
)


class Slice(NamedTuple):
    generation: str
    topology: str
    size: int  # LWS group: leader + one Pathways worker per VM
    instance_type: str
    devices: int
    chips_per_vm: int
    machine: str | None = None  # None: the generation's default machine for the shape


MULTI_HOST = [
    Slice("v5e", "4x8", size=9, instance_type="tpuv5e:4x8", devices=32, chips_per_vm=4),
    Slice("v6e", "4x4", size=5, instance_type="tpuv6e:4x4", devices=16, chips_per_vm=4),
    # One VM could hold a v6e 2x4, but GKE also builds it from two 4-chip VMs (tpu/docs/v6e).
    Slice("v6e", "2x4", size=3, instance_type="tpuv6e:2x4", devices=8, chips_per_vm=4, machine="ct6e-standard-4t"),
]
SHAPES = [(case.generation, case.topology) for case in MULTI_HOST if case.machine is None]


def multi(generation: str, topology: str, machine: str | None = None, **changes: Any) -> JetstreamArgs:
    catalog = CATALOG[generation]
    machine = machine or catalog.host_machine(Topology.parse(topology)).name
    return replace(SINGLE, generation=catalog, topology=topology, machine_type=machine, **changes)


def containers(pod_spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in pod_spec["containers"]}


def ports(container: dict[str, Any]) -> list[int]:
    return [p["containerPort"] for p in container["ports"]]


def leader_spec(body: dict[str, Any]) -> dict[str, Any]:
    return body["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]


def worker_spec(body: dict[str, Any]) -> dict[str, Any]:
    return body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def assert_on_the_slice(spec: dict[str, Any], accelerator: str, topology: str) -> None:
    assert spec["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": accelerator,
        "cloud.google.com/gke-tpu-topology": topology,
    }
    assert spec["tolerations"] == [TPU_TOLERATION]
    assert spec["serviceAccountName"] == "js-stack-jetstream"


# --- single host (reference §5.3a) ---------------------------------------------------------


def test_v5e_2x4_is_one_8_chip_vm_served_by_a_deployment() -> None:
    shape = Topology.parse("2x4")
    assert CATALOG["v5e"].host_machine(shape).name == "ct5lp-hightpu-8t"
    assert CATALOG["v5e"].vms(shape) == 1
    assert not jetstream.is_multi_host(SINGLE)
    with pytest.raises(ValueError, match="single VM"):
        jetstream.lws_body(SINGLE)


def test_single_host_deployment() -> None:
    body = jetstream.deployment_body(SINGLE)
    assert (body["apiVersion"], body["kind"]) == ("apps/v1", "Deployment")
    assert body["metadata"]["name"] == "jetstream"
    assert body["metadata"]["namespace"] == "jetstream"
    assert body["metadata"]["labels"].items() >= COMMON_LABELS.items()
    assert body["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    spec = body["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert spec["selector"]["matchLabels"] == spec["template"]["metadata"]["labels"]
    pod = spec["template"]["spec"]
    assert_on_the_slice(pod, "tpu-v5-lite-podslice", "2x4")
    by_name = containers(pod)
    assert list(by_name) == ["maxengine-server", "jetstream-http"]
    engine = by_name["maxengine-server"]
    assert engine["image"] == IMAGES["maxengine"]
    assert ports(engine) == [9000, 9100]
    assert engine["resources"] == {"requests": {"google.com/tpu": "8"}, "limits": {"google.com/tpu": "8"}}
    assert engine["args"] == [
        "model_name=gemma-7b",
        "tokenizer_path=assets/tokenizer.gemma",
        "per_device_batch_size=4",
        "max_prefill_predict_length=1024",
        "max_target_length=2048",
        "async_checkpointing=false",
        "ici_fsdp_parallelism=1",
        "ici_autoregressive_parallelism=-1",
        "ici_tensor_parallelism=1",
        "scan_layers=false",
        "weight_dtype=bfloat16",
        f"load_parameters_path=gs://weights/{CHECKPOINT}",
        "attention=dot_product",
        "prometheus_port=9100",
    ]
    http = by_name["jetstream-http"]
    assert http["image"] == IMAGES["http"]
    assert ports(http) == [8000]
    assert "resources" not in http


def test_int8_quantization_is_passed_only_when_set() -> None:
    assert not any(a.startswith("quantization=") for a in jetstream.maxtext_args(SINGLE))
    assert jetstream.maxtext_args(replace(SINGLE, quantization="int8"))[-1] == "quantization=int8"
    with pytest.raises(ValueError, match="quantization"):
        jetstream.maxtext_args(replace(SINGLE, quantization="int4"))


def test_checkpoint_path_is_joined_without_a_double_slash() -> None:
    args = jetstream.maxtext_args(replace(SINGLE, checkpoint_path=f"/{CHECKPOINT}/"))
    assert f"load_parameters_path=gs://weights/{CHECKPOINT}" in args


def test_http_sidecar_probes_allow_a_slow_load() -> None:
    http = containers(jetstream.deployment_body(SINGLE)["spec"]["template"]["spec"])["jetstream-http"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert http[probe]["httpGet"] == {"path": "/healthcheck", "port": 8000}
    startup = http["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 30 * 60
    assert http["readinessProbe"]["periodSeconds"] <= 10


def test_unknown_image_key_is_reported() -> None:
    images = {k: v for k, v in IMAGES.items() if k != "maxengine"}
    with pytest.raises(ValueError, match="maxengine"):
        jetstream.deployment_body(replace(SINGLE, images=images))


def test_invalid_topology_is_rejected() -> None:
    with pytest.raises(TopologyError):
        jetstream.deployment_body(replace(SINGLE, topology="3x3"))


# --- multi host (reference §5.3c) ----------------------------------------------------------


@pytest.mark.parametrize("case", MULTI_HOST, ids=lambda case: f"{case.generation}-{case.topology}-{case.machine}")
def test_multi_host_leaderworkerset(case: Slice) -> None:
    generation, topology = case.generation, case.topology
    args = multi(generation, topology, case.machine, slices=3)
    assert jetstream.is_multi_host(args)
    with pytest.raises(ValueError, match="several VMs"):
        jetstream.deployment_body(args)
    body = jetstream.lws_body(args)
    assert (body["apiVersion"], body["kind"]) == ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
    assert body["metadata"]["name"] == "jetstream"
    assert body["metadata"]["annotations"] == {
        "leaderworkerset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool",
        "pulumi.com/skipAwait": "true",
    }
    assert body["spec"]["replicas"] == 3
    assert body["spec"]["leaderWorkerTemplate"]["size"] == case.size
    accelerator = CATALOG[generation].accelerator_label

    leader = leader_spec(body)
    assert_on_the_slice(leader, accelerator, topology)
    by_name = containers(leader)
    assert list(by_name) == ["pathways-proxy", "pathways-rm", "jax-tpu", "jetstream-http"]
    assert all("resources" not in c for c in by_name.values()), "the leader takes no chips from the workers"
    scratch = "--gcs_scratch_location=gs://weights/pathways-scratch"

    proxy = by_name["pathways-proxy"]
    assert proxy["image"] == IMAGES["pathways_proxy"]
    assert ports(proxy) == [38681]
    assert "--server_port=38681" in proxy["args"]

    rm = by_name["pathways-rm"]
    assert rm["image"] == IMAGES["pathways_server"]
    assert ports(rm) == [38677]
    assert rm["args"] == [
        "--server_port=38677",
        scratch,
        "--node_type=resource_manager",
        "--instance_count=1",
        f"--instance_type={case.instance_type}",
    ]
    assert rm["env"] == [
        {"name": "HOST_ADDRESS", "value": "$(LWS_LEADER_ADDRESS)"},
        {"name": "TPU_SKIP_MDS_QUERY", "value": "true"},
    ]

    jax = by_name["jax-tpu"]
    assert jax["image"] == IMAGES["pathways"]
    assert ports(jax) == [9000, 9100]
    assert jax["args"][0] == "MaxText/configs/base.yml"
    assert "enable_single_controller=true" in jax["args"]
    assert f"ici_tensor_parallelism={case.devices}" in jax["args"]
    assert "ici_tensor_parallelism=1" not in jax["args"]
    assert "model_name=gemma-7b" in jax["args"]
    assert f"load_parameters_path=gs://weights/{CHECKPOINT}" in jax["args"]

    http = by_name["jetstream-http"]
    assert ports(http) == [8000]
    assert http["startupProbe"]["httpGet"] == {"path": "/healthcheck", "port": 8000}

    worker = worker_spec(body)
    assert_on_the_slice(worker, accelerator, topology)
    (server,) = worker["containers"]
    assert server["image"] == IMAGES["pathways_server"]
    assert ports(server) == [38679]
    assert server["args"] == [
        "--server_port=38679",
        "--resource_manager_address=$(LWS_LEADER_ADDRESS):38677",
        scratch,
    ]
    assert server["resources"]["limits"] == {"google.com/tpu": str(case.chips_per_vm)}
    assert server["resources"]["requests"] == {"google.com/tpu": str(case.chips_per_vm)}


def test_multi_host_int8() -> None:
    args = jetstream.maxtext_args(multi("v6e", "4x4", quantization="int8"))
    assert "quantization=int8" in args
    assert args[-1] == "enable_single_controller=true"


def test_pathways_instance_types() -> None:
    assert jetstream.pathways_instance_type(multi("v5p", "2x2x4")) == "tpuv5p:2x2x4"
    with pytest.raises(ValueError, match="tpu7x"):
        jetstream.pathways_instance_type(multi("tpu7x", "2x2x4"))


def test_bucket_grants_write_only_the_pathways_scratch_prefix() -> None:
    read = ["roles/storage.bucketViewer", "roles/storage.objectViewer"]
    assert [g.role for g in jetstream.bucket_grants(SINGLE)] == read
    assert all(g.condition is None for g in jetstream.bucket_grants(SINGLE))
    multi_grants = jetstream.bucket_grants(multi("v6e", "4x4"))
    assert [g.role for g in multi_grants] == [*read, "roles/storage.objectUser"]
    condition = multi_grants[-1].condition
    assert condition is not None
    assert condition.expression == (
        f'resource.name.startsWith("projects/_/buckets/{SINGLE.bucket}/objects/pathways-scratch/")'
    )


def test_service_account() -> None:
    body = jetstream.service_account_body(SINGLE)
    assert (body["kind"], body["metadata"]["name"], body["metadata"]["namespace"]) == (
        "ServiceAccount",
        "js-stack-jetstream",
        "jetstream",
    )


# --- Service ---------------------------------------------------------------------------------


def test_service_selects_the_deployment_pods() -> None:
    selector = jetstream.service_body(SINGLE)["spec"]["selector"]
    assert selects(selector, jetstream.deployment_body(SINGLE)["spec"]["template"]["metadata"]["labels"])


@pytest.mark.parametrize(("generation", "topology"), SHAPES)
def test_service_selects_leaders_only(generation: str, topology: str) -> None:
    args = multi(generation, topology)
    template = jetstream.lws_body(args)["spec"]["leaderWorkerTemplate"]
    selector = jetstream.service_body(args)["spec"]["selector"]
    assert selects(selector, template["leaderTemplate"]["metadata"]["labels"])
    assert not selects(selector, template["workerTemplate"]["metadata"]["labels"])


def test_internal_service() -> None:
    body = jetstream.service_body(SINGLE)
    assert body["metadata"]["name"] == "jetstream-svc"
    assert body["metadata"]["annotations"] == {
        "networking.gke.io/load-balancer-type": "Internal",
        **LOAD_BALANCER_ADDRESS,
    }
    spec = body["spec"]
    assert spec["type"] == "LoadBalancer"
    assert "loadBalancerSourceRanges" not in spec
    assert [(p["name"], p["port"], p["targetPort"]) for p in spec["ports"]] == [
        ("jetstream-http", 8000, 8000),
        ("jetstream-grpc", 9000, 9000),
    ]


def test_external_service() -> None:
    body = jetstream.service_body(replace(SINGLE, exposure="external", source_ranges=("203.0.113.0/24",)))
    assert body["metadata"]["annotations"] == LOAD_BALANCER_ADDRESS
    assert body["spec"]["type"] == "LoadBalancer"
    assert body["spec"]["loadBalancerSourceRanges"] == ["203.0.113.0/24"]


def test_external_service_needs_source_ranges_and_exposure_is_checked() -> None:
    with pytest.raises(ValueError, match="source_ranges"):
        jetstream.service_body(replace(SINGLE, exposure="external"))
    with pytest.raises(ValueError, match="exposure"):
        jetstream.service_body(replace(SINGLE, exposure="public"))


def test_ingress_ip() -> None:
    status = SimpleNamespace(load_balancer=SimpleNamespace(ingress=[SimpleNamespace(ip="10.0.0.7")]))
    assert jetstream.ingress_ip(status) == "10.0.0.7"
    assert jetstream.ingress_ip(None) == ""
    assert jetstream.ingress_ip(SimpleNamespace(load_balancer=SimpleNamespace(ingress=[]))) == ""


# --- schemas ---------------------------------------------------------------------------------


@pytest.mark.parametrize("exposure", ["internal", "external"])
def test_core_bodies_match_the_kubernetes_schema(exposure: str) -> None:
    args = replace(SINGLE, exposure=exposure, source_ranges=("203.0.113.0/24",))
    bodies = [jetstream.deployment_body(args), jetstream.service_body(args), jetstream.service_account_body(args)]
    assert {b["kind"]: validate_core(b) for b in bodies} == {"Deployment": [], "Service": [], "ServiceAccount": []}


@pytest.mark.parametrize(("generation", "topology"), SHAPES)
def test_lws_pod_templates_match_the_kubernetes_schema(generation: str, topology: str) -> None:
    # The LWS CRD keeps pod templates loosely typed; check them as the Pods they become.
    template = jetstream.lws_body(multi(generation, topology))["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": role.lower()}, "spec": template[role]["spec"]}
        assert validate_core(pod) == [], role


CRDS = crd_root()


@pytest.fixture(scope="module")
def lws_crds() -> CrdRegistry:
    if CRDS is None:
        pytest.skip("upstream CRDs not found: run `make crds` (or set TPU_SLICING_CRDS)")
    return CrdRegistry.load(CRDS, {"lws": "v0.8.0"})


@pytest.mark.parametrize(("generation", "topology"), SHAPES)
def test_lws_matches_its_crd(lws_crds: CrdRegistry, generation: str, topology: str) -> None:
    assert lws_crds.validate(jetstream.lws_body(multi(generation, topology))) == []
