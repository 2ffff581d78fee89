"""The controllers' charts at the pinned tags, rendered by real Helm with the program's values
(tests/charts.py), and what the out-of-cluster controllers take from them (tests/controllers.py)."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8s import controllers as program
from settings import rules_network, rules_recovery
from settings.model import KueueRecoveryConfig
from tests import charts
from tests import control_plane as cp
from tests import controllers as running

NAMES = ("kueue", "jobset", "lws")


@pytest.fixture(scope="module", autouse=True)
def _helm() -> None:
    if not charts.helm().is_file():
        pytest.fail(f"{charts.helm()} missing: `make engine` builds it (the README's `make test` does)")


@pytest.mark.parametrize("name", NAMES)
def test_every_value_the_program_passes_is_one_the_chart_defines(name: str) -> None:
    version = running.pinned_versions()[name]
    assert charts.undefined_values(program.VALUES.get(name, {}), charts.chart_values(name, version)) == []


def test_a_value_the_chart_does_not_define_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Helm ignores it without a word; the check above must not."""
    defined = charts.chart_values("kueue", running.pinned_versions()["kueue"])
    wrong = {"controllerManager": {"replica": 2, "manager": {"logLevel": 3, "logLevl": 3}}, "enableCertManagr": True}
    assert charts.undefined_values(wrong, defined) == [
        "controllerManager.replica",
        "controllerManager.manager.logLevl",
        "enableCertManagr",
    ]
    monkeypatch.setitem(program.VALUES, "kueue", wrong)
    with pytest.raises(AssertionError):
        test_every_value_the_program_passes_is_one_the_chart_defines("kueue")


def test_free_form_values_are_the_charts_to_read() -> None:
    """Under a default that is a list, a string or an empty map (labels, tolerations) anything goes."""
    defined = {"commonLabels": {}, "tolerations": [], "image": {"tag": "x"}}
    given = {"commonLabels": {"team": "ml"}, "tolerations": [{"key": "a"}], "image": {"tag": "y"}}
    assert charts.undefined_values(given, defined) == []


def test_the_programs_values_reach_the_rendering() -> None:
    """Kueue's two manager replicas (k8s/controllers.py VALUES) are in the Deployment Helm renders."""
    chart = running.rendered("kueue")
    deployment = chart.one("Deployment", "-controller-manager")
    assert deployment["spec"]["replicas"] == program.VALUES["kueue"]["controllerManager"]["replicas"] == 2
    assert deployment["metadata"]["namespace"] == program.KUEUE.namespace


@pytest.mark.parametrize("name", NAMES)
def test_each_chart_makes_the_services_the_service_range_rule_counts(name: str) -> None:
    """settings/rules_network.py CHART_SERVICES: a Service with an address (not headless) takes one of
    network.serviceCidr's whether the program installs the chart or a platform team does."""
    services = running.rendered(name).of_kind("Service")
    addressed = [s["metadata"]["name"] for s in services if (s.get("spec") or {}).get("clusterIP") != "None"]
    assert len(addressed) == rules_network.CHART_SERVICES[name], addressed


@pytest.mark.parametrize("name", NAMES)
def test_each_chart_renders_one_controller_with_a_configuration_and_webhooks(name: str) -> None:
    chart = running.rendered(name)
    config = chart.manager_config()
    assert config["kind"] == "Configuration"
    assert config["apiVersion"].startswith(f"config.{'kueue.x-k8s.io' if name == 'kueue' else name + '.x-k8s.io'}/")
    assert chart.manager_container()["command"] == ["/manager"]
    assert chart.service_account()
    kinds = {w["clientConfig"]["service"]["name"] for _, w in charts.walk_webhooks(chart.webhook_configurations())}
    assert kinds == {f"{program.CHARTS[name].release}-webhook-service"}


# The keys loopback_config may change, and why (tests/controllers.py says it in one place).
LOOPBACK_KEYS = {"health", "webhook", "metrics", "leaderElection", "internalCertManagement", "featureGates"}


@pytest.mark.parametrize("name", NAMES)
def test_the_controllers_run_the_charts_configuration_but_for_loopback(name: str, tmp_path: Path) -> None:
    chart = running.rendered(name).manager_config()
    used = running.loopback_config(name, 1001, 1002, tmp_path)
    changed = {key for key in chart.keys() | used.keys() if chart.get(key) != used.get(key)}
    assert changed <= LOOPBACK_KEYS
    assert used["webhook"]["host"] == "127.0.0.1" and used["webhook"]["port"] == 1002
    if name == "kueue":
        # The chart's integrations, not a list written here: Ray, Kubeflow and AppWrapper included.
        assert used["integrations"] == chart["integrations"]
        assert "leaderworkerset.x-k8s.io/leaderworkerset" in used["integrations"]["frameworks"]
        # The program's recovery gates (settings/rules_recovery.py) stay; only the visibility API is off.
        assert used["featureGates"] == {**chart["featureGates"], "VisibilityOnDemand": False}


def test_kueue_runs_the_charts_default_configuration_plus_the_recovery_keys() -> None:
    """The chart takes Kueue's Configuration as one string, so the program writes it whole
    (k8s/controllers.py): it must be the chart's default at the pin plus waitForPodsReady and the
    feature gates, so a chart bump that changes a default fails here instead of being overwritten."""
    version = running.pinned_versions()["kueue"]
    default = charts.render("kueue", version, {}).manager_config()
    installed = charts.render("kueue", version).manager_config()
    recovery = rules_recovery.kueue_manager_config(KueueRecoveryConfig.model_validate({}))
    assert installed == {**default, **recovery}
    assert "waitForPodsReady" not in default and "featureGates" not in default
    assert installed["waitForPodsReady"]["timeout"] == f"{rules_recovery.PODS_READY_MIN_SECONDS // 60}m"
    assert installed["waitForPodsReady"]["blockAdmission"] is False


