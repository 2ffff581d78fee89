"""The second backend family: Saxml on multi-host v5e slices, and JetStream, from the same program."""

from __future__ import annotations

import copy
import ipaddress
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.awaits import LOAD_BALANCER_ADDRESS
from plan import engine
from plan.engine import PlanResult
from settings.loader import ConfigError, load
from settings.rules_network import MIN_SOURCE_PREFIX
from settings.rules_serving import RESERVED_NAMESPACES
from workloads.saxml import PUBLISH_SCRIPT

CHECKPOINT = "final/unscanned/gemma_7b-it/0/checkpoints/0/items"
# The checkpoint's model, as JetStream's MaxText engine must be told it (settings/rules_maxtext.py).
GEMMA = {"name": "google/gemma-7b-it", "parametersBillions": 8.54, "path": CHECKPOINT}
GEMMA_ENGINE = {"maxtextModel": "gemma-7b", "tokenizerPath": "assets/tokenizer.gemma"}

POOL = "gcp:container/nodePool:NodePool"
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
LWS = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"


@pytest.fixture(scope="module")
def saxml() -> PlanResult:
    return engine.run_stack("saxml-v5e")


@pytest.fixture(scope="module")
def jetstream() -> PlanResult:
    return engine.run_stack("jetstream-v5e")


def stack_config(stack: str, overrides: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[str]]:
    document = yaml.safe_load(engine.stack_file(stack).read_text())
    for key, value in (overrides or {}).items():
        document["config"][f"tpu-slicing:{key}"] = value
    # A private folder: parallel workers must neither share the file nor see it in the project.
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"Pulumi.{stack}.yaml"
        path.write_text(yaml.safe_dump(document))
        return engine.read_stack_config(path)


def run(stack: str, overrides: dict[str, Any]) -> PlanResult:
    raw, secrets = stack_config(stack, overrides)
    return engine.run(raw, stack=stack, secret_keys=secrets)


def slice_pools(plan: PlanResult) -> list[Any]:
    return sorted((p for p in plan.of_type(POOL) if p.name.startswith("cube-")), key=lambda p: p.name)


@pytest.mark.parametrize("fixture", ["saxml", "jetstream"])
def test_v5e_pools_are_one_slice_each(request: pytest.FixtureRequest, fixture: str) -> None:
    plan: PlanResult = request.getfixturevalue(fixture)
    pools = slice_pools(plan)
    assert len(pools) == 2
    for pool in pools:
        assert pool.get("nodeConfig.machineType") == "ct5lp-hightpu-4t"
        assert pool.get("nodeCount") == 8  # 4x8 = 32 chips / 4 per VM
        assert pool.get("placementPolicy") == {"type": "COMPACT", "tpuTopology": "4x8"}
        assert pool.get("nodeConfig.reservationAffinity") == {"consumeReservationType": "NO_RESERVATION"}
    assert plan.of_type("gcp:compute/resourcePolicy:ResourcePolicy") == []
    assert plan.outputs["totalChips"].value == 64


@pytest.mark.parametrize("fixture", ["saxml", "jetstream"])
def test_no_dynamic_slicing_objects(request: pytest.FixtureRequest, fixture: str) -> None:
    plan: PlanResult = request.getfixturevalue(fixture)
    kinds = {r.type for r in plan.resources}
    assert not any("kueue.x-k8s.io" in k for k in kinds)
    assert plan.of_type("kubernetes:admissionregistration.k8s.io/v1:MutatingWebhookConfiguration") == []
    assert plan.of_type("kubernetes:inference.networking.k8s.io/v1:InferencePool") == []


