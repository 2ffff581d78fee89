"""Disaggregated prefill/decode serving: model access, gateway, router, LWS, smoke test, outputs."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pulumi_command.local.command as command_sdk
import pytest
import yaml

from k8s.router import PD_PLUGINS
from plan import manifests
from plan.__main__ import main as plan_main
from plan.engine import PLACEHOLDER_GATEWAY_IP, PLACEHOLDER_PROJECT_NUMBER, PlanResult, Resource, is_secret_input
from settings.loader import ConfigError
from tests.conftest import DevRunner, config_with
from workloads.smoke_job import SCRIPT as SMOKE_SCRIPT
from workloads.vllm_pd import SERVING_LABEL

GOLDEN = Path(__file__).parent / "golden"
LWS = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"
NAMESPACE = "llm-d-pd-disaggregation"
TOKEN = "hf_super_secret_token_value"


@pytest.fixture(scope="module")
def token_plan() -> PlanResult:
    from plan import engine
    from tests.conftest import dev_raw, merged

    raw, secrets = dev_raw()
    return engine.run(merged({"hfToken": TOKEN}, raw), stack="dev", secret_keys=[*secrets, "tpu-slicing:hfToken"])


def lws(plan: PlanResult, role: str) -> dict[str, Any]:
    return plan.one(LWS, f"{role}-lws").inputs


def leader(plan: PlanResult, role: str) -> dict[str, Any]:
    spec = lws(plan, role)["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    return next(c for c in spec["containers"] if c["name"] == "vllm-leader")


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_vllm_command_line_matches_golden(dev_plan: PlanResult, role: str) -> None:
    script = leader(dev_plan, role)["command"][2]
    serve = script.splitlines()[-1].removeprefix("exec ")
    expected = (GOLDEN / f"vllm-{role}.args").read_text().split("\n")
    assert shlex.split(serve) == [line for line in expected if line]


def test_tensor_parallelism_follows_the_slice(run_dev: DevRunner) -> None:
    plan = run_dev(
        {"serving": {"prefill": {"topology": "2x2x4", "replicas": 2}, "decode": {"topology": "2x2x4", "replicas": 2}}}
    )
    for role in ("prefill", "decode"):
        assert "--tensor-parallel-size=32" in leader(plan, role)["command"][2]
        assert lws(plan, role)["spec"]["leaderWorkerTemplate"]["size"] == 4
    override = run_dev({"serving": {"vllm": {"tensorParallelSize": 8}}})
    assert "--tensor-parallel-size=8" in leader(override, "prefill")["command"][2]


def test_pods_left_on_a_dead_host_are_left_to_a_person_when_the_stack_says_so(run_dev: DevRunner) -> None:
    """kueue.recovery.forceDeleteOnUnreachableHost off: no pod carries Kueue's annotation and the
    FailureRecoveryPolicy gate is written out false (settings/rules_recovery.py)."""
    plan = run_dev({"kueue": {"recovery": {"forceDeleteOnUnreachableHost": False}}})
    for role in ("prefill", "decode"):
        template = lws(plan, role)["spec"]["leaderWorkerTemplate"]
        for part in ("leaderTemplate", "workerTemplate"):
            assert "kueue.x-k8s.io/safe-to-forcefully-delete" not in template[part]["metadata"]["annotations"]
    queue = plan.one("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue")
    assert "FailureRecoveryPolicy=false" in queue.inputs["metadata"]["annotations"]["tpu-slicing/kueue-feature-gates"]


def test_tensor_parallelism_must_divide_the_devices() -> None:
    with pytest.raises(ConfigError, match="tensorParallelSize 5 does not divide the 16 devices"):
        config_with({"serving": {"vllm": {"tensorParallelSize": 5}}})


@pytest.mark.parametrize(
    ("role", "kv_role", "port"), [("prefill", "kv_producer", 8000), ("decode", "kv_consumer", 8200)]
)
def test_leaderworkerset_settings(dev_plan: PlanResult, role: str, kv_role: str, port: int) -> None:
    body = lws(dev_plan, role)
    meta = body["metadata"]
    assert meta["name"] == f"vllm-{role}" and meta["namespace"] == NAMESPACE
    assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "tpu"
    assert meta["labels"]["kueue.x-k8s.io/priority-class"] == "dev-high"
    assert meta["annotations"]["leaderworkerset.sigs.k8s.io/exclusive-topology"] == "cloud.google.com/gke-tpu-slice"
    spec = body["spec"]
    assert spec["replicas"] == 4
    template = spec["leaderWorkerTemplate"]
    assert template["size"] == 2  # 2x2x2 = 8 chips = 2 VMs, computed not hard-coded
    assert template["restartPolicy"] == "RecreateGroupOnPodRestart"
    for part in ("leaderTemplate", "workerTemplate"):
        pod = template[part]
        assert pod["metadata"]["annotations"] == {
            "cloud.google.com/gke-tpu-slice-topology": "2x2x2",
            "cloud.google.com/skip-tpu-webhook-check": "true",
            # Kueue v0.19.2 pkg/controller/constants/constants.go SafeToForcefullyDeleteAnnotationKey.
            "kueue.x-k8s.io/safe-to-forcefully-delete": "true",
        }
        assert pod["spec"]["serviceAccountName"] == "dev-vllm-model-server"  # namePrefix dev
        assert pod["spec"]["nodeSelector"] == {
            "cloud.google.com/gke-tpu-accelerator": "tpu7x",
            "cloud.google.com/gke-tpu-partition-2x2x2-state": "HEALTHY",
        }
        container = pod["spec"]["containers"][0]
        assert container["image"] == "docker.io/vllm/vllm-tpu:v0.26.0"
        assert container["resources"]["limits"] == {"google.com/tpu": "4", "cpu": "220", "memory": "850Gi"}
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["TPU_KV_TRANSFER_PORT"] == "9100" and env["TPU_SIDE_CHANNEL_PORT"] == "9600"
        assert env["VLLM_XLA_CACHE_PATH"] == "gs://example-model-weights/xla_cache"
        assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    lead = leader(dev_plan, role)
    script = lead["command"][2]
    assert f'"kv_role":"{kv_role}"' in script
    assert f"--port={port}" in script
    assert "gs://example-model-weights/models--Qwen--Qwen3.5-397B-A17B-FP8/snapshots/" in script
    # The side channel is the producer's alone (workloads/vllm_listeners.py: tpu_connector.py:505-513).
    side_channel = {9600} if role == "prefill" else set()
    assert {p["containerPort"] for p in lead["ports"]} == {port, 9100, 8431} | side_channel
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert lead[probe]["httpGet"] == {"path": "/health", "port": port}
    # Sized for a model that takes tens of minutes to load.
    assert lead["startupProbe"]["periodSeconds"] * lead["startupProbe"]["failureThreshold"] >= 3600


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_vllm_keeps_an_idle_connection_longer_than_the_sidecar_reuses_it(dev_plan: PlanResult, role: str) -> None:
    # The decode sidecar reuses idle connections to both roles for 90 s and cannot replay a POST
    # on one the server closed (a 502); vLLM closes them after its 5 s default unless told otherwise.
    from workloads import vllm_command

    assert vllm_command.VLLM_DEFAULT_KEEP_ALIVE_SECONDS == 5  # vllm v0.26.0 vllm/envs.py
    assert vllm_command.SIDECAR_IDLE_CONN_SECONDS == 90  # llm-d-router v0.9.0 pkg/sidecar/proxy/proxy.go
    template = lws(dev_plan, role)["spec"]["leaderWorkerTemplate"]
    for part in ("leaderTemplate", "workerTemplate"):
        env = {e["name"]: e.get("value") for e in template[part]["spec"]["containers"][0]["env"]}
        given = env.get("VLLM_HTTP_TIMEOUT_KEEP_ALIVE")
        keep_alive = int(given) if given is not None else vllm_command.VLLM_DEFAULT_KEEP_ALIVE_SECONDS
        assert keep_alive > vllm_command.SIDECAR_IDLE_CONN_SECONDS, (role, part, given)


def test_decode_leader_has_the_pinned_routing_sidecar(dev_plan: PlanResult) -> None:
    spec = lws(dev_plan, "decode")["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    (sidecar,) = spec["initContainers"]
    # The P/D sidecar of the picker's own llm-d-router release, with that release's flags.
    assert sidecar["image"] == "ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.9.0"
    assert sidecar["restartPolicy"] == "Always"
    assert "--port=8000" in sidecar["args"] and "--vllm-port=8200" in sidecar["args"]
    assert "--kv-connector=nixlv2" in sidecar["args"]
    # Guaranteed: its restart would restart the whole group.
    assert sidecar["resources"]["requests"] == sidecar["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}
    assert "initContainers" not in lws(dev_plan, "prefill")["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_pool_selects_leaders_only(dev_plan: PlanResult) -> None:
    pool = dev_plan.one("kubernetes:inference.networking.k8s.io/v1:InferencePool")
    selector = pool.get("spec.selector.matchLabels")
    assert selector[SERVING_LABEL] == "true"
    for role in ("prefill", "decode"):
        template = lws(dev_plan, role)["spec"]["leaderWorkerTemplate"]
        assert _selects(selector, template["leaderTemplate"]["metadata"]["labels"]), role
        assert not _selects(selector, template["workerTemplate"]["metadata"]["labels"]), role
    assert pool.get("spec.targetPorts") == [{"number": 8000}]
    assert pool.get("spec.endpointPickerRef") == {
        "name": "pd-disaggregation-epp",
        "port": {"number": 9002},
        "failureMode": "FailOpen",
    }


def test_router_objects(dev_plan: PlanResult) -> None:
    epp = dev_plan.one("kubernetes:apps/v1:Deployment", "epp")
    container = epp.get("spec.template.spec.containers.0")
    assert container["image"] == "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.9.0"
    args = container["args"]
    assert args[args.index("--pool-name") + 1] == "pd-disaggregation"
    assert args[args.index("--pool-namespace") + 1] == NAMESPACE
    assert args[args.index("--config-file") + 1] == "/config/pd-config.yaml"
    assert container["readinessProbe"]["grpc"] == {"port": 9003, "service": "inference-extension"}
    config = dev_plan.one("kubernetes:core/v1:ConfigMap", "epp-config")
    assert yaml.safe_load(config.get("data")["pd-config.yaml"]) == PD_PLUGINS
    assert {p["name"] for p in PD_PLUGINS["schedulingProfiles"]} == {"prefill", "decode"}
    service = dev_plan.one("kubernetes:core/v1:Service", "epp-service")
    assert service.get("spec.selector") == epp.get("spec.selector.matchLabels")
    # As the upstream charts: no appProtocol on the picker's ports.
    assert all("appProtocol" not in port for port in service.get("spec.ports")), service.get("spec.ports")
    role = dev_plan.one("kubernetes:rbac.authorization.k8s.io/v1:Role", "epp-role")
    objectives = next(r for r in role.get("rules") if "inferenceobjectives" in r["resources"])
    # v0.9.0 reads InferenceObjective and InferenceModelRewrite from llm-d.ai when its CRDs exist.
    assert set(objectives["apiGroups"]) == {"inference.networking.x-k8s.io", "llm-d.ai"}
    route = dev_plan.one("kubernetes:gateway.networking.k8s.io/v1:HTTPRoute")
    assert route.get("spec.parentRefs.0.name") == "inference-gateway"
    assert route.get("spec.rules.0.backendRefs") == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "pd-disaggregation"}
    ]
    health = dev_plan.one("kubernetes:networking.gke.io/v1:HealthCheckPolicy")
    assert health.get("spec.default.config.httpHealthCheck") == {"requestPath": "/health", "port": 8000}
    backend = dev_plan.one("kubernetes:networking.gke.io/v1:GCPBackendPolicy")
    assert backend.get("spec.targetRef.kind") == "InferencePool"


def test_router_order_lets_the_picker_become_ready(dev_plan: PlanResult) -> None:
    pool = dev_plan.one("kubernetes:inference.networking.k8s.io/v1:InferencePool")
    epp = dev_plan.one("kubernetes:apps/v1:Deployment", "epp")
    gateway = dev_plan.one("kubernetes:gateway.networking.k8s.io/v1:Gateway")
    route = dev_plan.one("kubernetes:gateway.networking.k8s.io/v1:HTTPRoute")
    # The picker reports ready only after syncing its pool: the pool must not wait for it.
    assert dev_plan.depends_on(epp, pool) and not dev_plan.depends_on(pool, epp)
    assert dev_plan.depends_on(route, epp) and dev_plan.depends_on(route, gateway)
    for resource in (pool, epp):
        assert not dev_plan.depends_on(resource, gateway), "only the route needs the Gateway"


def test_model_names_must_make_valid_labels() -> None:
    with pytest.raises(ConfigError, match=r"serving\.model\.name"):
        config_with({"serving": {"model": {"name": "org/my:model"}}})
    with pytest.raises(ConfigError, match="label value"):
        config_with({"serving": {"model": {"name": "org/" + "m" * 64}}})


def test_gateway_is_internal_and_waits_for_its_address(dev_plan: PlanResult) -> None:
    gateway = dev_plan.one("kubernetes:gateway.networking.k8s.io/v1:Gateway")
    assert gateway.get("spec.gatewayClassName") == "gke-l7-rilb"
    assert gateway.get("spec.listeners") == [
        {"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "Same"}}}
    ]
    annotations = gateway.get("metadata.annotations")
    assert annotations["pulumi.com/waitFor"] == "jsonpath={.status.addresses[0].value}"
    assert annotations["pulumi.com/timeoutSeconds"] == "1200"
    proxy = dev_plan.one("gcp:compute/subnetwork:Subnetwork", "proxy")
    assert dev_plan.depends_on(dev_plan.one("kubernetes:gateway.networking.k8s.io/v1:Gateway"), proxy)


def test_inference_crds_are_pinned_and_gke_owns_the_inference_pool_crd(dev_plan: PlanResult) -> None:
    command = dev_plan.one("command:local:Command", "apply")
    create = command.get("create")
    # The alpha CRDs are the program's, at an immutable commit; GKE's InferencePool CRD is waited for.
    assert "/df9f8909fe06fe2dfd4a6fc0bd0c01a0acabf849/config/crd/bases/inference.networking.x-k8s.io_" in create
    assert "inference.networking.k8s.io_inferencepools.yaml" not in create
    assert "until kubectl" in create and "get crd/inferencepools.inference.networking.k8s.io" in create
    assert "apply --server-side --field-manager=tpu-slicing" in create and "--force-conflicts" not in create
    assert command.get("update") == create
    # Never deleted, never replaced: no delete step, no triggers (the SDK makes them replace-on-change).
    assert command.get("delete") is None
    assert command.get("triggers") is None
    # The SDK always asks to replace on `triggers[*]`; with no triggers that never fires.
    assert command.replace_on_changes == ["triggers[*]"]
    assert "gke-gcloud-auth-plugin" in command.get("environment.KUBECONFIG_DATA")
    assert is_secret_input(command, "environment.KUBECONFIG_DATA")
    pool = dev_plan.one("kubernetes:inference.networking.k8s.io/v1:InferencePool")
    assert dev_plan.depends_on(pool, command)


def test_model_access_is_bucket_scoped_workload_identity(dev_plan: PlanResult) -> None:
    members = dev_plan.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
    principal = (
        f"principal://iam.googleapis.com/projects/{PLACEHOLDER_PROJECT_NUMBER}/locations/global/workloadIdentityPools/"
        f"example-tpu-project.svc.id.goog/subject/ns/{NAMESPACE}/sa/dev-vllm-model-server"
    )
    assert sorted((m.get("bucket"), m.get("role"), m.get("member")) for m in members) == [
        ("example-model-weights", "roles/storage.bucketViewer", principal),
        ("example-model-weights", "roles/storage.objectUser", principal),
        ("example-model-weights", "roles/storage.objectViewer", principal),
    ]
    # Writes and deletes only under the compile cache: the weights cannot be deleted.
    writer = next(m for m in members if m.get("role") == "roles/storage.objectUser")
    assert writer.get("condition.expression") == (
        'resource.name.startsWith("projects/_/buckets/example-model-weights/objects/xla_cache/")'
    )
    assert all(m.get("condition") is None for m in members if m is not writer)
    project_roles = [m.get("role") for m in dev_plan.of_type("gcp:projects/iAMMember:IAMMember")]
    assert not any("storage" in role for role in project_roles)


def test_no_token_means_no_secret(dev_plan: PlanResult) -> None:
    assert [s for s in dev_plan.of_type("kubernetes:core/v1:Secret") if s.name == "hf-token"] == []
    env = [e["name"] for e in leader(dev_plan, "prefill")["env"]]
    assert "HF_TOKEN" not in env


def test_token_is_a_secret_everywhere(token_plan: PlanResult, tmp_path: Path) -> None:
    secret = token_plan.one("kubernetes:core/v1:Secret", "hf-token")
    assert secret.get("stringData.HF_TOKEN") == TOKEN  # what the provider receives...
    assert is_secret_input(secret, "stringData.HF_TOKEN")  # ...marked secret on the wire
    assert "[secret]" in json.dumps(manifests.body(secret)["stringData"])
    env = leader(token_plan, "prefill")["env"]
    assert env[0] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}}}
    for path in manifests.write(token_plan, tmp_path):
        assert TOKEN not in path.read_text(), path.name
    for resource in token_plan.resources:
        if resource is not secret:
            assert TOKEN not in json.dumps(manifests.body(resource), default=str), resource.name
    assert not any(TOKEN in str(o.value) for o in token_plan.outputs.values())


def test_plan_output_never_shows_the_token(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from plan import engine

    stack = engine.ROOT / "Pulumi.ci-token.yaml"
    document = yaml.safe_load(engine.stack_file("dev").read_text())
    document["config"]["tpu-slicing:hfToken"] = {"secure": "v1:AAAAencrypted"}
    stack.write_text(yaml.safe_dump(document))
    try:
        assert plan_main(["--stack", "ci-token", "--out", str(tmp_path)]) == 0
    finally:
        stack.unlink()
    assert "AAAAencrypted" not in capsys.readouterr().out


def test_serving_waits_for_pools_and_controllers(dev_plan: PlanResult) -> None:
    pools = [p for p in dev_plan.of_type("gcp:container/nodePool:NodePool") if p.name.startswith("cube-")]
    needed: list[Resource] = [
        *pools,
        dev_plan.one("kubernetes:apps/v1:Deployment", "controller-manager"),
        dev_plan.one("kubernetes:helm.sh/v3:Release", "lws"),
        dev_plan.one("kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue"),
        *dev_plan.of_type("kubernetes:kueue.x-k8s.io/v1beta2:WorkloadPriorityClass"),
        dev_plan.one("kubernetes:core/v1:ServiceAccount", "model-server-account"),
    ]
    for role in ("prefill", "decode"):
        lws_resource = dev_plan.one(LWS, f"{role}-lws")
        for dependency in needed:
            assert dev_plan.depends_on(lws_resource, dependency), (role, dependency.name)
    # Destroy runs in reverse: nothing on the GCP side waits for the serving objects.
    for pool in pools:
        assert not dev_plan.depends_on(pool, dev_plan.one(LWS, "prefill-lws"))


def test_smoke_test_job(dev_plan: PlanResult) -> None:
    job = dev_plan.one("kubernetes:batch/v1:Job")
    container = job.get("spec.template.spec.containers.0")
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env == {
        "SMOKE_BASE_URL": f"http://{PLACEHOLDER_GATEWAY_IP}",
        "SMOKE_MODEL": "Qwen/Qwen3.5-397B-A17B-FP8",
        "SMOKE_DEADLINE_SECONDS": "18600",  # domain/serving_budget.py
        # Proves a prefill pod did the prefill: the headless Service of the prefill leaders.
        "SMOKE_PREFILL_METRICS_URL": "http://vllm-prefill-leaders.llm-d-pd-disaggregation.svc.cluster.local:8000/metrics",
        # Proves decode took the prompt's KV from prefill: the decode leaders' own vLLM port.
        "SMOKE_DECODE_METRICS_URL": "http://vllm-decode-leaders.llm-d-pd-disaggregation.svc.cluster.local:8200/metrics",
        # The slice watch (pods/slice_watch.py): the Workloads of both LeaderWorkerSets, for the
        # slice controller's admission check, read with a projected token of the Job's account.
        "SMOKE_SLICE_CHECK": "dev-slice",
        "SMOKE_SLICE_OWNERS": "vllm-prefill,vllm-decode",
        "SMOKE_KUBE_API_DIR": "/var/run/secrets/tpu-slicing/kube-api",
        "SMOKE_NAMESPACE": {"fieldRef": {"fieldPath": "metadata.namespace"}},
    }
    check = dev_plan.one("kubernetes:kueue.x-k8s.io/v1beta2:AdmissionCheck")
    assert check.get("spec.controllerName") == "accelerator.gke.io/slice"
    assert env["SMOKE_SLICE_CHECK"] == check.get("metadata.name")
    pod = job.get("spec.template.spec")
    assert pod["automountServiceAccountToken"] is False
    (volume,) = [v for v in pod["volumes"] if v["name"] == "kube-api"]
    assert volume["projected"]["sources"] == [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    ]
    role = dev_plan.one("kubernetes:rbac.authorization.k8s.io/v1:Role", "watch-role")
    assert role.get("rules") == [
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list"]}
    ]
    binding = dev_plan.one("kubernetes:rbac.authorization.k8s.io/v1:RoleBinding", "watch-role-binding")
    assert binding.get("subjects") == [
        {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": job.get("metadata.namespace")}
    ]
    assert container["image"].startswith("python:3.12.13-slim@sha256:")
    assert job.get("spec.backoffLimit") == 0
    script = dev_plan.one("kubernetes:core/v1:ConfigMap", "script")
    assert script.get("data")["smoke_request.py"] == SMOKE_SCRIPT.read_text()
    assert script.get("data")["slice_watch.py"] == SMOKE_SCRIPT.with_name("slice_watch.py").read_text()
    for dependency in (
        dev_plan.one(LWS, "prefill-lws"),
        dev_plan.one(LWS, "decode-lws"),
        dev_plan.one("kubernetes:gateway.networking.k8s.io/v1:HTTPRoute"),
    ):
        assert dev_plan.depends_on(job, dependency)


FINGERPRINT = "tpu-slicing/serving-fingerprint"


@pytest.mark.parametrize(
    ("change", "reruns"),
    [
        ({"serving": {"smokeTest": {"runId": "retry-2"}}}, True),  # an explicit new run
        ({"versions": {"vllmImage": "docker.io/vllm/vllm-tpu:v0.26.1"}}, True),  # an image it tests
        # the serving spec: another revision of the weights
        ({"serving": {"model": {"path": f"models--Qwen--Qwen3.5-397B-A17B-FP8/snapshots/{'1' * 40}"}}}, True),
        ({"serving": {"vllm": {"maxNumSeqs": 256}}}, True),
        ({"serving": {"decode": {"replicas": 3}}}, False),  # capacity only: new groups serve once Ready
        ({"serving": {"prefill": {"replicas": 5}}}, False),
        ({"observability": {"dashboard": False}}, False),  # nothing the test exercises
        ({"versions": {"kueue": "0.19.1"}}, False),  # a controller chart: an in-place Helm upgrade
        ({"versions": {"lws": "v0.9.0"}}, False),
    ],
)
def test_the_smoke_test_reruns_when_what_it_tests_changes(
    run_dev: DevRunner, dev_plan: PlanResult, change: dict[str, Any], reruns: bool
) -> None:
    """A Job runs once: the next `pulumi up` runs it again only as a new Job, which its
    fingerprint annotation (replace-on-change of every field) makes happen."""
    before = dev_plan.one("kubernetes:batch/v1:Job")
    after = run_dev(change).one("kubernetes:batch/v1:Job")
    assert after.replace_on_changes == ["*"]
    changed = before.get("metadata.annotations")[FINGERPRINT] != after.get("metadata.annotations")[FINGERPRINT]
    assert changed is reruns


def test_smoke_test_can_be_disabled(run_dev: DevRunner) -> None:
    assert run_dev({"serving": {"smokeTest": {"enabled": False}}}).of_type("kubernetes:batch/v1:Job") == []


def test_serving_outputs(dev_plan: PlanResult, dev_preview: PlanResult) -> None:
    assert dev_plan.outputs["gatewayIp"].value == PLACEHOLDER_GATEWAY_IP
    assert dev_plan.outputs["completionsUrl"].value == f"http://{PLACEHOLDER_GATEWAY_IP}/v1/completions"
    assert dev_plan.outputs["chatCompletionsUrl"].value == f"http://{PLACEHOLDER_GATEWAY_IP}/v1/chat/completions"
    assert not dev_preview.outputs["gatewayIp"].known


def test_backend_none_creates_no_serving_objects(run_dev: DevRunner) -> None:
    plan = run_dev({"serving": {"backend": "none"}})
    assert plan.of_type(LWS) == []
    assert "gatewayIp" not in plan.outputs
    assert plan.of_type("gcp:storage/bucketIAMMember:BucketIAMMember") == []


def test_the_prefill_leaders_have_a_headless_metrics_service(dev_plan: PlanResult) -> None:
    service = dev_plan.one("kubernetes:core/v1:Service", "prefill-metrics-service")
    assert service.get("spec.clusterIP") == "None"
    selector = service.get("spec.selector")
    lws = dev_plan.one("kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet", "prefill-lws")
    leader_labels = lws.get("spec.leaderWorkerTemplate.leaderTemplate.metadata.labels")
    worker_labels = lws.get("spec.leaderWorkerTemplate.workerTemplate.metadata.labels")
    assert selector.items() <= leader_labels.items()  # every prefill leader, and only leaders
    assert not selector.items() <= worker_labels.items()
    assert service.get("spec.ports") == [{"name": "metrics", "port": 8000, "targetPort": 8000}]


def test_the_command_sdk_turns_triggers_into_a_replacement() -> None:
    """Why the inference-extension command has no triggers: pulumi-command 1.2.1's own SDK."""
    source = Path(command_sdk.__file__).read_text()
    assert 'replace_on_changes=["triggers[*]"]' in source


