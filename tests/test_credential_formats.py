"""Published credential formats, pasted into every kind of setting: refused before anything runs, never echoed.

`FORMATS` holds one FAKE credential per published format, put together at run time from a seeded random
generator, so no credential-shaped literal is committed and none is real. Each looks like its vendor's
format: prefix, alphabet and length, and the checksum where the format has one (GitHub's and npm's
CRC32 in base62, Atlassian's CRC32 in hex), computed here although no rule verifies it (a shape is
enough to refuse). Each names what finds it: a detect-secrets 1.5.0 plugin (pinned) or one of the
project's own shapes (settings/credentials.py `SHAPES`, each citing its vendor's format page).

Each is pasted into each kind of setting a stack file has (`PLACEMENTS`: a plain string, a list item, a
mapping value, a value beside a `secure:` sibling or an ESC secret, and the paths and arguments the
servers are started with), and must be refused naming the key, with no five characters of its random
part in the message. The settings have no environment-variable field: the mapping values
(`pulumi:tags`, `reservation.accept`) are the nearest, and are what a pod label or annotation carries.
"""

from __future__ import annotations

import base64
import json
import random
import string
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from settings import credentials, esc_environment, loader
from settings.loader import ConfigError
from tests.conftest import DevRunner, config_with
from tests.test_verdicts import settings_verdict, write_variant

ALPHA = string.ascii_letters
ALNUM = ALPHA + string.digits
LOWER_ALNUM = string.ascii_lowercase + string.digits
UPPER_ALNUM = string.ascii_uppercase + string.digits
HEX = "0123456789abcdef"
URLSAFE = ALNUM + "-_"
BASE64 = ALNUM + "+/"
BASE62 = string.digits + string.ascii_uppercase + string.ascii_lowercase  # GitHub's checksum alphabet
BECH32 = "qpzry9x8gf2tvdw0s3jn54khce6mua7l".upper()

# A piece of a fake: (text, secret). The literal parts are what the vendor publishes (a prefix, a
# separator); the secret parts are what no message may show five characters of.
Piece = tuple[str, bool]


@dataclass(frozen=True)
class Format:
    name: str
    source: str  # "detect-secrets <Plugin>" or "shape <name>" (settings/credentials.py SHAPES)
    pieces: tuple[Piece, ...]

    @property
    def token(self) -> str:
        return "".join(text for text, _ in self.pieces)

    def secret_windows(self) -> set[str]:
        """Every five characters of the credential that hold one of its secret characters."""
        text, mask = "", []
        for piece, secret in self.pieces:
            text += piece
            mask += [secret] * len(piece)
        width = credentials.ECHO_WINDOW
        return {text[i : i + width] for i in range(len(text) - width + 1) if any(mask[i : i + width])}