@pytest.mark.parametrize("name", NAMES)
def test_the_registered_webhooks_are_the_charts_pointed_at_loopback(name: str) -> None:
    chart = running.rendered(name).webhook_configurations()
    used = running.webhook_configurations(name, 4443, b"ca")

    def without_client(configurations: list[dict[str, Any]]) -> list[dict[str, Any]]:
        stripped = copy.deepcopy(configurations)
        for configuration in stripped:
            configuration["metadata"] = {"name": configuration["metadata"]["name"]}
            for webhook in configuration["webhooks"]:
                webhook.pop("clientConfig")
        return stripped

    assert without_client(used) == without_client(chart)
    for (_, webhook), (_, source) in zip(charts.walk_webhooks(used), charts.walk_webhooks(chart), strict=True):
        assert webhook["clientConfig"]["url"] == f"https://127.0.0.1:4443{source['clientConfig']['service']['path']}"


def test_kueue_keeps_its_job_webhooks_out_of_its_own_and_the_system_namespaces() -> None:
    """From the chart's managedJobsNamespaceSelector, which the tests once copied by hand."""
    selectors = {
        str(w.get("namespaceSelector"))
        for _, w in charts.walk_webhooks(running.rendered("kueue").webhook_configurations())
        if w["name"].startswith(("mpod", "vpod", "mjobset", "mleaderworkerset"))
    }
    assert len(selectors) == 1 and "kube-system" in selectors.pop()


@pytest.mark.parametrize("name", NAMES)
def test_the_controller_runs_as_the_charts_service_account(name: str) -> None:
    chart = running.rendered(name)
    rbac = chart.rbac()
    accounts = [d["metadata"]["name"] for d in rbac if d["kind"] == "ServiceAccount"]
    assert accounts == [chart.service_account()]
    bound = {
        subject["name"]
        for d in rbac
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
        for subject in d.get("subjects") or []
    }
    assert chart.service_account() in bound
    assert running.chart_args(name) == [a for a in chart.manager_container()["args"] if not a.startswith("--config")]


# --- on a plane: the controllers as the charts install them ---------------------------------------


@pytest.fixture(scope="module")
def running_controllers() -> Iterator[tuple[cp.ControlPlane, running.Controllers]]:
    with cp.control_plane() as plane, running.controllers(plane) as controllers:
        yield plane, controllers


def _allowed(plane: cp.ControlPlane, review: Mapping[str, Any], attributes: dict[str, str]) -> bool:
    """The RBAC authorizer's verdict for the reviewed user, asked by the admin (a
    SubjectAccessReview): a request made with the account's own token would share its API Priority
    and Fairness level with the running controller and may be answered 429."""
    status = review["status"]
    spec = {"user": status["user"]["username"], "groups": status["user"].get("groups") or [],
            "uid": status["user"].get("uid", ""), "resourceAttributes": attributes}  # fmt: skip
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
    answer = plane.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body)
    return bool(answer["status"].get("allowed"))


@pytest.mark.xdist_group(cp.XDIST_GROUP)
@pytest.mark.parametrize("name", NAMES)
def test_each_controller_authenticates_as_its_charts_service_account_and_is_held_to_its_rbac(
    running_controllers: tuple[cp.ControlPlane, running.Controllers], name: str
) -> None:
    plane, controllers = running_controllers
    chart = running.rendered(name)
    kubeconfig = yaml.safe_load((controllers.workdir / f"{name}.kubeconfig").read_text())
    (user,) = kubeconfig["users"]
    assert user["name"] == f"system:serviceaccount:{chart.namespace}:{chart.service_account()}"
    token = user["user"]["token"]
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
    reviewed = plane.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", review)
    assert reviewed["status"]["user"]["username"] == user["name"]
    # What its chart grants: reading the kinds it reconciles. What it does not: writing Secrets in
    # the default namespace (no chart grants that), so a missing permission would fail here too.
    group, resource = {"kueue": ("kueue.x-k8s.io", "workloads"), "jobset": ("jobset.x-k8s.io", "jobsets"),
                       "lws": ("leaderworkerset.x-k8s.io", "leaderworkersets")}[name]  # fmt: skip
    assert _allowed(plane, reviewed, {"group": group, "resource": resource, "verb": "list"})
    assert not _allowed(plane, reviewed, {"group": "", "resource": "secrets", "verb": "create", "namespace": "default"})
    controllers.check_alive()


@pytest.mark.xdist_group(cp.XDIST_GROUP)
def test_the_registered_webhook_configurations_are_the_charts(
    running_controllers: tuple[cp.ControlPlane, running.Controllers],
) -> None:
    plane, _ = running_controllers
    kinds = {"mutatingwebhookconfigurations": "MutatingWebhookConfiguration",
             "validatingwebhookconfigurations": "ValidatingWebhookConfiguration"}  # fmt: skip
    live = {
        (kind, configuration["metadata"]["name"], webhook["name"])
        for plural, kind in kinds.items()
        for configuration in plane.request("GET", f"/apis/admissionregistration.k8s.io/v1/{plural}")["items"]
        for webhook in configuration.get("webhooks") or []
    }
    for name in NAMES:
        chart = running.rendered(name).webhook_configurations()
        assert {(c["kind"], c["metadata"]["name"], w["name"]) for c in chart for w in c["webhooks"]} <= live