def test_a_version_bump_of_the_inference_extension_is_an_update(run_dev: DevRunner) -> None:
    old = run_dev().one("command:local:Command", "apply")
    new = run_dev({"versions": {"gatewayApiInferenceExtension": "v1.6.0"}}).one("command:local:Command", "apply")
    assert old.urn == new.urn  # the same resource, its script changed: the engine plans an update
    assert old.get("create") != new.get("create")
    assert new.get("triggers") is None and new.get("delete") is None and not new.delete_before_replace


def _pod_templates(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(where, template) of every pod template in a workload body."""
    spec = body.get("spec") or {}
    if "leaderWorkerTemplate" in spec:
        lwt = spec["leaderWorkerTemplate"]
        return [(part, lwt[part]) for part in ("leaderTemplate", "workerTemplate") if part in lwt]
    if "replicatedJobs" in spec:
        return [(job["name"], job["template"]["spec"]["template"]) for job in spec["replicatedJobs"]]
    if "template" in spec:
        return [("template", spec["template"])]
    return []


def _tpu_pod_templates(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The pod templates of a workload body whose containers ask for TPU chips."""
    return [
        (where, template)
        for where, template in _pod_templates(body)
        if any(
            "google.com/tpu" in ((c.get("resources") or {}).get("limits") or {})
            for c in (template.get("spec") or {}).get("containers") or []
        )
    ]


@pytest.mark.parametrize("stack", ["dev", "dev-b", "saxml-v5e", "jetstream-v5e"])
def test_the_tpu_webhook_is_skipped_exactly_on_dynamic_slice_leaderworkersets(stack: str) -> None:
    """GKE's TPU admission webhook wants a static gke-tpu-topology nodeSelector; a dynamic-slice
    LWS (queued, tpu7x, gke-tpu-slice-topology) has none and skips it on both templates, as the slice
    controller's LWS webhook and llm-d's recipes do (workloads/vllm_pd.py); JobSets and static slices
    keep it, as upstream's Job/JobSet webhooks leave them."""
    from plan import engine

    skip = "cloud.google.com/skip-tpu-webhook-check"
    checked = 0
    for resource in engine.run_stack(stack).resources:
        body = resource.inputs
        kind = str(resource.type).rsplit(":", 1)[-1]
        queued = "kueue.x-k8s.io/queue-name" in ((body.get("metadata") or {}).get("labels") or {})
        for where, template in _tpu_pod_templates(body):
            spec = template.get("spec") or {}
            checked += 1
            annotations = (template.get("metadata") or {}).get("annotations") or {}
            selector = spec.get("nodeSelector") or {}
            dynamic = "cloud.google.com/gke-tpu-slice-topology" in annotations
            expected = (
                kind == "LeaderWorkerSet"
                and queued
                and dynamic
                and selector.get("cloud.google.com/gke-tpu-accelerator") == "tpu7x"
            )
            assert (annotations.get(skip) == "true") is expected, (stack, resource.name, where)
            assert skip not in annotations or "cloud.google.com/gke-tpu-topology" not in selector
    assert checked, f"{stack} has no TPU pod template"


# Sub-slice shapes carry their own partition's state label; a super-slice spans whole cubes and reads
# the 4x4x4 one (AI-Hypercomputer/xpk slice/internal/topology/topology.go `HealthLabel`).
_TPU7X_PARTITIONS = ("2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4")


@pytest.mark.parametrize("stack", ["dev", "dev-b", "saxml-v5e", "jetstream-v5e"])
def test_every_tpu_pod_template_selects_healthy_placement(stack: str) -> None:
    """A TPU7x pod (a dynamic slice on a cube) selects its partition's state label at HEALTHY, on every
    template, so neither GKE's default (the slice controller's HEALTHY_AND_DEGRADED affinity) nor a
    template that forgot it puts a serving group or a check on a degraded partition. A pod of a fixed
    multi-host slice (v5e, v6e node pools) selects its pool's static topology: GKE labels those pools
    with no partition state, and its node-pool repair replaces the whole slice."""
    from plan import engine

    checked = 0
    for resource in engine.run_stack(stack).resources:
        for where, template in _tpu_pod_templates(resource.inputs):
            spec = template.get("spec") or {}
            checked += 1
            selector = spec.get("nodeSelector") or {}
            annotations = (template.get("metadata") or {}).get("annotations") or {}
            at = (stack, resource.name, where)
            if selector.get("cloud.google.com/gke-tpu-accelerator") == "tpu7x":
                shape = annotations["cloud.google.com/gke-tpu-slice-topology"]
                partition = shape if shape in _TPU7X_PARTITIONS else "4x4x4"
                states = {k: v for k, v in selector.items() if k.endswith("-state")}
                assert states == {f"cloud.google.com/gke-tpu-partition-{partition}-state": "HEALTHY"}, at
            else:
                assert "cloud.google.com/gke-tpu-topology" in selector, at
                assert not any(k.startswith("cloud.google.com/gke-tpu-partition-") for k in selector), at
    assert checked, f"{stack} has no TPU pod template"


@pytest.mark.parametrize("stack", ["dev", "dev-b", "saxml-v5e", "jetstream-v5e"])
def test_the_planes_nodes_carry_every_selector_a_tpu_pod_asks_for(stack: str) -> None:
    """The local plane's TPU nodes (tests/control_plane.py tpu_nodes, labelled as GKE labels them) hold
    every nodeSelector label and value the program's TPU pod templates ask for, the HEALTHY partition
    state among them: a selector the plane cannot satisfy would keep every group pending there."""
    from plan import engine
    from tests import control_plane as cp

    nodes = [node["metadata"]["labels"] for node in cp.tpu_nodes(cp.load_stack(stack))]
    for resource in engine.run_stack(stack).resources:
        for where, template in _tpu_pod_templates(resource.inputs):
            selector = (template.get("spec") or {}).get("nodeSelector") or {}
            assert any(selector.items() <= labels.items() for labels in nodes), (stack, resource.name, where)