class Fakes:
    """Seeded random parts, so every run builds the same fakes."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def chars(self, alphabet: str, count: int) -> str:
        return "".join(self.rng.choice(alphabet) for _ in range(count))

    def mixed(self, alphabet: str, count: int) -> str:
        """`count` characters of `alphabet` holding an uppercase letter, a lowercase one and a digit (when
        the alphabet has them), as nearly every random token of that length does."""
        while True:
            text = self.chars(alphabet, count)
            classes = [any(c.isupper() for c in text), any(c.islower() for c in text), any(c.isdigit() for c in text)]
            wanted = [any(c.isupper() for c in alphabet), any(c.islower() for c in alphabet)]
            wanted.append(any(c.isdigit() for c in alphabet))
            if all(have or not want for have, want in zip(classes, wanted, strict=True)):
                return text

    def b64(self, count: int, alphabet: str = BASE64) -> str:
        return self.mixed(alphabet, count)

    def b64url_bytes(self, count: int) -> str:
        return base64.urlsafe_b64encode(self.rng.randbytes(count)).decode().rstrip("=")


def _base62(number: int, width: int) -> str:
    digits = ""
    while number:
        number, rest = divmod(number, 62)
        digits = BASE62[rest] + digits
    return digits.rjust(width, "0")


def github_style(prefix: str, fakes: Fakes, body: int = 30) -> tuple[Piece, ...]:
    """GitHub's (and npm's) format: 30 random base62 characters and their CRC32 in 6 base62 characters
    (github.blog/engineering/behind-githubs-new-authentication-token-formats)."""
    random_part = fakes.mixed(ALNUM, body)
    checksum = _base62(zlib.crc32(random_part.encode()), 6)
    return ((prefix, False), (random_part + checksum, True))


def _jwt(fakes: Fakes, payload: dict[str, Any]) -> tuple[str, str, str]:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()).decode().rstrip("=")

    return part({"alg": "RS256", "typ": "JWT"}), part(payload), fakes.b64url_bytes(64)


def _pem(label: str, fakes: Fakes, size: int = 600) -> tuple[Piece, ...]:
    body = base64.b64encode(fakes.rng.randbytes(size)).decode()
    wrapped = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
    return ((f"-----BEGIN {label}-----\n", False), (wrapped, True), (f"\n-----END {label}-----\n", False))


def _formats() -> list[Format]:
    f = Fakes(20260722)
    out: list[Format] = []

    def add(name: str, source: str, *pieces: Piece) -> None:
        out.append(Format(name, source, tuple(pieces)))

    def lit(text: str) -> Piece:
        return (text, False)

    def sec(text: str) -> Piece:
        return (text, True)

    # --- GitHub (docs.github.com ... "GitHub's token formats"): detect-secrets GitHubTokenDetector
    for prefix, what in (("ghp_", "classic PAT"), ("gho_", "OAuth"), ("ghu_", "user-to-server"), ("ghs_", "app")):
        add(f"GitHub {what} ({prefix})", "detect-secrets GitHubTokenDetector", *github_style(prefix, f))
    add("GitHub refresh token (ghr_)", "detect-secrets GitHubTokenDetector", *github_style("ghr_", f, body=70))
    add(
        "GitHub fine-grained PAT (github_pat_)",
        "shape github-fine-grained",
        lit("github_pat_"),
        sec(f.mixed(UPPER_ALNUM, 22) + "_" + f.mixed(ALNUM, 59)),
    )
    # --- GitLab (docs.gitlab.com/ee/security/token_overview.html#token-prefixes)
    add("GitLab PAT (glpat-)", "detect-secrets GitLabTokenDetector", lit("glpat-"), sec(f.mixed(URLSAFE, 20)))
    add(
        "GitLab routable PAT (glpat-...)",
        "shape gitlab-routable",
        lit("glpat-"),
        sec(f.mixed(URLSAFE, 38) + ".01" + f.chars(LOWER_ALNUM, 7)),
    )
    add("GitLab deploy token (gldt-)", "detect-secrets GitLabTokenDetector", lit("gldt-"), sec(f.mixed(URLSAFE, 20)))
    add("GitLab runner token (glrt-)", "detect-secrets GitLabTokenDetector", lit("glrt-"), sec(f.mixed(URLSAFE, 20)))
    add("GitLab trigger token (glptt-)", "detect-secrets GitLabTokenDetector", lit("glptt-"), sec(f.chars(HEX, 40)))
    add(
        "GitLab runner registration (GR1348941)",
        "detect-secrets GitLabTokenDetector",
        lit("GR1348941"),
        sec(f.mixed(URLSAFE, 20)),
    )
    # --- Slack (api.slack.com/authentication/token-types)
    add(
        "Slack bot token (xoxb-)",
        "detect-secrets SlackDetector",
        lit("xoxb-"),
        sec(f.chars(string.digits, 12) + "-" + f.chars(string.digits, 13) + "-" + f.mixed(ALNUM, 24)),
    )
    add(
        "Slack user token (xoxp-)",
        "detect-secrets SlackDetector",
        lit("xoxp-"),
        sec("-".join(f.chars(string.digits, n) for n in (12, 12, 13)) + "-" + f.chars(HEX, 32)),
    )
    add(
        "Slack webhook URL",
        "detect-secrets SlackDetector",
        lit("https://hooks.slack.com/services/T"),
        sec(f.chars(UPPER_ALNUM, 8) + "/B" + f.chars(UPPER_ALNUM, 10) + "/" + f.mixed(ALNUM, 24)),
    )
    add(
        "Slack app-level token (xapp-)",
        "shape slack-app",
        lit("xapp-1-"),
        sec("A" + f.chars(UPPER_ALNUM, 10) + "-" + f.chars(string.digits, 13) + "-" + f.chars(HEX, 64)),
    )
    # --- Stripe (docs.stripe.com/keys, docs.stripe.com/webhooks)
    add("Stripe live secret key (sk_live_)", "detect-secrets StripeDetector", lit("sk_live_"), sec(f.mixed(ALNUM, 99)))
    add("Stripe restricted key (rk_live_)", "detect-secrets StripeDetector", lit("rk_live_"), sec(f.mixed(ALNUM, 99)))
    add("Stripe test secret key (sk_test_)", "shape stripe", lit("sk_test_"), sec(f.mixed(ALNUM, 99)))
    add("Stripe webhook secret (whsec_)", "shape stripe-webhook", lit("whsec_"), sec(f.mixed(ALNUM, 32)))
    # --- Google (cloud.google.com/docs/authentication/api-keys, developers.google.com/identity/protocols/oauth2)
    add("Google API key (AIza)", "shape google-api-key", lit("AIza"), sec("Sy" + f.mixed(URLSAFE, 33)))
    add("Google OAuth access token (ya29.)", "shape google-access-token", lit("ya29."), sec(f.mixed(URLSAFE, 150)))
    add(
        "Google OAuth refresh token (1//0)",
        "shape google-refresh-token",
        lit("1//0"),
        sec(f.mixed(URLSAFE, 99)),
    )
    add("Google OAuth client secret (GOCSPX-)", "shape google-client-secret", lit("GOCSPX-"), sec(f.mixed(URLSAFE, 28)))
    add(
        "Cloud Storage HMAC access ID (GOOG1)",
        "shape gcs-hmac-access-id",
        lit("GOOG"),
        sec("1" + f.mixed(UPPER_ALNUM, 56)),
    )
    add("Cloud Storage HMAC secret (40 base64)", "shape base64-40", sec(f.b64(40)))
    private_key_id = f.chars(HEX, 40)
    pem = _pem("PRIVATE KEY", f, 900)
    add(
        "Google service-account key (JSON)",
        "shape service-account-key",
        # The key's ID is no secret (`gcloud iam service-accounts keys list` shows it): its private key is.
        lit(f'{{"type": "service_account", "project_id": "example-tpu-project", "private_key_id": "{private_key_id}'),
        lit('", "private_key": "'),
        *((text.replace("\n", "\\n"), secret) for text, secret in pem),
        lit('", "client_email": "x@example-tpu-project.iam.gserviceaccount.com"}'),
    )
    # --- AWS (docs.aws.amazon.com/IAM/latest/UserGuide/id_credentials_access-keys.html)
    base32 = string.ascii_uppercase + "234567"
    add("AWS access key ID (AKIA)", "detect-secrets AWSKeyDetector", lit("AKIA"), sec(f.mixed(base32, 16)))
    add("AWS temporary access key ID (ASIA)", "detect-secrets AWSKeyDetector", lit("ASIA"), sec(f.mixed(base32, 16)))
    add("AWS secret access key (40 base64)", "shape base64-40", sec(f.b64(40)))
    # --- AI vendors
    add(
        "OpenAI legacy key (sk-...T3BlbkFJ)",
        "detect-secrets OpenAIDetector",
        lit("sk-"),
        sec(f.mixed(ALNUM, 20) + "T3BlbkFJ" + f.mixed(ALNUM, 20)),
    )
    for kind in ("proj", "svcacct", "admin"):
        add(
            f"OpenAI {kind} key (sk-{kind}-)",
            "shape openai-scoped",
            lit(f"sk-{kind}-"),
            sec(f.mixed(URLSAFE, 74) + "T3BlbkFJ" + f.mixed(URLSAFE, 74)),
        )
    add("Anthropic API key (sk-ant-api03-)", "shape anthropic", lit("sk-ant-api03-"), sec(f.mixed(URLSAFE, 93) + "AA"))
    add(
        "Anthropic Admin API key (sk-ant-admin01-)",
        "shape anthropic",
        lit("sk-ant-admin01-"),
        sec(f.mixed(URLSAFE, 93) + "AA"),
    )
    add("Hugging Face user token (hf_)", "shape huggingface", lit("hf_"), sec(f.mixed(ALPHA, 34)))
    add(
        "Hugging Face org token (api_org_)",
        "shape huggingface",
        lit("api_org_"),
        sec(f.mixed(string.ascii_letters, 34)),
    )
    add("Replicate API token (r8_)", "shape replicate", lit("r8_"), sec(f.mixed(ALNUM, 37)))
    add("Groq API key (gsk_)", "shape groq", lit("gsk_"), sec(f.mixed(ALNUM, 52)))
    add("Perplexity API key (pplx-)", "shape perplexity", lit("pplx-"), sec(f.mixed(ALNUM, 48)))
    add("xAI API key (xai-)", "shape xai", lit("xai-"), sec(f.mixed(ALNUM, 80)))
    add("OpenRouter API key (sk-or-v1-)", "shape openrouter", lit("sk-or-v1-"), sec(f.chars(HEX, 64)))
    add("Databricks token (dapi)", "shape databricks", lit("dapi"), sec(f.chars(HEX, 32)), lit("-2"))
    # --- Package registries
    add("npm access token (npm_)", "shape npm", *github_style("npm_", f))
    npm = github_style("npm_", f)
    add(
        "npm token in .npmrc (_authToken=)",
        "detect-secrets NpmDetector",
        lit("//registry.npmjs.org/:_authToken="),
        *npm,
    )
    add(
        "PyPI upload token (pypi-AgEIcHlwaS5vcmc)",
        "detect-secrets PypiTokenDetector",
        lit("pypi-AgEIcHlwaS5vcmc"),
        sec(f.b64url_bytes(90)),
    )
    add("RubyGems API key (rubygems_)", "shape rubygems", lit("rubygems_"), sec(f.chars(HEX, 48)))
    add("Docker Hub PAT (dckr_pat_)", "shape docker-hub", lit("dckr_pat_"), sec(f.mixed(URLSAFE, 27)))
    add("Artifactory API key (AKC)", "detect-secrets ArtifactoryDetector", lit("AKCp8"), sec(f.mixed(ALNUM, 68)))
    # --- Infrastructure and deployment
    add("Pulumi access token (pul-)", "shape pulumi", lit("pul-"), sec(f.chars(HEX, 40)))
    add("HashiCorp Vault service token (hvs.)", "shape vault", lit("hvs."), sec("CAESI" + f.mixed(URLSAFE, 90)))
    add("HashiCorp Vault batch token (hvb.)", "shape vault", lit("hvb."), sec("AAAAAQ" + f.mixed(URLSAFE, 140)))
    add(
        "Terraform Cloud token (.atlasv1.)",
        "shape terraform-cloud",
        sec(f.mixed(ALNUM, 14)),
        lit(".atlasv1."),
        sec(f.mixed(URLSAFE, 67)),
    )
    add("Doppler personal token (dp.pt.)", "shape doppler", lit("dp.pt."), sec(f.mixed(ALNUM, 43)))
    add("Doppler service token (dp.st.)", "shape doppler", lit("dp.st.dev."), sec(f.mixed(ALNUM, 43)))
    add("DigitalOcean PAT (dop_v1_)", "shape digitalocean", lit("dop_v1_"), sec(f.chars(HEX, 64)))
    add("DigitalOcean OAuth token (doo_v1_)", "shape digitalocean", lit("doo_v1_"), sec(f.chars(HEX, 64)))
    add("Heroku API key (HRKU-)", "shape heroku", lit("HRKU-"), sec("AA" + f.mixed(URLSAFE, 58)))
    add(
        "Tailscale auth key (tskey-auth-)",
        "shape tailscale",
        lit("tskey-auth-"),
        sec("k" + f.mixed(ALNUM, 11) + "CNTRL-" + f.mixed(ALNUM, 33)),
    )
    add("PlanetScale token (pscale_tkn_)", "shape planetscale", lit("pscale_tkn_"), sec(f.mixed(URLSAFE, 43)))
    add("Supabase access token (sbp_)", "shape supabase", lit("sbp_"), sec(f.chars(HEX, 40)))
    add(
        "1Password service-account token (ops_)",
        "shape 1password",
        lit("ops_"),
        sec(_jwt(f, {"signInAddress": "my.1password.com", "userAuth": {"secret": f.mixed(ALNUM, 300)}})[1]),
    )
    # --- SaaS APIs
    add(
        "Atlassian API token (ATATT)",
        "shape atlassian",
        lit("ATATT"),
        sec((body := "3xFfGF0" + f.mixed(URLSAFE, 170)) + "=" + f"{zlib.crc32(body.encode()):08X}"),
    )
    add("Shopify access token (shpat_)", "shape shopify", lit("shpat_"), sec(f.chars(HEX, 32)))
    add("Shopify shared secret (shpss_)", "shape shopify", lit("shpss_"), sec(f.chars(HEX, 32)))
    add("Square access token (EAAA)", "shape square", lit("EAAA"), sec(f.mixed(URLSAFE, 60)))
    add("Square legacy access token (sq0atp-)", "shape square-legacy", lit("sq0atp-"), sec(f.mixed(URLSAFE, 22)))
    add(
        "Square OAuth secret (sq0csp-)", "detect-secrets SquareOAuthDetector", lit("sq0csp-"), sec(f.mixed(URLSAFE, 43))
    )
    add("Mailgun API key (key-)", "shape mailgun-legacy", lit("key-"), sec(f.chars(HEX, 32)))
    add(
        "Mailgun private API key (32-8-8)",
        "shape mailgun",
        sec(f.chars(HEX, 32) + "-" + f.chars(HEX, 8) + "-" + f.chars(HEX, 8)),
    )
    add("Mailchimp API key (-us)", "detect-secrets MailchimpDetector", sec(f.chars(HEX, 32)), lit("-us12"))
    add(
        "SendGrid API key (SG.)",
        "detect-secrets SendGridDetector",
        lit("SG."),
        sec(f.mixed(URLSAFE, 22) + "." + f.mixed(URLSAFE, 43)),
    )
    add("Twilio API key SID (SK)", "detect-secrets TwilioKeyDetector", lit("SK"), sec(f.chars(HEX, 32)))
    add("Linear API key (lin_api_)", "shape linear", lit("lin_api_"), sec(f.mixed(ALNUM, 40)))
    add("Notion integration secret (secret_)", "shape notion", lit("secret_"), sec(f.mixed(ALNUM, 43)))
    add(
        "Notion integration token (ntn_)",
        "shape notion",
        lit("ntn_"),
        sec(f.chars(string.digits, 11) + f.mixed(ALNUM, 35)),
    )
    add("Postman API key (PMAK-)", "shape postman", lit("PMAK-"), sec(f.chars(HEX, 24) + "-" + f.chars(HEX, 34)))
    add(
        "Grafana service-account token (glsa_)",
        "shape grafana",
        lit("glsa_"),
        sec(f.mixed(ALNUM, 32) + "_" + f.chars(HEX, 8)),
    )
    add(
        "Dynatrace token (dt0c01.)",
        "shape dynatrace",
        lit("dt0c01."),
        sec(f.mixed(UPPER_ALNUM, 24) + "." + f.mixed(UPPER_ALNUM, 64)),
    )
    add("Sentry user token (sntryu_)", "shape sentry", lit("sntryu_"), sec(f.chars(HEX, 64)))
    add("New Relic user key (NRAK-)", "shape newrelic", lit("NRAK-"), sec(f.mixed(UPPER_ALNUM, 27)))
    add(
        "Airtable personal access token (pat)",
        "shape airtable",
        lit("pat"),
        sec(f.mixed(ALNUM, 14) + "." + f.chars(HEX, 64)),
    )
    add(
        "Mapbox secret token (sk.eyJ)",
        "shape mapbox",
        lit("sk."),
        sec(_jwt(f, {"u": "example", "a": f.mixed(LOWER_ALNUM, 25)})[1] + "." + f.mixed(URLSAFE, 22)),
    )
    add(
        "Discord bot token",
        "detect-secrets DiscordBotTokenDetector",
        sec("MT" + f.mixed(ALNUM, 24) + "." + f.mixed(URLSAFE, 6) + "." + f.mixed(URLSAFE, 38)),
    )
    add(
        "Telegram bot token",
        "detect-secrets TelegramBotTokenDetector",
        sec(f.chars(string.digits, 10) + ":AA" + f.mixed(URLSAFE, 33)),
    )
    # --- Microsoft Azure (learn.microsoft.com/azure/storage/common/storage-account-keys-manage)
    azure_key = base64.b64encode(f.rng.randbytes(64)).decode()
    add("Azure storage account key (88 base64)", "shape azure-storage-key", sec(azure_key))
    add(
        "Azure storage connection string (AccountKey=)",
        "detect-secrets AzureStorageKeyDetector",
        lit("DefaultEndpointsProtocol=https;AccountName=examplestore;AccountKey="),
        sec(base64.b64encode(f.rng.randbytes(64)).decode()),
        lit(";EndpointSuffix=core.windows.net"),
    )
    # --- Tokens and keys of standard formats
    header, payload, signature = _jwt(f, {"sub": f.chars(string.digits, 21), "aud": "https://example.com"})
    add("JWT (eyJ...)", "detect-secrets JwtTokenDetector", sec(f"{header}.{payload}.{signature}"))
    header, payload, signature = _jwt(f, {"iss": "kubernetes/serviceaccount", "sub": "system:serviceaccount:a:b"})
    add("Kubernetes service-account token (JWT)", "shape jwt", sec(f"{header}.{payload}.{signature}"))
    add("RSA private key (PEM)", "shape private-key", *_pem("RSA PRIVATE KEY", f))
    add("EC private key (PEM)", "shape private-key", *_pem("EC PRIVATE KEY", f, 120))
    add("OpenSSH private key (PEM)", "shape private-key", *_pem("OPENSSH PRIVATE KEY", f))
    add("PKCS #8 private key (PEM)", "shape private-key", *_pem("PRIVATE KEY", f))
    add("PGP private key block", "detect-secrets PrivateKeyDetector", *_pem("PGP PRIVATE KEY BLOCK", f))
    add(
        "age secret key (AGE-SECRET-KEY-1)",
        "shape age",
        lit("AGE-SECRET-KEY-1"),
        sec(f.chars(BECH32, 58)),
    )
    add(
        "kubeconfig user token",
        "shape kubeconfig",
        lit("apiVersion: v1\nkind: Config\nusers:\n- name: deployer\n  user:\n    token: "),
        sec(f.mixed(URLSAFE, 48)),
        lit("\n"),
    )
    return out


FORMATS: list[Format] = _formats()
BY_NAME = {fmt.name: fmt for fmt in FORMATS}


# --- The list itself ----------------------------------------------------------------------------------


def test_the_list_holds_at_least_57_formats_each_once() -> None:
    assert len(FORMATS) >= 57
    assert len(BY_NAME) == len(FORMATS)
    assert len({fmt.token for fmt in FORMATS}) == len(FORMATS)


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_each_format_is_found_by_the_rule_it_names(name: str) -> None:
    fmt = BY_NAME[name]
    source, _, rule = fmt.source.partition(" ")
    if source == "detect-secrets":
        [plugin] = [p for p in credentials.plugins() if type(p).__name__ == rule]
        assert list(plugin.analyze_string(fmt.token)), f"{rule} misses {name}"
    else:
        [shape] = [s for s in credentials.SHAPES if s.name == rule]
        assert shape.found(fmt.token), f"{rule} misses {name}"
    assert credentials.find(fmt.token) is not None


def test_every_shape_of_the_project_has_a_format_and_every_format_a_known_rule() -> None:
    shapes = {s.name for s in credentials.SHAPES}
    plugins = {type(p).__name__ for p in credentials.plugins()}
    named = {fmt.source for fmt in FORMATS}
    assert {f"shape {s}" for s in shapes} <= named
    assert named <= {f"shape {s}" for s in shapes} | {f"detect-secrets {p}" for p in plugins}


def test_a_github_style_checksum_is_computed_but_not_required() -> None:
    """The fakes carry GitHub's CRC32 checksum; a token whose checksum is wrong is refused all the same
    (detection is by shape, so a mistyped or truncated token is refused too)."""
    fmt = BY_NAME["GitHub classic PAT (ghp_)"]
    body = fmt.token.removeprefix("ghp_")
    assert _base62(zlib.crc32(body[:30].encode()), 6) == body[30:]
    wrong = "ghp_" + body[:30] + ("000000" if body[30:] != "000000" else "111111")
    assert credentials.find(wrong) is not None


# --- Refused wherever it is pasted, never echoed --------------------------------------------------------


def _tags(token: str) -> dict[str, Any]:
    return {"pulumi:tags": {"team": token}}


# (where, the overrides that paste it there, what the refusal names)
PLACEMENTS: list[tuple[str, Callable[[str], dict[str, Any]], str]] = [
    ("a plain string", lambda t: {"namePrefix": t}, "tpu-slicing:namePrefix"),
    ("a nested string", lambda t: {"serving": {"gateway": {"name": t}}}, "tpu-slicing:serving.gateway.name"),
    (
        "a list item",
        lambda t: {"observability": {"alerts": {"notificationChannels": ["projects/p/notificationChannels/1", t]}}},
        "tpu-slicing:observability.alerts.notificationChannels[1]",
    ),
    ("a mapping value (pulumi:tags)", _tags, "pulumi:tags.team"),
    (
        "a mapping value (reservation.accept)",
        lambda t: {"reservation": {"accept": {"sub-block-0": t}}},
        "tpu-slicing:reservation.accept.sub-block-0",
    ),
    ("the model path (vLLM --model)", lambda t: {"serving": {"model": {"path": t}}}, "tpu-slicing:serving.model.path"),
    ("the model name", lambda t: {"serving": {"model": {"name": t}}}, "tpu-slicing:serving.model.name"),
    (
        "the tokenizer path (maxengine args)",
        lambda t: {"serving": {"jetstream": {"tokenizerPath": t}}},
        "tpu-slicing:serving.jetstream.tokenizerPath",
    ),
    (
        "the Saxml checkpoint (publish args)",
        lambda t: {"serving": {"saxml": {"checkpoint": t}}},
        "tpu-slicing:serving.saxml.checkpoint",
    ),
    ("a provider key", lambda t: {"gcp:region": t}, "gcp:region"),
]


def assert_not_echoed(message: str, fmt: Format) -> None:
    shown = sorted(w for w in fmt.secret_windows() if w in message)
    assert not shown, f"{fmt.name}: the message shows {shown[:3]}:\n{message}"


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_each_format_is_refused_in_each_kind_of_setting_and_never_echoed(name: str) -> None:
    fmt = BY_NAME[name]
    for where, overrides, key in PLACEMENTS:
        with pytest.raises(ConfigError) as caught:
            config_with(overrides(fmt.token))
        message = str(caught.value)
        # (a JSON value, a service-account key, is read as the mapping Pulumi hands the program)
        assert f"{key}: holds " in message or f"{key}." in message, (where, message)
        assert credentials.ALLOWED in message, (where, message)
        assert_not_echoed(message, fmt)


def _secure(value: str) -> dict[str, str]:
    return {"secure": base64.b64encode(value.encode()).decode()}  # a ciphertext as the stack file holds it


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_a_secure_sibling_hides_no_plain_credential(name: str, tmp_path: Path) -> None:
    """The finding of issue 64: one `secure:` value inside `tpu-slicing:serving` made the whole key secret
    and its plain `gateway.name` was planned into manifests. Each plain leaf is read; the secret is not."""
    fmt = BY_NAME[name]
    example = {"serving": {"model": {"path": _secure("models/x")}, "gateway": {"name": fmt.token}}}
    message = settings_verdict(write_variant(tmp_path, "dev", example), "dev")
    assert message is not None, f"{name} beside a secure sibling is accepted"
    assert "tpu-slicing:serving.gateway.name: holds " in message or "serving.gateway.name." in message, message
    assert "serving.model.path" not in message, message
    assert_not_echoed(message, fmt)


def _detailed(value: Any, secret: bool = False) -> dict[str, Any]:
    """`value` as `pulumi env open --format detailed` prints it; a string in a {"fn::secret": ...} is secret."""
    if isinstance(value, dict) and set(value) == {"fn::secret"}:
        return _detailed(value["fn::secret"], secret=True)
    if isinstance(value, dict):
        return {"value": {k: _detailed(v) for k, v in value.items()}, "trace": {}}
    return {"value": value, "secret": secret, "trace": {}}


def _raw(merged: esc_environment.Merged) -> dict[str, Any]:
    """The merged config as the engine hands it to the program (plan/engine.py read_stack_config)."""
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in merged.config.items()}


@pytest.mark.parametrize("name", ["GitHub classic PAT (ghp_)", "Pulumi access token (pul-)", "JWT (eyJ...)"])
def test_an_esc_secret_sibling_hides_no_plain_credential(name: str) -> None:
    fmt = BY_NAME[name]
    stack = {"tpu-slicing:zone": "us-central1-ai1a", "gcp:project": "example-tpu-project"}
    environment = _detailed(
        {"tpu-slicing:serving": {"model": {"path": {"fn::secret": "models/x"}}, "gateway": {"name": fmt.token}}}
    )
    merged = esc_environment.merge(stack, environment, "tpu-slicing")
    assert "tpu-slicing:serving" in merged.secret_keys  # as the CLI marks it
    with pytest.raises(ConfigError) as caught:
        loader.load(_raw(merged), stack="dev", project="example-tpu-project", secret_keys=merged.secret_keys)
    assert "tpu-slicing:serving.gateway.name: holds " in str(caught.value)
    assert_not_echoed(str(caught.value), fmt)


def test_a_secret_holds_what_it_likes() -> None:
    """A secret itself is exempt: a whole secret key, and a secret leaf beside a plain one (offline, the
    placeholder; at `pulumi up`, decrypted, named by the stack file's `secure:` paths)."""
    token = BY_NAME["Hugging Face user token (hf_)"].token
    assert credentials.plain_credentials({"tpu-slicing:hfToken": token}, ["tpu-slicing:hfToken"]) == []
    assert credentials.plain_credentials({"gcp:credentials": '{"type": "service_account"}'}, ["gcp:credentials"]) == []
    nested = {"tpu-slicing:serving": json.dumps({"model": {"path": token}, "gateway": {"name": "gw"}})}
    leaf = "tpu-slicing:serving.model.path"
    assert credentials.plain_credentials(nested, ["tpu-slicing:serving"], [leaf]) == []
    [problem] = credentials.plain_credentials(nested, ["tpu-slicing:serving"])  # not known to be a secret
    assert problem.startswith(f"{leaf}: holds a Hugging Face token")


def test_at_pulumi_up_the_stack_file_says_which_decrypted_leaf_is_secret(tmp_path: Path) -> None:
    """`pulumi up` hands `tpu-slicing:serving` decrypted and marks the whole key secret: the loader reads
    the stack file's `secure:` paths, exempts those, and refuses the plain credential beside them."""
    secret = BY_NAME["Hugging Face user token (hf_)"].token
    plain = BY_NAME["Docker Hub PAT (dckr_pat_)"]
    stack = tmp_path / "Pulumi.dev.yaml"
    stack.write_text(
        yaml.safe_dump(
            {"config": {"tpu-slicing:serving": {"model": {"path": _secure(secret)}, "gateway": {"name": plain.token}}}}
        )
    )
    raw = {
        "tpu-slicing:zone": "us-central1-ai1a",
        "gcp:project": "example-tpu-project",
        "tpu-slicing:serving": json.dumps({"model": {"path": secret}, "gateway": {"name": plain.token}}),
    }
    keys = ["tpu-slicing:serving"]
    leaves = loader.secure_leaves(raw, keys, stack)
    assert leaves == {"tpu-slicing:serving.model.path"}
    with pytest.raises(ConfigError) as caught:
        loader.load(raw, stack="dev", project="example-tpu-project", secret_keys=keys, secret_leaves=leaves)
    message = str(caught.value)
    assert "tpu-slicing:serving.gateway.name: holds a Docker Hub access token" in message, message
    assert "serving.model.path" not in message and secret not in message
    assert_not_echoed(message, plain)
    # No stack file to read: every leaf is judged, the decrypted secret too (it would reach pods in plain).
    assert loader.secure_leaves(raw, keys, tmp_path / "missing.yaml") == frozenset()
    assert loader.secure_leaves({"tpu-slicing:zone": "z"}, ["tpu-slicing:zone"], stack) == frozenset()


@pytest.mark.parametrize(
    "name", ["GitLab PAT (glpat-)", "Google OAuth refresh token (1//0)", "Cloud Storage HMAC secret (40 base64)"]
)
def test_refused_before_any_resource_is_registered(name: str, run_dev: DevRunner) -> None:
    """The program itself (under the mock engine), with the credential beside a secret sibling of the key."""
    fmt = BY_NAME[name]
    overrides = {"serving": {"model": {"path": "[secret]"}, "gateway": {"name": fmt.token}}}
    with pytest.raises(ConfigError) as caught:
        run_dev(overrides, secret_keys=["tpu-slicing:serving"])
    assert "tpu-slicing:serving.gateway.name: holds " in str(caught.value)
    assert caught.value.registered_resources == []  # type: ignore[attr-defined]
    assert_not_echoed(str(caught.value), fmt)


# --- No five characters of a credential in any refusal, however it is split -----------------------------


def _echoes(token: str) -> Iterator[str]:
    """How a rule might show a value: quoted, inside a path or a name, and cut at '-', '_', '/' or '.'."""
    yield f"{token!r} is not allowed"
    yield f"gs://bucket/{token}/config.json has no snapshot"
    yield f"dev-{token}-gke is longer than 40 characters"
    for separator in "-_/.":
        for piece in token.split(separator):
            if len(piece) >= credentials.ECHO_WINDOW:
                yield f"the part {piece!r} after the last {separator!r} is not a label"


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_a_refusal_shows_no_five_characters_of_a_credential_the_stack_gave(name: str) -> None:
    fmt = BY_NAME[name]
    for echo in _echoes(fmt.token):
        message = f"tpu-slicing:serving.gateway.name: {echo}; allowed: an RFC 1035 label"
        assert_not_echoed(credentials.redact(message, [fmt.token]), fmt)


def test_a_credential_split_into_short_pieces_is_masked_whole() -> None:
    """The finding of issue 64: the random part of a GitLab token, a Google refresh token or client secret
    or an AWS secret key split by '-', '_' or '/' into pieces shorter than ECHO_PIECE_MIN was printed."""
    fakes = Fakes(3)
    for token in (
        "glpat-" + "-".join(fakes.mixed(ALNUM, 5) for _ in range(4)),
        "1//0" + "_".join(fakes.mixed(ALNUM, 6) for _ in range(8)),
        "GOCSPX-" + "_".join(fakes.mixed(ALNUM, 6) for _ in range(4)),
        "/".join(fakes.mixed(ALNUM, n) for n in (9, 9, 9, 10)),  # an AWS secret access key
    ):
        assert credentials.find(token) is not None, token
        message = f"tpu-slicing:namePrefix: {token!r} must be an RFC 1035 label"
        redacted = credentials.redact(message, [token])
        assert redacted == "tpu-slicing:namePrefix: '***' must be an RFC 1035 label", redacted


# --- What is no credential -----------------------------------------------------------------------------

ORDINARY_VALUES = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-8B",
    "Qwen/Qwen3.5-397B-A17B-FP8",
    "google/gemma-2-27b-it",
    "deepseek-ai/DeepSeek-R1-Distill-Llama-70B",
    "mistralai/Mixtral-8x22B-Instruct-v0.1",
    "models--Qwen--Qwen3.5-397B-A17B-FP8/snapshots/ea5b4f81096f3901c91dea97f81324302495781d",
    "gs://example-model-weights/models/llama-3-70b",
    "gs://example-jetstream-checkpoints/llama2-70b/int8_",
    "gs://b/saxml/LmCloudSpmd175B32Test/checkpoint/1",
    "saxml.server.pax.lm.params.lm_cloud.LmCloudSpmd175B32Test",
    "us-docker.pkg.dev/cloud-tpu-images/inference/vllm-tpu@sha256:" + "0a1b2c3d4e5f6789" * 4,
    "vllm/vllm-tpu@sha256:" + "f" * 64,
    "sha256:" + "9c" * 32,
    "123e4567-e89b-12d3-a456-426614174000",
    "f47ac10b-58cc-4372-a567-0e02b2c3d479",
    "projects/example-tpu-project/notificationChannels/1234567890123456789",
    "projects/123456789012/locations/us-central1/keyRings/ring/cryptoKeys/key",
    "serving@example-tpu-project.iam.gserviceaccount.com",
    "123456789012-compute@developer.gserviceaccount.com",
    "example-tpu7x-reservation",
    "gke-tpu-partition-4x4x4-id",
    "llm-d-pd-disaggregation",
    "1.35.0-gke.1795000",
    "2026-12-01T00:00:00Z",
    "10.16.0.0/14",
    "assets/tokenizer.llama2",
    "/sax/test/spmd",
    "NO_MINOR_OR_NODE_UPGRADES",
    "tpu7x-standard-4t",
    "hf_transfer",
    "secret_manager_secret_version",
    "dapi-gateway",
    "key-rotation-policy",
    "pat-reviewers",
    "TheQuickBrownFoxJumpsOverTheLazyDog12345",
    "llama2/70b/int8/Checkpoints/Step1000/ite",
]


