"""Cluster software: provider, controllers, slice controller, Kueue objects, slicing checks."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from pulumi.output import Unknown

from domain.topology import CATALOG
from k8s import controllers
from k8s.slice_controller import WEBHOOKS
from k8s.slicing_checks import PROGRAM
from plan import manifests
from plan.engine import PlanResult, Resource
from tests.conftest import DevRunner, config_with
from tests.refusal_members import REGISTRIES

RELEASE = "kubernetes:helm.sh/v3:Release"
PROVIDER = "pulumi:providers:kubernetes"
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
KUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:"
BOTH_CHECKS = {
    "checks": {"subslicing": {"enabled": True}, "superslicing": {"enabled": True}},
    "serving": {"backend": "none"},
}


@pytest.fixture(scope="module")
def checks_plan() -> PlanResult:
    from plan import engine
    from tests.conftest import dev_raw, merged

    raw, secrets = dev_raw()
    return engine.run(merged(BOTH_CHECKS, raw), stack="dev", secret_keys=secrets)


def tpu_pools(plan: PlanResult) -> list[Resource]:
    return [p for p in plan.of_type("gcp:container/nodePool:NodePool") if p.name.startswith("cube-")]


def test_provider_uses_the_cluster_kubeconfig_with_server_side_apply(dev_plan: PlanResult) -> None:
    provider = dev_plan.one(PROVIDER, "gke")
    assert provider.get("enableServerSideApply") in (True, "true")
    assert provider.get("deleteUnreachable") is None  # opt-in only: a refresh during an outage would drop state
    assert "gke-gcloud-auth-plugin" in provider.get("kubeconfig")
    cluster = dev_plan.one("gcp:container/cluster:Cluster")
    system = dev_plan.one("gcp:container/nodePool:NodePool", "system-pool")
    assert dev_plan.depends_on(provider, cluster)
    assert dev_plan.depends_on(provider, system)
    for pool in tpu_pools(dev_plan):
        assert not dev_plan.depends_on(provider, pool), "controllers must not wait for the TPU pools"


def test_every_kubernetes_object_uses_the_cluster_provider(checks_plan: PlanResult) -> None:
    provider = checks_plan.one(PROVIDER, "gke")
    for resource in checks_plan.resources:
        if resource.custom and resource.type.startswith("kubernetes:"):
            assert resource.provider.startswith(provider.urn + "::"), resource.name


@pytest.mark.parametrize(
    ("name", "chart", "version", "namespace"),
    [
        ("jobset", "oci://registry.k8s.io/jobset/charts/jobset", "0.12.0", "jobset-system"),
        ("kueue", "oci://registry.k8s.io/kueue/charts/kueue", "0.19.2", "kueue-system"),
        ("lws", "oci://registry.k8s.io/lws/charts/lws", "v0.8.0", "lws-system"),
    ],
)
def test_controllers_are_pinned_helm_releases_that_wait(
    dev_plan: PlanResult, name: str, chart: str, version: str, namespace: str
) -> None:
    release = dev_plan.one(RELEASE, name)
    assert (release.get("name"), release.get("chart"), release.get("version")) == (name, chart, version)
    assert release.get("namespace") == namespace
    assert release.get("createNamespace") is True
    assert not release.get("skipAwait")
    assert release.get("atomic") is True
    assert release.get("timeout") == 600


def test_kueue_is_installed_after_jobset_and_lws(dev_plan: PlanResult) -> None:
    """Kueue's fail-closed Deployment and Pod webhooks cover every other namespace: installed beside
    it, the JobSet and LWS Deployments are refused until Kueue serves (k8s/controllers.py)."""
    kueue, jobset, lws = (dev_plan.one(RELEASE, name) for name in ("kueue", "jobset", "lws"))
    assert dev_plan.depends_on(kueue, jobset) and dev_plan.depends_on(kueue, lws)
    assert not dev_plan.depends_on(jobset, lws) and not dev_plan.depends_on(lws, jobset)
    assert not dev_plan.depends_on(jobset, kueue) and not dev_plan.depends_on(lws, kueue)


def test_versions_come_from_config(run_dev: DevRunner) -> None:
    # Any release at or above the guide's floors (settings/model.py CONTROLLER_FLOORS) is selectable;
    # the reference's 0.11.1 / 0.17.4 are below them and refused.
    plan = run_dev({"versions": {"kueue": "0.18.2", "jobset": "0.12.0", "lws": "v0.10.0"}})
    assert [plan.one(RELEASE, n).get("version") for n in ("jobset", "kueue", "lws")] == ["0.12.0", "0.18.2", "v0.10.0"]


def test_slice_controller_installs_last_and_its_webhooks_wait_for_it(dev_plan: PlanResult) -> None:
    deployment = dev_plan.one("kubernetes:apps/v1:Deployment", "controller-manager")
    webhooks = dev_plan.one("kubernetes:admissionregistration.k8s.io/v1:MutatingWebhookConfiguration")
    for release in dev_plan.of_type(RELEASE):
        assert dev_plan.depends_on(deployment, release), release.name
        assert not dev_plan.depends_on(release, deployment)
    assert dev_plan.depends_on(webhooks, deployment)
    hooks = webhooks.get("webhooks")
    assert [(h["name"], h["clientConfig"]["service"]["path"]) for h in hooks] == [(w[0], w[1]) for w in WEBHOOKS]
    assert all(h["failurePolicy"] == "Fail" and h["sideEffects"] == "None" for h in hooks)
    assert all(h["rules"][0]["operations"] == ["CREATE"] for h in hooks)


def test_slice_controller_deployment_settings(dev_plan: PlanResult) -> None:
    deployment = dev_plan.one("kubernetes:apps/v1:Deployment", "controller-manager")
    pod = deployment.get("spec.template.spec")
    container = pod["containers"][0]
    assert container["image"] == "tpuongke/kueue-slice-controller:v0.8.0-200"
    assert "--activation-timeout=60m" in container["args"]
    # The image's controller exits at start on a gate it does not know (AI-Hypercomputer/xpk
    # slice/cmd/main.go); the gates of slice/internal/features/features.go since v0.8.0-196
    # (250d4b3c, which removed ShorterSliceNameLength), the image being v0.8.0-200.
    known = {
        "UseRetryMechanismForSliceCreation",
        "FailOnUntoleratedDegradedSlice",
        "TopologyFromNodeSelectorOrAffinity",
    }
    (gates,) = [a.removeprefix("--feature-gates=") for a in container["args"] if a.startswith("--feature-gates=")]
    assert {gate.split("=")[0] for gate in gates.split(",")} <= known, gates
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 8081}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8081}
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["serviceAccountName"] == "slice-controller-controller-manager"
    selector = deployment.get("spec.selector.matchLabels")
    service = dev_plan.one("kubernetes:core/v1:Service", "webhook-service")
    assert service.get("spec.selector") == selector
    assert service.get("spec.ports.0.targetPort") == 9443


def test_kueue_objects_depend_on_kueue_and_derive_names(dev_plan: PlanResult) -> None:
    kueue = dev_plan.one(RELEASE, "kueue")
    objects = [r for r in dev_plan.resources if r.type.startswith(KUEUE)]
    assert {r.type.removeprefix(KUEUE) for r in objects} == {
        "Topology",
        "ResourceFlavor",
        "AdmissionCheck",
        "ClusterQueue",
        "LocalQueue",
        "WorkloadPriorityClass",
    }
    for obj in objects:
        assert dev_plan.depends_on(obj, kueue), obj.name
        if obj.type.endswith(("LocalQueue",)):
            assert obj.get("metadata.namespace") == "llm-d-pd-disaggregation"
        else:
            assert obj.get("metadata.name").startswith("dev-"), obj.name


def test_kueue_topology_flavor_check_and_priorities(dev_plan: PlanResult) -> None:
    topology = dev_plan.one(KUEUE + "Topology")
    assert topology.get("spec.levels.0.nodeLabel") == "cloud.google.com/gce-topology-block"
    assert len(topology.get("spec.levels")) == 7
    flavor = dev_plan.one(KUEUE + "ResourceFlavor")
    assert flavor.get("spec") == {
        "nodeLabels": {"cloud.google.com/gke-tpu-accelerator": "tpu7x"},
        "topologyName": "dev-slice-topology",
    }
    assert dev_plan.one(KUEUE + "AdmissionCheck").get("spec.controllerName") == "accelerator.gke.io/slice"
    priorities = {p.get("metadata.name"): p.get("value") for p in dev_plan.of_type(KUEUE + "WorkloadPriorityClass")}
    assert priorities == {"dev-low": 1000, "dev-medium": 2000, "dev-high": 3000}


def test_a_new_priority_value_updates_its_class_in_place_and_leaves_the_workloads_alone(
    dev_plan: PlanResult, run_dev: DevRunner
) -> None:
    """Kueue's LWS webhook copies the class name into the pod templates, so a name that carried
    the value restarted every serving group when the value moved (the README's Operations)."""
    raised = run_dev({"kueue": {"priorities": {"high": 3500}}})
    before = {p.name: p for p in dev_plan.of_type(KUEUE + "WorkloadPriorityClass")}
    after = {p.name: p for p in raised.of_type(KUEUE + "WorkloadPriorityClass")}
    assert before.keys() == after.keys()
    assert after["priority-high"].get("metadata.name") == before["priority-high"].get("metadata.name") == "dev-high"
    assert after["priority-high"].get("value") == 3500
    lws = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"
    assert {r.name: r.inputs for r in raised.of_type(lws)} == {r.name: r.inputs for r in dev_plan.of_type(lws)}


def test_cluster_queue_quota_matches_the_pools(dev_plan: PlanResult, run_dev: DevRunner) -> None:
    queue = dev_plan.one(KUEUE + "ClusterQueue")
    assert queue.get("spec.preemption") == {"withinClusterQueue": "LowerPriority"}
    assert queue.get("spec.admissionChecksStrategy.admissionChecks") == [{"name": "dev-slice"}]
    group = queue.get("spec.resourceGroups.0")
    assert group["coveredResources"] == ["google.com/tpu", "cpu", "memory"]
    machine = CATALOG["tpu7x"].machine_types[0]
    quotas = {q["name"]: q["nominalQuota"] for q in group["flavors"][0]["resources"]}
    # 32 x 960 GiB = 30 TiB, written canonically as the API server stores it (contracts/quantities.py).
    assert 32 * machine.memory_gib == 30 * 1024
    assert quotas == {"google.com/tpu": "128", "cpu": str(32 * machine.vcpus), "memory": "30Ti"}
    bigger = run_dev({"tpu": {"cubes": 3}, "reservation": {"subBlocks": None}}).one(KUEUE + "ClusterQueue")
    assert bigger.get("spec.resourceGroups.0.flavors.0.resources.0.nominalQuota") == "192"
    # Active needs the slice controller behind the admission check.
    assert queue.get("metadata.annotations") == {
        "pulumi.com/waitFor": "condition=Active",
        "pulumi.com/timeoutSeconds": "600",
        # Kueue's recovery settings, one per line of a plan diff (settings/rules_recovery.py).
        "tpu-slicing/kueue-wait-for-pods-ready": "timeout=250m recoveryTimeout=250m blockAdmission=false",
        "tpu-slicing/kueue-requeuing": (
            "timestamp=Eviction backoffBaseSeconds=60 backoffMaxSeconds=1800 backoffLimitCount=unlimited"
        ),
        "tpu-slicing/kueue-feature-gates": (
            "TASFailedNodeReplacement=true TASFailedNodeReplacementFailFast=true "
            "TASReplaceNodeOnPodTermination=true TASReplaceNodeOnNodeTaints=true FailureRecoveryPolicy=true"
        ),
    }
    assert dev_plan.depends_on(queue, dev_plan.one("kubernetes:apps/v1:Deployment", "controller-manager"))


def test_checks_are_off_by_default(dev_plan: PlanResult) -> None:
    assert dev_plan.of_type(JOBSET) == []


def jobset(plan: PlanResult, name: str) -> dict[str, Any]:
    return plan.one(JOBSET, name).inputs


@pytest.mark.parametrize(
    "case",
    [
        ("subslicing-check", "2x2x2", 6, 2, "dev-low", "2x2x2"),
        # A super-slice spans whole cubes: each of them HEALTHY (settings/rules_recovery.py).
        ("superslicing-check", "4x4x8", 1, 32, "dev-medium", "4x4x4"),
    ],
)
def test_check_jobsets(checks_plan: PlanResult, case: tuple[str, str, int, int, str, str]) -> None:
    name, topology, replicas, pods, priority, partition = case
    body = jobset(checks_plan, name)
    assert body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "tpu"
    assert body["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == priority
    assert body["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    job = body["spec"]["replicatedJobs"][0]
    assert job["replicas"] == replicas
    assert (job["template"]["spec"]["parallelism"], job["template"]["spec"]["completions"]) == (pods, pods)
    pod = job["template"]["spec"]["template"]
    assert pod["metadata"]["annotations"] == {"cloud.google.com/gke-tpu-slice-topology": topology}
    spec = pod["spec"]
    assert spec["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu7x",
        f"cloud.google.com/gke-tpu-partition-{partition}-state": "HEALTHY",
    }
    assert spec["tolerations"] == [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]
    container = spec["containers"][0]
    assert container["resources"]["limits"] == {"google.com/tpu": "4"}
    assert container["command"] == ["python3", "/opt/slice-check/slice_check.py"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["SLICE_TOPOLOGY"] == topology and env["DEVICES_PER_CHIP"] == "2"
    assert "pip install" not in str(body)


def test_check_program_is_shipped_in_a_config_map(checks_plan: PlanResult) -> None:
    config_map = checks_plan.one("kubernetes:core/v1:ConfigMap", "program")
    assert config_map.get("data")["slice_check.py"] == PROGRAM.read_text()


def test_checks_wait_for_pools_controllers_and_queues(checks_plan: PlanResult) -> None:
    for resource in checks_plan.of_type(JOBSET):
        for pool in tpu_pools(checks_plan):
            assert checks_plan.depends_on(resource, pool)
        for dependency in (
            checks_plan.one("kubernetes:apps/v1:Deployment", "controller-manager"),
            checks_plan.one(RELEASE, "jobset"),
            checks_plan.one(KUEUE + "LocalQueue"),
            *checks_plan.of_type(KUEUE + "WorkloadPriorityClass"),
        ):
            assert checks_plan.depends_on(resource, dependency), dependency.name


def test_fresh_stack_previews_with_cluster_software(run_dev: DevRunner) -> None:
    plan = run_dev(BOTH_CHECKS, preview=True)
    provider = plan.one(PROVIDER, "gke")
    assert isinstance(provider.get("kubeconfig"), Unknown)  # unknown until the cluster exists
    assert len(plan.of_type(RELEASE)) == 3
    assert len(plan.of_type(JOBSET)) == 2
    assert not any(r.remote for r in plan.resources), "remote components cannot be built with an unknown kubeconfig"


FLOATING = re.compile(r"(:latest\b|:main\b|:master\b|:nightly|@main\b|^v?0$|^latest$|^main$|\*|\^|~)")


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def test_nothing_registered_floats(checks_plan: PlanResult) -> None:
    for release in checks_plan.of_type(RELEASE):
        assert re.fullmatch(r"v?\d+\.\d+\.\d+", release.get("version")), release.name
    images = [s for _, obj in manifests.objects(checks_plan) for key, s in _image_fields(obj)]
    assert images, "expected container images"
    for image in images:
        assert not FLOATING.search(image), image
        assert ":" in image.rsplit("/", 1)[-1] or "@sha256:" in image, image


def _image_fields(value: Any) -> list[tuple[str, str]]:
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "image" and isinstance(item, str):
                found.append((key, item))
            else:
                found += _image_fields(item)
    elif isinstance(value, list):
        for item in value:
            found += _image_fields(item)
    return found


def test_manifests_are_written_for_review(checks_plan: PlanResult, tmp_path: Any) -> None:
    written = manifests.write(checks_plan, tmp_path)
    names = {p.name for p in written}
    assert "llm-d-pd-disaggregation--jobset--superslicing-check.yaml" in names
    assert "kueue-system--helm-release--kueue.yaml" in names
    assert "cluster--clusterqueue--dev-tpu.yaml" in names


SLICE_CONTROLLER_NS = "slice-controller-system"


def _rules(plan: PlanResult, kind: str) -> list[dict[str, Any]]:
    return [
        rule for role in plan.of_type(f"kubernetes:rbac.authorization.k8s.io/v1:{kind}") for rule in role.get("rules")
    ]


def test_slice_controller_reads_and_writes_only_its_own_secret_and_webhook_configuration(dev_plan: PlanResult) -> None:
    cluster_wide = _rules(dev_plan, "ClusterRole")
    assert not [r for r in cluster_wide if "secrets" in r.get("resources", [])]
    webhook_writes = [
        r
        for r in cluster_wide
        if "mutatingwebhookconfigurations" in r.get("resources", [])
        and {"update", "patch", "create", "delete"} & set(r["verbs"])
    ]
    assert webhook_writes and all(
        r.get("resourceNames") == ["slice-controller-mutating-webhook-configuration"] for r in webhook_writes
    )
    roles = [r for r in dev_plan.of_type("kubernetes:rbac.authorization.k8s.io/v1:Role") if r.name == "cert-role"]
    assert [role.get("metadata.namespace") for role in roles] == [SLICE_CONTROLLER_NS]
    secret_writes = [r for r in roles[0].get("rules") if "update" in r["verbs"]]
    assert secret_writes == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "verbs": ["update"],
            "resourceNames": ["slice-controller-webhook-server-cert"],
        }
    ]


def test_slice_controller_survives_losing_one_replica(dev_plan: PlanResult) -> None:
    deployment = dev_plan.one("kubernetes:apps/v1:Deployment", "controller-manager")
    assert deployment.get("spec.replicas") == 2
    assert "--leader-elect" in deployment.get("spec.template.spec.containers.0.args")
    spread = deployment.get("spec.template.spec.topologySpreadConstraints")
    assert [c["topologyKey"] for c in spread] == ["kubernetes.io/hostname"]
    budget = dev_plan.one("kubernetes:policy/v1:PodDisruptionBudget", "disruption-budget")
    assert budget.get("spec.minAvailable") == 1
    assert budget.get("spec.selector.matchLabels") == deployment.get("spec.selector.matchLabels")


RELEASE = "kubernetes:helm.sh/v3:Release"


def test_controllers_already_installed_means_no_release_and_nothing_else_changes(
    dev_plan: PlanResult, run_dev: Any
) -> None:
    """A shared cluster's platform team runs JobSet, Kueue and LWS: the stack installs none of
    them and registers everything else exactly as before."""
    shared = run_dev({"controllers": {"install": False}})
    assert {r.name for r in dev_plan.of_type(RELEASE)} == {"jobset", "kueue", "lws"}
    assert shared.of_type(RELEASE) == []
    releases = {r.urn for r in dev_plan.of_type(RELEASE)}
    assert {r.urn for r in shared.resources} == {r.urn for r in dev_plan.resources} - releases
    # Nothing waits for a release that is not there.
    assert not [r.urn for r in shared.resources if set(r.dependencies) & releases]


def test_controllers_already_installed_show_the_versions_the_platform_team_must_run(
    dev_plan: PlanResult, run_dev: Any
) -> None:
    """In a shared cluster a version bump changes no object: the platformControllers output is
    where `pulumi preview` shows it (the README's "Operations" recipe)."""
    assert "platformControllers" not in dev_plan.outputs
    shared = run_dev({"controllers": {"install": False}})
    assert shared.outputs["platformControllers"].value == {"jobset": "0.12.0", "kueue": "0.19.2", "lws": "v0.8.0"}
    bumped = run_dev({"controllers": {"install": False}, "versions": {"kueue": "0.19.3"}})
    assert bumped.outputs["platformControllers"].value["kueue"] == "0.19.3"
    assert {r.urn: r.inputs for r in bumped.resources} == {r.urn: r.inputs for r in shared.resources}


# --- controllers.chartRegistry: where the charts are pulled from ---------------------------------------------

COMPONENTS = ("jobset", "kueue", "lws")


def test_the_default_registry_gives_todays_chart_references(dev_plan: PlanResult) -> None:
    assert {n: dev_plan.one(RELEASE, n).get("chart") for n in COMPONENTS} == {
        "jobset": "oci://registry.k8s.io/jobset/charts/jobset",
        "kueue": "oci://registry.k8s.io/kueue/charts/kueue",
        "lws": "oci://registry.k8s.io/lws/charts/lws",
    }


def test_a_mirror_serves_every_chart_at_registry_k8s_ios_paths(dev_plan: PlanResult, run_dev: DevRunner) -> None:
    """An Artifact Registry remote repository mirroring registry.k8s.io: the same paths under its root,
    the same pinned versions, the same resources (only the chart input moves)."""
    mirrored = run_dev({"controllers": {"chartRegistry": "oci://us-docker.pkg.dev/my-project/k8s-mirror"}})
    assert {n: mirrored.one(RELEASE, n).get("chart") for n in COMPONENTS} == {
        "jobset": "oci://us-docker.pkg.dev/my-project/k8s-mirror/jobset/charts/jobset",
        "kueue": "oci://us-docker.pkg.dev/my-project/k8s-mirror/kueue/charts/kueue",
        "lws": "oci://us-docker.pkg.dev/my-project/k8s-mirror/lws/charts/lws",
    }
    for name in COMPONENTS:
        before, after = dev_plan.one(RELEASE, name), mirrored.one(RELEASE, name)
        assert {**after.inputs, "chart": before.get("chart")} == before.inputs
    assert {r.urn for r in mirrored.resources} == {r.urn for r in dev_plan.resources}


@settings(deadline=None, max_examples=80)
@given(REGISTRIES)
def test_every_registry_helm_pulls_from_is_accepted_and_prefixes_each_chart(registry: str) -> None:
    config = config_with({"controllers": {"chartRegistry": registry}})
    assert config.controllers.chart_registry == registry
    assert {n: controllers.chart_reference(registry, controllers.CHARTS[n]) for n in COMPONENTS} == {
        n: f"{registry}/{n}/charts/{n}" for n in COMPONENTS
    }
