"""Observability as the program registers it: scraping, the dashboard and its URL, opt-in alerts."""

from __future__ import annotations

import json

import pytest

from domain.metric_catalog import lookup, metric_names, unknown_metrics
from observability.dashboard import spec_queries
from plan import engine, manifests
from plan.__main__ import main
from plan.engine import PlanResult
from settings.loader import ConfigError
from tests.conftest import DevRunner, config_with
from tests.gmp_schema import validate_pod_monitoring

POD_MONITORING = "kubernetes:monitoring.googleapis.com/v1:PodMonitoring"
DASHBOARD = "gcp:monitoring/dashboard:Dashboard"
ALERT = "gcp:monitoring/alertPolicy:AlertPolicy"
CHANNEL = "projects/example-tpu-project/notificationChannels/1234567890"


def test_vllm_leaders_and_router_are_scraped(dev_plan: PlanResult) -> None:
    monitors = {m.get("metadata.name"): m for m in dev_plan.of_type(POD_MONITORING)}
    assert set(monitors) == {"vllm-prefill", "vllm-decode", "pd-disaggregation-epp"}
    assert monitors["vllm-prefill"].get("spec.endpoints.0.port") == "modelserver"
    assert monitors["vllm-decode"].get("spec.endpoints.0.port") == "vllm"
    assert monitors["pd-disaggregation-epp"].get("spec.endpoints.0.port") == "metrics"
    for role in ("prefill", "decode"):
        selector = monitors[f"vllm-{role}"].get("spec.selector.matchLabels")
        assert selector["llm-d.ai/inference-serving"] == "true" and selector["llm-d.ai/role"] == role
    for monitor in monitors.values():
        assert monitor.get("metadata.namespace") == "llm-d-pd-disaggregation"


def test_scraped_ports_exist_on_the_pods(dev_plan: PlanResult) -> None:
    lws = {r.name: r.inputs for r in dev_plan.of_type("kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet")}
    for role, port in (("prefill", "modelserver"), ("decode", "vllm")):
        leader = lws[f"{role}-lws"]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
        assert port in {p["name"] for p in leader["ports"]}
        assert 8431 in {p["containerPort"] for p in leader["ports"]}  # the TPU runtime metrics GKE reads
    epp = dev_plan.one("kubernetes:apps/v1:Deployment", "epp").get("spec.template.spec.containers.0")
    assert "metrics" in {p["name"] for p in epp["ports"]}
    assert "--metrics-endpoint-auth=false" in epp["args"]


def test_pod_monitorings_match_our_schema(dev_plan: PlanResult) -> None:
    for _, body in manifests.objects(dev_plan):
        if body["kind"] == "PodMonitoring":
            assert validate_pod_monitoring(body) == [], body["metadata"]["name"]


def test_jetstream_is_scraped_and_saxml_is_not() -> None:
    jetstream = engine.run_stack("jetstream-v5e")
    (monitor,) = jetstream.of_type(POD_MONITORING)
    assert monitor.get("spec.endpoints.0.port") == "metrics"
    assert monitor.get("metadata.namespace") == "jetstream"
    assert engine.run_stack("saxml-v5e").of_type(POD_MONITORING) == []


def test_dashboard_per_stack_with_known_metrics(dev_plan: PlanResult) -> None:
    board = dev_plan.one(DASHBOARD)
    spec = json.loads(board.get("dashboardJson"))
    assert spec["displayName"] == "dev: TPU serving"
    assert board.get("project") == "example-tpu-project"
    queries = json.dumps(spec)
    referenced = {
        entry.name
        for query in spec_queries(spec)
        for name in metric_names(query)
        if (entry := lookup(name)) is not None
    }
    assert referenced, "the dashboard charts metrics"
    assert [u for query in spec_queries(spec) for u in unknown_metrics(query)] == []
    for needed in (
        "kubernetes.io/node/accelerator/duty_cycle",
        "vllm:time_to_first_token_seconds",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "inference_objective_request_total",
    ):
        assert needed in referenced, needed
    assert "dev-gke" in queries  # scoped to the stack's own cluster
    assert dev_plan.outputs["dashboardUrl"].value == (
        "https://console.cloud.google.com/monitoring/dashboards/builder/placeholder-dashboard?project=example-tpu-project"
    )


def test_alerts_are_off_by_default_and_use_the_given_channels(dev_plan: PlanResult, run_dev: DevRunner) -> None:
    assert dev_plan.of_type(ALERT) == []
    plan = run_dev({"observability": {"alerts": {"enabled": True, "notificationChannels": [CHANNEL]}}})
    policies = plan.of_type(ALERT)
    assert len(policies) == 13  # four of serving, two of recovery, seven of the TPU hardware (observability/alerts.py)
    for policy in policies:
        assert policy.get("notificationChannels") == [CHANNEL]
        assert policy.get("displayName").startswith("dev")
    queries = [
        c["conditionPrometheusQueryLanguage"]["query"]
        for p in policies
        for c in p.get("conditions")
        if "conditionPrometheusQueryLanguage" in c
    ]
    assert len(queries) >= 3
    assert [u for query in queries for u in unknown_metrics(query)] == []


def test_bad_notification_channel_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"tpu-slicing:observability\.alerts\.notificationChannels"):
        config_with({"observability": {"alerts": {"notificationChannels": ["email:ops@example.com"]}}})


@pytest.mark.parametrize("project", ["example-tpu-project", "123456789012"])
def test_a_channel_names_its_project_by_id_or_by_number(project: str) -> None:
    """Cloud Monitoring API v3 NotificationChannel.name: projects/[PROJECT_ID_OR_NUMBER]/notificationChannels/[ID]
    (the console's links and `gcloud beta monitoring channels list` give the number); refused before."""
    channel = f"projects/{project}/notificationChannels/42"
    config = config_with({"observability": {"alerts": {"enabled": True, "notificationChannels": [channel]}}})
    assert config.observability.alerts.notification_channels == [channel]
    with pytest.raises(ConfigError, match=r"notificationChannels"):
        config_with({"observability": {"alerts": {"notificationChannels": ["projects/0123/notificationChannels/1"]}}})


def test_observability_needs_no_project_roles(dev_plan: PlanResult) -> None:
    roles = [m.get("role") for m in dev_plan.of_type("gcp:projects/iAMMember:IAMMember")]
    assert roles == ["roles/container.defaultNodeServiceAccount"]


def test_observability_can_be_switched_off(run_dev: DevRunner) -> None:
    plan = run_dev({"observability": {"podMonitoring": False, "dashboard": False}})
    assert plan.of_type(POD_MONITORING) == [] and plan.of_type(DASHBOARD) == []
    assert "dashboardUrl" not in plan.outputs


def test_plan_lists_what_is_scraped_and_charted(capsys: pytest.CaptureFixture[str], tmp_path: object) -> None:
    assert main(["--stack", "dev", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "scrape vllm-prefill: pods {" in out and "port modelserver /metrics every 30s" in out
    assert "dashboard 'dev: TPU serving'" in out
    assert "dashboardUrl = https://console.cloud.google.com/monitoring/dashboards/builder/" in out