@pytest.mark.parametrize("value", ORDINARY_VALUES)
def test_ordinary_values_are_no_credential(value: str) -> None:
    assert credentials.find(value) is None, credentials.find(value)


@pytest.mark.parametrize(
    "overrides",
    [
        {"serving": {"model": {"path": "weights/models--Qwen--Qwen3.5-397B-A17B-FP8/snapshots/" + "0c" * 20}}},
        {
            "serving": {
                "model": {
                    "name": "meta-llama/Llama-3.1-8B",
                    "path": "models--meta-llama--Llama-3.1-8B/snapshots/" + "5a" * 20,
                    "parametersBillions": 8,
                    "bytesPerParameter": 2,
                    "attentionHeads": 32,
                    "contextLength": 131072,
                }
            }
        },
        {"serving": {"gateway": {"name": "inference-gateway-1"}}},
        {
            "observability": {
                "alerts": {"notificationChannels": ["projects/example-tpu-project/notificationChannels/1"]}
            }
        },
        {"pulumi:tags": {"owner": "123e4567-e89b-12d3-a456-426614174000", "team": "tpu-serving"}},
        {"reservation": {"accept": {"sub-block-0": "drained for a firmware test, ticket 4411"}}},
    ],
)
def test_ordinary_settings_load(overrides: dict[str, Any]) -> None:
    config_with(overrides)


def test_importing_the_rules_leaves_detect_secrets_for_the_first_value() -> None:
    """Issue 69: start-up. detect-secrets (and `requests`, which it imports) load on the first value no
    project shape settles, not when the settings or the policy pack import the module."""
    code = "import sys, settings.credentials; print('detect_secrets' in sys.modules, 'requests' in sys.modules)"
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"], done.stdout + done.stderr