@pytest.mark.parametrize(("machine", "vms"), [("ct6e-standard-8t", 1), ("ct6e-standard-4t", 2)])
def test_a_v6e_2x4_slice_is_one_vm_or_two(machine: str, vms: int) -> None:
    # GKE builds a v6e 2x4 from one 8-chip VM or two 4-chip VMs (docs.cloud.google.com/tpu/docs/v6e):
    # the pool's node count and the serving group follow the machine type, not the shape alone.
    slice_ = {"machineType": machine, "topology": "2x4"}
    plan = run("jetstream-v5e", {"zone": "us-east5-b", "serving": {**_serving("jetstream-v5e"), "slice": slice_}})
    for pool in slice_pools(plan):
        assert (pool.get("nodeConfig.machineType"), pool.get("nodeCount")) == (machine, vms)
        assert pool.get("placementPolicy") == {"type": "COMPACT", "tpuTopology": "2x4"}
    if vms == 1:
        assert plan.of_type(LWS) == []
        return
    template = plan.one(LWS).inputs["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 1 + vms  # the Pathways leader and one worker per VM
    worker = template["workerTemplate"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["google.com/tpu"] == "4"


def test_reserved_slices_bind_the_reservation() -> None:
    plan = run("saxml-v5e", {"reservation": {"name": "v5e-resv", "project": "resv-project"}})
    for pool in slice_pools(plan):
        assert pool.get("nodeConfig.reservationAffinity") == {
            "consumeReservationType": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": ["projects/resv-project/reservations/v5e-resv"],
        }


def test_saxml_admin_state_bucket_and_bucket_scoped_roles(saxml: PlanResult) -> None:
    bucket = saxml.one("gcp:storage/bucket:Bucket")
    assert bucket.get("name") == "example-tpu-project-saxml-v5e-sax"
    assert bucket.get("uniformBucketLevelAccess") is True
    assert bucket.get("publicAccessPrevention") == "enforced"
    assert bucket.get("location") == "us-west4"
    # Only the cell's own state: emptied by a destroy rather than left to stop it halfway.
    assert bucket.get("forceDestroy") is True
    members = saxml.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
    # Registration order is not the program's to promise: the viewer waits on the project-number read.
    assert sorted((m.get("role"), m.get("member")) for m in members) == [
        ("roles/storage.objectAdmin", "serviceAccount:saxml-v5e-sax@example-tpu-project.iam.gserviceaccount.com"),
        (
            "roles/storage.objectViewer",
            "principal://iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/"
            "example-tpu-project.svc.id.goog/subject/ns/sax/sa/saxml-v5e-sax-http",
        ),
    ]
    wi = saxml.one("gcp:serviceaccount/iAMMember:IAMMember")
    assert wi.get("role") == "roles/iam.workloadIdentityUser"
    assert wi.get("member") == "serviceAccount:example-tpu-project.svc.id.goog[sax/saxml-v5e-sax-sa]"
    ksa = saxml.one("kubernetes:core/v1:ServiceAccount", "service-account")
    assert ksa.get("metadata.annotations") == {
        "iam.gke.io/gcp-service-account": "saxml-v5e-sax@example-tpu-project.iam.gserviceaccount.com"
    }


@pytest.mark.parametrize("fixture", ["saxml", "jetstream"])
def test_no_project_level_storage_roles(request: pytest.FixtureRequest, fixture: str) -> None:
    plan: PlanResult = request.getfixturevalue(fixture)
    roles = [m.get("role") for m in plan.of_type("gcp:projects/iAMMember:IAMMember")]
    assert roles == ["roles/container.defaultNodeServiceAccount"]


def test_saxml_model_server_jobset(saxml: PlanResult) -> None:
    body = saxml.one(JOBSET).inputs
    assert (
        body["metadata"]["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"]
        == "cloud.google.com/gke-nodepool"
    )
    job = body["spec"]["replicatedJobs"][0]
    assert job["replicas"] == 2
    spec = job["template"]["spec"]
    assert (spec["parallelism"], spec["completions"], spec["backoffLimit"]) == (8, 8, 0)
    pod = spec["template"]["spec"]
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "4x8",
    }
    container = pod["containers"][0]
    assert container["image"] == "us-docker.pkg.dev/cloud-tpu-images/inference/sax-model-server:v1.1.0"
    assert "--sax_cell=/sax/test" in container["args"] and "--platform_chip=tpuv5e" in container["args"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {"SAX_ROOT": "gs://example-tpu-project-saxml-v5e-sax/sax-root", "MEGASCALE_NUM_SLICES": ""}
    assert container["resources"]["limits"] == {"google.com/tpu": "4"}
    # No privileged pods on GKE >= 1.28.7: the TPU runtime gets the hardened default.
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["NET_RAW"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    # Host-network pods bypass Workload Identity and would lose access to the Sax bucket.
    assert "hostNetwork" not in pod
    assert body["spec"]["network"] == {"enableDNSHostnames": True}
    for pool in slice_pools(saxml):
        assert saxml.depends_on(saxml.one(JOBSET), pool)
    assert saxml.depends_on(saxml.one(JOBSET), saxml.one("kubernetes:helm.sh/v3:Release", "jobset"))


def test_saxml_http_service_is_internal_by_default(saxml: PlanResult) -> None:
    service = saxml.one("kubernetes:core/v1:Service", "http-service")
    assert service.get("spec.type") == "LoadBalancer"
    assert service.get("metadata.annotations") == {
        "networking.gke.io/load-balancer-type": "Internal",
        **LOAD_BALANCER_ADDRESS,  # waits for the address, not for model servers to load
    }
    assert service.get("spec.ports.0.port") == 8888
    assert service.get("spec.loadBalancerSourceRanges") is None


def test_external_http_needs_and_uses_source_ranges() -> None:
    plan = run(
        "saxml-v5e",
        {"serving": {**_serving("saxml-v5e"), "http": {"type": "external", "sourceRanges": ["10.0.0.0/8"]}}},
    )
    service = plan.one("kubernetes:core/v1:Service", "http-service")
    assert service.get("metadata.annotations") == LOAD_BALANCER_ADDRESS
    assert service.get("spec.loadBalancerSourceRanges") == ["10.0.0.0/8"]
    for ranges in ([], ["0.0.0.0/0"]):
        raw, secrets = stack_config(
            "saxml-v5e", {"serving": {**_serving("saxml-v5e"), "http": {"type": "external", "sourceRanges": ranges}}}
        )
        with pytest.raises(ConfigError, match=r"tpu-slicing:serving\.http"):
            load(raw, stack="saxml-v5e", project="example-tpu-project", secret_keys=secrets)


def _serving(stack: str) -> dict[str, Any]:
    document = yaml.safe_load(engine.stack_file(stack).read_text())
    return copy.deepcopy(document["config"]["tpu-slicing:serving"])


def test_saxml_publish_job(saxml: PlanResult) -> None:
    job = saxml.one("kubernetes:batch/v1:Job", "publish")
    env = {e["name"]: e["value"] for e in job.get("spec.template.spec.containers.0.env")}
    assert env == {
        "SAX_HTTP_URL": "http://sax-http.sax.svc:8888",
        "SAX_MODEL_KEY": "/sax/test/spmd",
        "SAX_MODEL_PATH": "saxml.server.pax.lm.params.lm_cloud.LmCloudSpmd175B32Test",
        "SAX_CHECKPOINT": "None",
        "SAX_REPLICAS": "2",
        "SAX_PUBLISH_DEADLINE_SECONDS": "3600",
    }
    script = saxml.one("kubernetes:core/v1:ConfigMap", "publish-script")
    assert script.get("data")["saxml_publish.py"] == PUBLISH_SCRIPT.read_text()
    for dependency in (
        saxml.one(JOBSET),
        saxml.one("kubernetes:core/v1:Service", "http-service"),
        saxml.one("kubernetes:apps/v1:Deployment", "admin-server"),
    ):
        assert saxml.depends_on(job, dependency)
    assert saxml.outputs["modelKey"].value == "/sax/test/spmd"
    assert "saxHttpAddress" in saxml.outputs


def test_model_that_does_not_fit_names_the_minimum_topology() -> None:
    serving = _serving("saxml-v5e")
    serving["slice"]["topology"] = "4x4"
    raw, secrets = stack_config("saxml-v5e", {"serving": serving})
    with pytest.raises(ConfigError) as caught:
        load(raw, stack="saxml-v5e", project="example-tpu-project", secret_keys=secrets)
    message = str(caught.value)
    assert "serving.slice.topology 4x4 holds 256 GiB HBM" in message
    assert "the smallest v5e topology that fits is 4x8" in message


@pytest.mark.parametrize(
    ("stack", "slice_", "message"),
    [
        ("saxml-v5e", {"machineType": "tpu7x-standard-4t", "topology": "2x2x2"}, "serves through dynamic slicing"),
        ("saxml-v5e", {"machineType": "ct6e-standard-4t", "topology": "4x8"}, "Saxml has no chip name for v6e"),
        ("jetstream-v5e", {"machineType": "ct5p-hightpu-4t", "topology": "2x2x2"}, None),
    ],
)
def test_slices_the_backend_cannot_run_are_refused(stack: str, slice_: dict[str, str], message: str | None) -> None:
    serving = _serving(stack)
    serving["slice"] = slice_
    # A zone that offers the generation (domain/tpu_zones.py), so the backend's own rule is what refuses.
    zone = {"ct6e-standard-4t": "us-east5-b", "ct5p-hightpu-4t": "us-east5-a"}.get(slice_["machineType"], "us-west4-a")
    raw, secrets = stack_config(stack, {"serving": serving, "zone": zone})
    if message is None:  # v5p multi-host has a Pathways type: accepted
        assert load(raw, stack=stack, project="example-tpu-project", secret_keys=secrets).serving.slice.topology
        return
    with pytest.raises(ConfigError, match=message):
        load(raw, stack=stack, project="example-tpu-project", secret_keys=secrets)


def test_dynamic_slicing_keys_are_refused_with_saxml() -> None:
    raw, secrets = stack_config("saxml-v5e", {"checks": {"subslicing": {"enabled": True}}})
    with pytest.raises(ConfigError, match="checks"):
        load(raw, stack="saxml-v5e", project="example-tpu-project", secret_keys=secrets)


def test_switching_the_backend_changes_the_plan(saxml: PlanResult, jetstream: PlanResult) -> None:
    serving = _serving("saxml-v5e")
    serving["backend"] = "jetstream"
    serving["model"] = {**serving["model"], **GEMMA, "weightsBucket": "example-weights"}
    serving["jetstream"] = GEMMA_ENGINE  # JetStream loads a checkpoint's items; Saxml's cell had none
    switched = run("saxml-v5e", {"serving": serving})
    assert switched.of_type(JOBSET) == [] and len(switched.of_type(LWS)) == 1
    assert switched.of_type("gcp:storage/bucket:Bucket") == []
    assert len(slice_pools(switched)) == len(slice_pools(saxml))
    assert "jetstreamAddress" in switched.outputs and "saxHttpAddress" not in switched.outputs


def test_plan_shows_the_backend_picture(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    from plan.__main__ import main

    assert main(["--stack", "saxml-v5e", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "2 slice(s) of 4x8 v5e: 16 VMs, 64 chips, 64 JAX devices, 1024 GiB HBM" in out
    assert "on-demand capacity" in out
    assert "backend saxml" in out


def _saxml_http(http: dict[str, Any]) -> None:
    raw, secrets = stack_config("saxml-v5e", {"serving": {**_serving("saxml-v5e"), "http": http}})
    load(raw, stack="saxml-v5e", project="example-tpu-project", secret_keys=secrets)


# Each example validates a whole stack configuration: no per-example deadline on a loaded machine.
@settings(deadline=None, max_examples=40)
@given(st.integers(1, MIN_SOURCE_PREFIX - 1), st.integers(0, 2**32 - 1))
def test_source_ranges_that_cover_more_than_a_slash_8_together_are_refused(prefix: int, seed: int) -> None:
    """Exposure by union: any split of a block wider than a /8 into smaller ranges is refused."""
    wide = ipaddress.IPv4Network((seed, prefix), strict=False)
    pieces = [str(n) for n in wide.subnets(new_prefix=min(prefix + 2, 32))]
    with pytest.raises(ConfigError, match=r"tpu-slicing:serving\.http.*together cover"):
        _saxml_http({"type": "external", "sourceRanges": pieces})


def test_the_two_halves_of_the_internet_are_the_whole_internet() -> None:
    with pytest.raises(ConfigError, match=r"together cover 0\.0\.0\.0/0"):
        _saxml_http({"type": "external", "sourceRanges": ["0.0.0.0/1", "128.0.0.0/1"]})
    _saxml_http({"type": "external", "sourceRanges": ["203.0.113.0/24", "10.0.0.0/8"]})


def test_source_ranges_on_an_internal_service_are_refused_not_dropped() -> None:
    with pytest.raises(ConfigError, match=r"tpu-slicing:serving\.http.*do nothing on an internal service"):
        _saxml_http({"type": "internal", "sourceRanges": ["10.0.0.0/8"]})


@settings(deadline=None, max_examples=40)
@given(st.sampled_from(sorted(RESERVED_NAMESPACES)) | st.from_regex(r"\A(kube|gke|gmp)-[a-z0-9]{1,8}\Z"))
def test_a_serving_namespace_the_cluster_owns_is_refused(namespace: str) -> None:
    raw, secrets = stack_config("saxml-v5e", {"serving": {**_serving("saxml-v5e"), "namespace": namespace}})
    with pytest.raises(ConfigError, match=r"tpu-slicing:serving\.namespace.*the cluster or its controllers own"):
        load(raw, stack="saxml-v5e", project="example-tpu-project", secret_keys=secrets)


def test_cube_serving_keys_on_a_slice_backend_are_refused() -> None:
    raw, secrets = stack_config("saxml-v5e", {"serving": {**_serving("saxml-v5e"), "prefill": {"replicas": 2}}})
    with pytest.raises(ConfigError, match=r"tpu-slicing:serving\.prefill does nothing with serving\.backend 'saxml'"):
        load(raw, stack="saxml-v5e", project="example-tpu-project", secret_keys=secrets)


def test_a_slice_stack_switches_backend_by_one_key() -> None:
    """The backend key, and what the other backend reads (JetStream: the checkpoint's bucket and items,
    the MaxText model it is and that model's tokenizer: Saxml's 175B test servable is none of them)."""
    serving = {**_serving("saxml-v5e"), "backend": "jetstream", "jetstream": GEMMA_ENGINE}
    serving["model"] = {**serving["model"], **GEMMA, "weightsBucket": "example-model-weights"}
    raw, secrets = stack_config("saxml-v5e", {"serving": serving})
    assert (
        load(raw, stack="saxml-v5e", project="example-tpu-project", secret_keys=secrets).serving.backend.value
        == "jetstream"
    )


# Roles that let a principal read an object (Cloud Storage IAM roles: storage.objects.get).
OBJECT_READERS = {"roles/storage.objectViewer", "roles/storage.objectAdmin", "roles/storage.objectUser"}


def test_every_saxml_server_that_reads_the_cell_bucket_has_an_identity_that_may(saxml: PlanResult) -> None:
    """sax-http, like the admin and model servers, reads the cell's admin address from the bucket on
    every call (saxml common/addr.go FetchAddr via SAX_ROOT/GSBUCKET); its pod's identity, a Google
    service account its Kubernetes account is bound to or the Kubernetes account as a Workload
    Identity principal, needs a read role on that bucket, or every /listcell, /publish and /generate fails."""
    bucket = saxml.one("gcp:storage/bucket:Bucket").get("name")
    readers = {
        m.get("member")
        for m in saxml.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
        if m.get("role") in OBJECT_READERS
    }
    accounts = {a.get("metadata.name"): a for a in saxml.of_type("kubernetes:core/v1:ServiceAccount")}
    checked = []
    for deployment in saxml.of_type("kubernetes:apps/v1:Deployment"):
        pod = deployment.get("spec.template.spec")
        env = {e["name"]: e.get("value", "") for c in pod["containers"] for e in c.get("env") or []}
        if not ({"SAX_ROOT", "GSBUCKET"} & set(env)):
            continue
        name = pod["serviceAccountName"]
        google = (accounts[name].get("metadata.annotations") or {}).get("iam.gke.io/gcp-service-account")
        principal = f"/subject/ns/{deployment.get('metadata.namespace')}/sa/{name}"
        allowed = (google and f"serviceAccount:{google}" in readers) or any(str(m).endswith(principal) for m in readers)
        assert allowed, f"{deployment.get('metadata.name')} runs as {name}, which may not read gs://{bucket}"
        checked.append(deployment.get("metadata.name"))
    assert sorted(checked) == ["sax-admin-server", "sax-http"]
