"""The gcp: and pulumi: keys the provider and the engine read are judged like the program's own, before anything."""

from __future__ import annotations

import json
from typing import Any

import pytest

from plan import engine
from settings import provider_keys
from settings.loader import ConfigError, load
from tests.conftest import dev_raw, merged


def _verdict(overrides: dict[str, Any], secret: tuple[str, ...] = ()) -> str | None:
    raw, secrets = dev_raw()
    raw = merged(overrides, raw)
    try:
        load(raw, stack="dev", project="example-tpu-project", secret_keys=[*secrets, *secret])
    except ConfigError as err:
        return str(err)
    return None


# --- gcp:defaultLabels


@pytest.mark.parametrize(
    "labels",
    [
        {"team": "serving", "cost-center": "1234", "env": ""},
        {"équipe": "données", "ラベル": "推論", "k_8": "v-1_2"},  # international characters are allowed
        {"a" * 63: "b" * 63},
        {"n": 42},  # YAML's integer: the digits are a valid value
        {f"l{i}": "x" for i in range(64)},
    ],
)
def test_labels_gcp_accepts_pass(labels: dict[str, Any]) -> None:
    assert provider_keys.default_labels(labels) == []
    assert _verdict({"gcp:defaultLabels": labels}) is None
    assert _verdict({"gcp:defaultLabels": json.dumps(labels)}) is None  # as the engine hands it: JSON text


@pytest.mark.parametrize(
    ("labels", "fragment"),
    [
        ({"Team": "serving"}, "key 'Team' has a character"),
        ({"1team": "x"}, "key '1team' has a character"),
        ({"_team": "x"}, "key '_team' has a character"),
        ({"": "x"}, "key '' is not 1-63 characters"),
        ({"a" * 64: "x"}, "is not 1-63 characters"),
        ({"team": "Serving"}, "team: value 'Serving' has a character"),
        ({"team": "a.b"}, "team: value 'a.b' has a character"),
        ({"team": "x" * 64}, "longer than 63 characters"),
        ({"team": True}, "team: True is not a label value"),
        ({"team": {"nested": "x"}}, "is not a label value"),
    ],
)
def test_labels_gcp_refuses_are_refused_naming_the_label(labels: dict[str, Any], fragment: str) -> None:
    message = _verdict({"gcp:defaultLabels": labels})
    assert message is not None and "gcp:defaultLabels: " in message and fragment in message, message
    assert "allowed: keys of 1-63 characters" in message


def test_more_labels_than_a_resource_takes_are_refused_with_the_count() -> None:
    message = _verdict({"gcp:defaultLabels": {f"l{i}": "x" for i in range(65)}})
    assert message is not None and "65 labels, over GCP's 64" in message and "allowed: at most 64" in message


def test_labels_that_are_not_a_mapping_are_refused() -> None:
    assert provider_keys.default_labels("team=serving") == [
        f"gcp:defaultLabels: 'team=serving' is not a mapping; allowed: a mapping of labels, "
        f"{provider_keys.LABEL_ALLOWED}"
    ]


# --- gcp:impersonateServiceAccount


@pytest.mark.parametrize(
    "email",
    [
        "deployer@example-tpu-project.iam.gserviceaccount.com",
        "pulumi-up-01@p-roject.iam.gserviceaccount.com",
        "123456789012-compute@developer.gserviceaccount.com",
        "example-tpu-project@appspot.gserviceaccount.com",
    ],
)
def test_a_service_account_may_be_impersonated(email: str) -> None:
    assert _verdict({"gcp:impersonateServiceAccount": email}) is None


@pytest.mark.parametrize(
    "email",
    [
        "alice@example.com",  # a user: the provider cannot impersonate one
        "deployer",
        "dep@example-tpu-project.iam.gserviceaccount.com",  # account ids are 6-30 characters
        "Deployer@example-tpu-project.iam.gserviceaccount.com",
        "deployer@example-tpu-project.iam.gserviceaccount.com ",
        "deployer@example-tpu-project.iam.gserviceaccount.com.evil.example",
    ],
)
def test_anything_but_a_service_account_is_refused(email: str) -> None:
    message = _verdict({"gcp:impersonateServiceAccount": email})
    assert message is not None
    assert f"gcp:impersonateServiceAccount: {email!r} is not a service account" in message
    assert "allowed: a service account's email" in message


def test_a_secret_key_is_neither_judged_nor_echoed() -> None:
    assert _verdict({"gcp:impersonateServiceAccount": "alice@example.com"}, ("gcp:impersonateServiceAccount",)) is None


# --- pulumi:disable-default-providers


def test_disabling_a_provider_the_program_passes_explicitly_passes() -> None:
    assert _verdict({"pulumi:disable-default-providers": ["kubernetes"]}) is None


@pytest.mark.parametrize(
    ("packages", "named"),
    [(["gcp"], ["gcp"]), (["kubernetes", "command"], ["command"]), (["*"], ["command", "gcp"])],
)
def test_disabling_a_default_provider_the_program_uses_is_refused(packages: list[str], named: list[str]) -> None:
    message = _verdict({"pulumi:disable-default-providers": packages})
    assert message is not None
    assert _verdict({"pulumi:disable-default-providers": json.dumps(packages)}) == message
    for name in named:
        assert f"pulumi:disable-default-providers: {packages!r} disables the default {name} provider" in message
    assert "allowed: packages the program reaches only through its own providers (kubernetes)" in message


def test_a_disabled_list_that_is_not_a_list_is_refused() -> None:
    message = _verdict({"pulumi:disable-default-providers": "gcp"})
    assert message is not None and "'gcp' is not a list of package names" in message


def test_the_default_providers_are_those_the_plan_uses() -> None:
    """A resource without an explicit provider goes through its package's default provider: those
    packages are exactly the ones that may not be disabled."""
    plan = engine.run_stack("dev")
    default = {r.type.split(":")[0] for r in plan.resources if r.custom and not r.provider}
    assert default - {"pulumi"} == set(provider_keys.DEFAULT_PROVIDERS)  # pulumi: the explicit providers


def test_every_provider_key_problem_comes_with_the_others() -> None:
    message = _verdict(
        {
            "gcp:defaultLabels": {"Team": "x"},
            "gcp:impersonateServiceAccount": "alice@example.com",
            "region": "europe-west4",
        }
    )
    assert message is not None
    assert all(key in message for key in ("gcp:defaultLabels", "gcp:impersonateServiceAccount", "tpu-slicing:region"))
