"""Credentials in ordinary settings are found wherever they are pasted, however encoded, and never echoed.

Every sample is put together at run time, so no credential-shaped literal is committed. The shapes come
from detect-secrets (pinned: requirements.txt), the project's own rules and the structural ones of
settings/credentials.py; tests/test_credential_refusals.py runs every refused class with one.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from plan import engine
from settings import credentials, loader, oci_registry, rules_versions
from settings.loader import ConfigError
from tests.conftest import config_with

TOKEN = "hf_" + "a1B2" * 9
BASE64_40 = next(shape.kind for shape in credentials.SHAPES if shape.name == "base64-40")
OPAQUE = "Zq81Mxnv0a9sKd7T"  # a secret of no known vendor's shape


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _jwt() -> str:
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = _b64url(json.dumps({"sub": "1234567890"}).encode())
    return f"{header}.{payload}.{_b64url(b'signature-bytes-0123456789')}"


# One sample per detect-secrets plugin the project runs (a newer pin with a new plugin fails
# test_every_detect_secrets_plugin_has_a_sample until one is added here).
PLUGIN_SAMPLES: dict[str, str] = {
    "ArtifactoryDetector": "AKC" + "a1b2c3d4e5f6g7h8",
    "AWSKeyDetector": "AKIA" + "IOSFODNN7EXAMPL3",
    "AzureStorageKeyDetector": "AccountKey=" + ("aB3+" * 22),
    "BasicAuthDetector": f"https://user:{OPAQUE}@example.com/repo",
    "CloudantDetector": "cloudant_password='" + "0123456789abcdef" * 4 + "'",
    "DiscordBotTokenDetector": "M" + "a" * 23 + "." + "b" * 6 + "." + "c" * 27,
    "GitHubTokenDetector": "ghp_" + "A1b2C3d4E5" * 3 + "F6g7H8",
    "GitLabTokenDetector": "glpat-" + "xxxxXXXX1111yyyyZZZZ",
    "IbmCloudIamDetector": "ibm_cloud_iam_api_key=" + "a1B2c3D4e5" * 4 + "f6G7",
    "IbmCosHmacDetector": "cos_hmac_secret_access_key=" + "0123456789abcdef" * 3,
    "JwtTokenDetector": _jwt(),
    "KeywordDetector": 'db_pass = "' + OPAQUE + '"',
    "MailchimpDetector": "0123456789abcdefghijklmnopqrstuv" + "-us12",
    "NpmDetector": "//registry.npmjs.org/:_authToken=npm_" + "a1B2c3D4e5" * 3 + "f6G7h8",
    "OpenAIDetector": "sk-" + "abcdefghij" * 2 + "T3BlbkFJ" + "klmnopqrst" * 2,
    "PrivateKeyDetector": "-----BEGIN OPENSSH PRIVATE KEY-----",
    "PypiTokenDetector": "pypi-AgEIcHlwaS5vcmc" + "a1B2c3D4e5" * 7,
    "SendGridDetector": "SG." + "a" * 22 + "." + "b" * 43,
    "SlackDetector": "xoxb-" + "123456789012-1234567890123-" + "abcdefghij" * 2,
    "SoftlayerDetector": "softlayer_api_key=" + "0123456789abcdef" * 4,
    "SquareOAuthDetector": "sq0csp-" + "a1B2c3D4e5" * 4 + "f6G",
    "StripeDetector": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "TelegramBotTokenDetector": "123456789:" + "a1B2c3D4e5" * 3 + "f6G7h",
    "TwilioKeyDetector": "SK" + "0123456789abcdef" * 2,
}

# One sample per rule of the project's own (settings/credentials.py RULES).
RULE_SAMPLES: dict[str, str] = {
    "a Hugging Face token": TOKEN,
    "a Google OAuth access token": "ya29." + "a1B2c3D4e5" * 3,
    "a Google API key": "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "a private key": "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----\n",
    "a service-account key": json.dumps({"type": "service_account", "project_id": "p"}),
    "a kubeconfig credential": f"apiVersion: v1\nusers:\n- name: u\n  user:\n    token: {OPAQUE}\n",
    "a GitHub fine-grained token": "github_pat_" + "11ABCDEFG0123456789_" + "a1B2c3D4e5" * 6 + "f6",
    "an Anthropic API key": "sk-ant-api03-" + "Zq9x" * 23 + "AA",
}

# A credential of no listed vendor, found by where it sits (settings/credentials.py `_structural`).
STRUCTURAL_SAMPLES: dict[str, str] = {
    "userinfo with a password": f"https://deploy:{OPAQUE}@git.example.com/org/repo.git",
    "userinfo without a password": f"https://{OPAQUE}@git.example.com/org/repo.git",
    "userinfo of an oci reference": f"oci://robot:{OPAQUE}@registry.example.com/charts",
    "access_token in a query": f"https://example.com/weights?access_token={OPAQUE}",
    "key in a query": f"https://example.com/v1/models?alt=json&key={OPAQUE}",
    "a signed URL's signature": f"https://storage.googleapis.com/b/o?X-Goog-Date=20260101&X-Goog-Signature={OPAQUE}",
    "an SAS sig": f"https://acct.blob.core.windows.net/c/b?sv=2022&sig={OPAQUE}",
    "password=": f"password={OPAQUE}",
    "a flag": f"--hf-token={OPAQUE}",
    "camelCase key: value": f"apiToken: {OPAQUE}",
    "clientSecret": f'clientSecret="{OPAQUE}"',
    "Bearer": f"Authorization: Bearer {OPAQUE}{OPAQUE}",
    "Basic": "Basic " + base64.b64encode(f"user:{OPAQUE}".encode()).decode(),
}

SAMPLES: dict[str, str] = {
    **{f"detect-secrets {k}": v for k, v in PLUGIN_SAMPLES.items()},
    **{f"rule: {k}": v for k, v in RULE_SAMPLES.items()},
    **{f"where it sits: {k}": v for k, v in STRUCTURAL_SAMPLES.items()},
}


def encodings(value: str) -> dict[str, str]:
    """`value` as a user might paste it: bare, base64 (whole or inside a path), percent-encoded, both."""
    return {
        "as written": value,
        "base64": base64.b64encode(value.encode()).decode(),
        # MIME's line length (RFC 2045 §6.8); a line of exactly 40 is a base64 secret of its own.
        "base64 wrapped at 76": "\n".join(
            base64.b64encode(value.encode()).decode()[i : i + 76] for i in range(0, 4 * len(value), 76)
        ).strip(),
        "URL-safe base64 inside a path": "models/" + _b64url(value.encode()),
        "percent-encoded": quote(value, safe=""),
        "base64 of percent-encoded": base64.b64encode(quote(value, safe="").encode()).decode(),
    }


def leaks(message: str) -> list[str]:
    """What in `message` holds a credential: a line or word any rule finds, or URL userinfo."""
    found = [line for line in message.splitlines() if credentials.find(line)]
    found += [word for word in message.split() if credentials.find(word)]
    return found


# --- Every rule finds its shape, however it is encoded ------------------------------------------------


def test_every_detect_secrets_plugin_has_a_sample() -> None:
    names = {type(plugin).__name__ for plugin in credentials.plugins()}
    assert names == set(PLUGIN_SAMPLES)
    # What is left out is named as the pinned release names it, or the exclusion would silently lapse.
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    registry: dict[str, type] = get_mapping_from_secret_type_to_class()
    shipped = {cls.__name__ for cls in registry.values()}
    assert set(credentials.NOT_SHAPES) <= shipped
    assert names == shipped - set(credentials.NOT_SHAPES)


@pytest.mark.parametrize("name", sorted(PLUGIN_SAMPLES))
def test_each_detect_secrets_plugin_finds_its_sample(name: str) -> None:
    [plugin] = [p for p in credentials.plugins() if type(p).__name__ == name]
    assert list(plugin.analyze_string(PLUGIN_SAMPLES[name])), name
    assert credentials.find(PLUGIN_SAMPLES[name]) is not None


def test_each_sample_of_the_project_s_shapes_is_found_as_its_kind() -> None:
    """(Every shape has a format of its own in tests/test_credential_formats.py.)"""
    assert set(RULE_SAMPLES) <= {shape.kind for shape in credentials.SHAPES}
    for kind, sample in RULE_SAMPLES.items():
        found = credentials.find(sample)
        assert found is not None and found.kind == kind, (kind, found)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_a_credential_is_found_however_it_is_encoded(name: str) -> None:
    for how, value in encodings(SAMPLES[name]).items():
        found = credentials.find(value)
        assert found is not None, f"{name}, {how}"
        if how == "as written":
            assert found.encodings == ()
        elif "base64" in how and found.kind != BASE64_40:  # (a base64 run of exactly 40 is a secret's shape)
            # (percent-encoding may leave a shape as it was: it is found as written)
            assert found.encodings[0] == "base64-encoded", (how, found)
            assert found.phrase.startswith(f"{found.kind}, base64-encoded"), found.phrase


# --- Refused where it is pasted, named by key and kind, never shown -------------------------------------


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_a_credential_is_refused_by_key_and_kind_and_never_echoed(name: str) -> None:
    value = SAMPLES[name]
    for how, pasted in encodings(value).items():
        with pytest.raises(ConfigError) as caught:
            config_with({"serving": {"model": {"path": pasted}}})
        message = str(caught.value)
        [problem] = [p for p in caught.value.problems if "serving.model.path" in p]
        assert problem.startswith("tpu-slicing:serving.model.path: holds "), problem
        assert "in plain text" in problem and credentials.ALLOWED in problem, problem
        assert pasted not in message and value not in message and OPAQUE not in message, (how, message)
        assert leaks(message) == [], (how, message)


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"serving": {"model": {"name": f"org/{TOKEN}"}}}, "tpu-slicing:serving.model.name"),
        ({"serving": {"gateway": {"name": TOKEN}}}, "tpu-slicing:serving.gateway.name"),
        ({"namePrefix": TOKEN}, "tpu-slicing:namePrefix"),
        ({"observability": {"alerts": {"notificationChannels": [TOKEN]}}}, "notificationChannels[0]"),
        ({"controllers": {"chartRegistry": f"oci://robot:{OPAQUE}@us-docker.pkg.dev/p/k8s-mirror"}}, "chartRegistry"),
        (
            {"controllers": {"chartRegistry": f"oci://us-docker.pkg.dev/p/k8s-mirror?access_token={OPAQUE}"}},
            "chartRegistry",
        ),
        ({"gcp:region": f"us-central1?key={OPAQUE}"}, "gcp:region"),
        ({"pulumi:tags": {"owner": f"https://me:{OPAQUE}@example.com"}}, "pulumi:tags.owner"),
    ],
)
def test_a_token_is_refused_where_it_is_pasted_and_not_echoed(overrides: dict[str, Any], key: str) -> None:
    """Every non-secret key is read, of any namespace, and the refusal comes alone: no other rule runs
    to show the value."""
    with pytest.raises(ConfigError) as caught:
        config_with(overrides)
    message = str(caught.value)
    assert key in message and "in plain text" in message, message
    assert TOKEN not in message and OPAQUE not in message
    assert all("in plain text" in p for p in caught.value.problems), message


def test_a_credential_as_a_key_is_refused_without_naming_it() -> None:
    with pytest.raises(ConfigError) as caught:
        config_with({"serving": {"model": {TOKEN: "x"}}})
    assert "tpu-slicing:serving.model: a key of it holds a Hugging Face token" in str(caught.value)
    assert TOKEN not in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        config_with({TOKEN: "x"})
    assert "a config key of namespace tpu-slicing holds a Hugging Face token" in str(caught.value)
    assert TOKEN not in str(caught.value)


def test_a_secret_key_is_not_read_as_plain() -> None:
    raw = {"tpu-slicing:hfToken": TOKEN, "tpu-slicing:zone": "us-central1-c"}
    assert credentials.plain_credentials(raw, ["tpu-slicing:hfToken"]) == []
    assert credentials.plain_credentials(raw, []) != []


# --- What is no credential -----------------------------------------------------------------------------

ORDINARY = [
    "Qwen/Qwen3.5-397B-A17B-FP8",
    "gs://example-model-weights/models/llama-3-70b",
    "oci://registry.k8s.io",
    "us-docker.pkg.dev/p/r/vllm@sha256:" + "ab" * 32,
    "serviceAccount:serving@example-tpu-project.iam.gserviceaccount.com",
    "secretName: hf-token",
    "key: google.com/tpu",
    "HF_TOKEN=$(cat /var/run/secrets/hf/token)",
    "password: ${PASSWORD}",
    "token = os.environ['HF_TOKEN']",
    "--max-num-batched-tokens=8192",
    "https://example.com/charts?tag=1.2.3&alt=json",
    "ssh-keys: none",
    base64.b64encode(b"placeholder-cluster-ca").decode(),
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_values_are_no_credential(text: str) -> None:
    assert credentials.find(text) is None


@given(st.from_regex(r"[a-z0-9./-]{0,80}", fullmatch=True))
def test_model_names_and_paths_are_no_credential(text: str) -> None:
    # The alphabet of model names, bucket paths and DNS names: no pattern may fire on it, but for
    # Mailchimp's key (32 letters and digits, then `-us` and its datacenter number), which is in it.
    assume(not next(iter(PLUGIN_MAILCHIMP.analyze_string(text)), None))
    assert credentials.find(text) is None


PLUGIN_MAILCHIMP = next(p for p in credentials.plugins() if type(p).__name__ == "MailchimpDetector")

_SECRET_NAMES = ["token", "access_token", "apiKey", "API_KEY", "password", "db_passwd", "client-secret", "hfToken"]
_QUERY_NAMES = [*_SECRET_NAMES, "key", "sig", "X-Amz-Signature", "X-Goog-Signature", "X-Amz-Security-Token"]
_VALUES = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-", min_size=8, max_size=40).filter(
    lambda v: len(set(v.lower())) > 2
)


@given(st.sampled_from(_QUERY_NAMES), _VALUES, st.sampled_from(["?", "&"]))
def test_a_secret_named_query_parameter_of_any_shape_is_found(name: str, value: str, how: str) -> None:
    separator = "?" if how == "?" else "?alt=json&"
    assert credentials.find(f"https://example.com/x{separator}{name}={value}") is not None


@given(st.sampled_from(_SECRET_NAMES), _VALUES, st.sampled_from(["?", "&", "=", ": ", " = ", "--"]))
def test_a_secret_named_value_of_any_shape_is_found(name: str, value: str, how: str) -> None:
    text = {
        "?": f"https://example.com/x?{name}={value}",
        "&": f"https://example.com/x?a=1&{name}={value}",
        "=": f"{name}={value}",
        ": ": f"{name}: {value}",
        " = ": f'{name} = "{value}"',
        "--": f"--{name}={value}",
    }[how]
    assert credentials.find(text) is not None, text


@given(_VALUES, _VALUES, st.sampled_from(["https", "http", "oci", "git+ssh", "s3"]))
def test_any_url_userinfo_is_found(user: str, password: str, scheme: str) -> None:
    assert credentials.find(f"{scheme}://{user}:{password}@example.com/x") is not None
    assert credentials.find(f"{scheme}://{user}@example.com/x") is not None


def test_the_committed_stacks_hold_no_credential() -> None:
    for stack in ("dev", "dev-b", "saxml-v5e", "jetstream-v5e"):
        raw, secrets = engine.read_stack_config(engine.stack_file(stack))
        assert credentials.plain_credentials(raw, secrets) == []


# --- A value a message must show is shown masked ---------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (f"oci://robot:{OPAQUE}@us-docker.pkg.dev/p/k8s-mirror", "oci://***@us-docker.pkg.dev/p/k8s-mirror"),
        (f"oci:/robot:{OPAQUE}@registry.example.com/x", "oci:/***@registry.example.com/x"),
        (f"robot:{OPAQUE}@registry.example.com/x", "***@registry.example.com/x"),
        (f"oci://us-docker.pkg.dev/p/k8s-mirror?ref={OPAQUE}", "oci://us-docker.pkg.dev/p/k8s-mirror?***"),
        (f"oci://us-docker.pkg.dev/p/k8s-mirror#{OPAQUE}", "oci://us-docker.pkg.dev/p/k8s-mirror#***"),
        ("oci://us-docker.pkg.dev/p/kueue@sha256:00", "oci://us-docker.pkg.dev/p/kueue@sha256:00"),
        ("oci://localhost:5000/charts", "oci://localhost:5000/charts"),
    ],
)
def test_the_chart_registry_refusal_masks_what_could_be_a_credential(value: str, shown: str) -> None:
    """The message that printed a token riding in the reference's query (or in userinfo written without
    `//`): the registry rule shows the reference masked, whatever the credential detector knew."""
    assert oci_registry.shown(value) == shown
    if oci_registry.problem(value) is None:
        return
    with pytest.raises(ValueError, match="allowed: oci://") as caught:
        rules_versions.chart_registry(value)
    assert OPAQUE not in str(caught.value)


def test_the_loader_shows_a_refused_value_masked() -> None:
    assert loader._shown(f"https://me:{OPAQUE}@example.com/x?sig={OPAQUE}") == "'https://***@example.com/x?***'"
    assert loader._shown(f"zone-{TOKEN}") == "'***'"
    assert loader._shown("us-central1-x") == "'us-central1-x'"
    assert loader._shown(3) == "3"
