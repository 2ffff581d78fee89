"""Credentials written into ordinary settings: found by their shape, refused before anything runs.

A plain (non-secret) value of a stack file is committed to git and flows into pod arguments, labels,
Job environments, build/plan/, the PR comment and the Pulumi state, where anyone who can read any of
them reads it. Every plain string of every config key is checked, at any depth, whatever stands beside
it: a `secure:` value (or an ESC secret) exempts itself, never its siblings, although Pulumi marks the
whole key secret (`plain_credentials`). Each value and each mapping key is checked as written, after
percent-decoding and after base64-decoding (the whole value or any run of base64 in it, standard or
URL-safe alphabet, twice over), so an encoded credential is found as well as a bare one.

Where the shapes come from: a maintained rule set, used as a library
----------------------------------------------------------------------
The shapes of vendors' tokens come first from Yelp's detect-secrets, pinned in requirements.txt,
policy/requirements.txt and constraints.txt (1.5.0). Every plugin it ships is used, found through its
own plugin registry (`detect_secrets.core.plugins.util.get_mapping_from_secret_type_to_class`, what
`detect-secrets scan --list-all-plugins` lists), each through the documented plugin method
`analyze_string` (docs/plugins.md), so a newer pin brings its new rules without a change here; only
the plugins in `NOT_SHAPES` are left out, each for its reason. `analyze_string` never verifies a
secret, so no value is ever sent anywhere and nothing needs the network. Its plugins cover GitHub's
`ghp_`/`gho_`/`ghu_`/`ghs_`/`ghr_` (GitHubTokenDetector), GitLab's `glpat-`, `gldt-`, `glrt-`, `glptt-`
and runner registration tokens (GitLabTokenDetector), Slack's `xox?-` tokens and webhooks
(SlackDetector), Stripe's live keys (StripeDetector), AWS access key IDs (AWSKeyDetector), OpenAI's
legacy keys (OpenAIDetector), PyPI (PypiTokenDetector), SendGrid (SendGridDetector), Twilio
(TwilioKeyDetector), Azure storage connection strings (AzureStorageKeyDetector), JWTs
(JwtTokenDetector), PEM and PuTTY private keys (PrivateKeyDetector), Square OAuth secrets
(SquareOAuthDetector), Mailchimp, Discord, Telegram, Artifactory, IBM and npm's `.npmrc` form. Why
this source:

* gitleaks' rules (config/gitleaks.toml) are the broadest published set, but they ship with a Go
  binary or module: the program may neither read the Go module cache at run time nor copy their
  text into this repository, and no PyPI package ships them as data;
* Samsung's CredSweeper ships a broad rule file, but as part of a scanner that installs pandas,
  onnxruntime, lxml and twenty more packages into the program's and the policy pack's virtualenvs;
* detect-secrets is pure Python, needs only PyYAML and requests (both pinned already), is reviewed
  and versioned upstream (Apache-2.0), and its rules are readable in the installed package.

Its rules stop at what its maintainers published (May 2024). The project's own shapes (`SHAPES`) add
the rest, each written here from the vendor's published format and citing it beside its pattern: the
credentials this project is most likely to hold (Hugging Face, Google, Pulumi, Docker Hub, Cloud
Storage HMAC keys, bare AWS secret keys) and the other vendors' formats detect-secrets 1.5.0 misses.
A vendor's checksum (GitHub's and npm's CRC32 suffix, Atlassian's) is never verified: a shape is enough.

And a credential of a kind nobody listed is still found where it sits (`STRUCTURAL`): in a URL's
userinfo (`https://user:password@host`, RFC 3986 §3.2.1, which deprecates a password there), in a URL
query parameter whose name says secret (`?access_token=`, `&sig=`, `?key=`), after a secret-named
assignment (`password=...`, `apiToken: ...`) or in an HTTP Authorization value (`Bearer ...`,
RFC 6750 §2.1; `Basic ...`, RFC 7617).

A refusal names the key and the kind of credential, never the value; `masked` is how a message shows a
value that must be shown (userinfo, queries and anything shaped like a credential are masked), and
`redact` is what the loader runs on every refusal: no five characters of a credential any rule finds
in the stack are shown, whatever splits it ('-', '_', '/', '.'), nor a long random-looking run the
stack gave, for a credential of a kind no rule knows. Provider credentials by key (`gcp:credentials`)
are settings/loader.py's, and keys of namespaces the program never reads (`kubernetes:kubeconfig`) are
refused by settings/stack_file.py before this runs.

Start-up: the patterns are compiled once, at import; detect-secrets (which imports `requests`) is
imported on the first value no project shape settles, and `find` caches its answers.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

if TYPE_CHECKING:
    from detect_secrets.plugins.base import BasePlugin

ALLOWED = "allowed: a Pulumi secret (`pulumi config set --secret`) or a reference the workload resolves itself"

# --- The project's own shapes ---------------------------------------------------------------------------

# A token starts where no letter or digit stands before it (`org/hf_...`, `--token=ghp_...`: `Shape.before`);
# a base64 secret stands alone, no base64 character on either side.
_B64_END = r"(?![A-Za-z0-9+/=])"
_WORDY = re.compile(r"[A-Z]?[a-z]{2,}")
_WORD_SEGMENT = re.compile(r"[A-Z]?[a-z]{5,}[0-9]*")


def _mixed(secret: str) -> bool:
    """Upper- and lowercase letters and a digit (or '+'/'/'), as random base64 holds them."""
    return (
        any(c.isupper() for c in secret)
        and any(c.islower() for c in secret)
        and any(c.isdigit() or c in "+/" for c in secret)
    )


def _random_base64(secret: str) -> bool:
    """A run of exactly 40 base64 characters that is random, not a path or a camel-case name: mixed
    classes, no '/'-separated segment that is a word of five letters or more (`checkpoint`, `Llama3`),
    and less than 75% of it in words of two lowercase letters or more (a camel-case name of 40
    characters has ~90%). About 1 random key in 500 fails these and is left to detect-secrets' and the
    structural rules (`aws_secret_access_key = ...`)."""
    if not _mixed(secret):
        return False
    if any(_WORD_SEGMENT.fullmatch(segment) for segment in secret.split("/")):
        return False
    wordy = sum(len(w) for w in _WORDY.findall(secret)) / len(secret)
    return "+" in secret or wordy < 0.75


def _digits(count: int) -> Callable[[str], bool]:
    return lambda secret: sum(c.isdigit() for c in secret) >= count and _random(secret)


def _random(secret: str) -> bool:
    """Not a placeholder (`pul-000...0`, `key-aaaa...`): a shape with a short prefix or none, in an
    alphabet model names and paths share, also wants the variety of a random token."""
    return len(set(secret)) >= 6


_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_BASE64 = _ALNUM | {"+", "/"}


# A credential as a message must not show it: the text a rule matched, and the start and end of its
# secret part in it (what is left of it, a vendor's published prefix, may be shown).
Span = tuple[str, int, int]


@dataclass(frozen=True)
class Shape:
    """One credential format: `pattern` finds it where no character of `before` precedes it (checked
    here, not by a lookbehind, which would cost the pattern its literal-prefix search), its group
    `secret` (else the whole match) is the part a message may never show, and `accept`, when set,
    judges that part further."""

    name: str  # unique, for the tests
    kind: str  # what a refusal calls it
    pattern: re.Pattern[str]
    before: frozenset[str] = _ALNUM
    accept: Callable[[str], bool] | None = None

    def _matches(self, text: str) -> Iterator[re.Match[str]]:
        position = 0
        while (match := self.pattern.search(text, position)) is not None:
            start = match.start()
            if start == 0 or text[start - 1] not in self.before:
                yield match
                position = max(match.end(), start + 1)
            else:
                position = start + 1

    def spans(self, text: str) -> Iterator[Span]:
        """Each match in `text`, with where its secret part lies in it (possibly nowhere: a PEM header
        without its body)."""
        grouped = "secret" in self.pattern.groupindex
        for match in self._matches(text):
            start, end = match.span("secret") if grouped else match.span()
            start, end = max(start, match.start()), max(end, match.start())  # (-1, -1): the group took no part
            secret = text[start:end]
            if self.accept is None or self.accept(secret):
                yield match.group(), start - match.start(), end - match.start()

    def secrets(self, text: str) -> Iterator[str]:
        """The secret part of each match in `text`."""
        for matched, start, end in self.spans(text):
            yield matched[start:end]

    def found(self, text: str) -> bool:
        if self.pattern.search(text) is None:  # the common case, at the speed of the pattern's own search
            return False
        return next(self.secrets(text), None) is not None


def _shape(
    name: str,
    kind: str,
    regex: str,
    accept: Callable[[str], bool] | None = None,
    before: frozenset[str] = _ALNUM,
) -> Shape:
    return Shape(name, kind, re.compile(regex), before, accept)


# Each shape cites the page its vendor publishes the format on (where a vendor publishes none, the
# comment says what the shape rests on instead).
SHAPES: tuple[Shape, ...] = (
    # huggingface.co/docs/hub/security-tokens: user access tokens `hf_`, organisation API tokens `api_org_`.
    _shape("huggingface", "a Hugging Face token", r"(?:hf_|api_org_)(?P<secret>[A-Za-z0-9]{20,})"),
    # docs.github.com/en/authentication/keeping-your-account-and-data-secure/about-authentication-to-github
    # ("GitHub's token formats"): fine-grained personal access tokens `github_pat_`.
    _shape("github-fine-grained", "a GitHub fine-grained token", r"github_pat_(?P<secret>[A-Za-z0-9_]{40,})"),
    # cloud.google.com/docs/authentication/api-keys: `AIza` and 35 more characters.
    _shape("google-api-key", "a Google API key", r"AIza(?P<secret>[0-9A-Za-z_-]{35})"),
    # developers.google.com/identity/protocols/oauth2: access tokens `ya29.`.
    _shape("google-access-token", "a Google OAuth access token", r"ya29\.(?P<secret>[0-9A-Za-z_-]{20,})"),
    # developers.google.com/identity/protocols/oauth2 ("Token size limits") publishes no format: refresh
    # tokens as Google's token endpoint issues them start `1//0` (e.g. the OAuth 2.0 Playground's).
    _shape(
        "google-refresh-token",
        "a Google OAuth refresh token",
        r"1//0(?P<secret>[0-9A-Za-z_-]{30,})",
        _random,
        before=_ALNUM | {"/"},
    ),
    # support.google.com/cloud/answer/15549257 (OAuth clients) publishes no format: client secrets as the
    # Google Cloud console issues them since 2021 start `GOCSPX-`.
    _shape("google-client-secret", "a Google OAuth client secret", r"GOCSPX-(?P<secret>[0-9A-Za-z_-]{20,})"),
    # cloud.google.com/storage/docs/authentication/hmackeys: an access ID is `GOOG` and uppercase letters
    # and digits, 61 characters for a service account (24 for a user account).
    _shape(
        "gcs-hmac-access-id",
        "a Cloud Storage HMAC access ID",
        r"GOOG(?P<secret>[0-9A-Z]{19,57})(?![0-9A-Za-z])",
        _digits(2),
    ),
    # cloud.google.com/storage/docs/authentication/hmackeys: the secret is "a 40-character Base-64 encoded
    # string"; docs.aws.amazon.com/IAM/latest/UserGuide/id_credentials_access-keys.html: a secret access
    # key is 40 base64 characters (`wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY`). Bare, with no name beside it.
    _shape(
        "base64-40",
        "a 40-character base64 secret (an AWS secret access key or a Cloud Storage HMAC secret)",
        r"(?P<secret>[A-Za-z0-9+/]{40})" + _B64_END,
        _random_base64,
        _BASE64,
    ),
    # learn.microsoft.com/azure/storage/common/storage-account-keys-manage: 512-bit account keys, which
    # the portal shows as 88 base64 characters ending `==`.
    _shape(
        "azure-storage-key",
        "an Azure storage account key",
        r"(?P<secret>[A-Za-z0-9+/]{86}==)" + _B64_END,
        _mixed,
        _BASE64,
    ),
    # RFC 7468 §10 and §11: `PRIVATE KEY`, `ENCRYPTED PRIVATE KEY`, and the `RSA`/`EC`/`OPENSSH` forms;
    # the body up to `-----END` is the secret.
    _shape(
        "private-key",
        "a private key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?P<secret>(?:(?!-----END)[\s\S])*)",
        before=frozenset(),
    ),
    # cloud.google.com/iam/docs/keys-create-delete: JSON with `"type": "service_account"` and a PEM key.
    _shape(
        "service-account-key",
        "a service-account key",
        r"\"type\"\s*:\s*\"service_account\"(?P<secret>)",  # its secret is the private key, a shape of its own
        before=frozenset(),
    ),
    # RFC 7519 §3 (JWS compact serialization, RFC 7515 §7.1): two base64url JSON objects (`eyJ`) and a
    # signature, all three secret (detect-secrets' JwtTokenDetector finds them; this keeps the signature).
    _shape("jwt", "a JSON Web Token", r"(?P<secret>eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*)"),
    # kubernetes.io/docs/concepts/configuration/organize-cluster-access-kubeconfig: a user's token,
    # client key or password.
    _shape(
        "kubeconfig",
        "a kubeconfig credential",
        r"(?m)^\s*(?:token|client-key-data|password)\s*:[ \t]*(?![\"']{2})(?P<secret>[^\s${<]\S*)",
        before=frozenset(),
    ),
    # docs.gitlab.com/ee/security/tokens (token prefixes, routable tokens): `glpat-`, a payload, `.` and a
    # version and checksum (detect-secrets finds the payload only).
    _shape(
        "gitlab-routable",
        "a GitLab token",
        r"gl(?:pat|rt)-(?P<secret>[A-Za-z0-9_-]{27,300}\.[0-9a-z]{9})(?![0-9A-Za-z])",
    ),
    # docs.anthropic.com/en/api/getting-started and /en/api/administration-api: `sk-ant-api03-` API keys,
    # `sk-ant-admin01-` Admin API keys.
    _shape("anthropic", "an Anthropic API key", r"sk-ant-(?P<secret>[A-Za-z0-9_-]{20,})"),
    # platform.openai.com/docs/api-reference/authentication and /docs/api-reference/admin-api-keys:
    # project keys `sk-proj-`, service-account keys `sk-svcacct-`, admin keys `sk-admin-`.
    _shape(
        "openai-scoped",
        "an OpenAI API key",
        r"sk-(?:proj|svcacct|admin)-(?P<secret>[A-Za-z0-9_-]{20,})",
    ),
    # openrouter.ai/docs/api-reference/authentication: `sk-or-v1-` and 64 hexadecimal digits.
    _shape("openrouter", "an OpenRouter API key", r"sk-or-v1-(?P<secret>[0-9a-f]{64})"),
    # docs.npmjs.com/about-access-tokens (github.blog/changelog/2021-09-23-npm-has-a-new-access-token-format):
    # `npm_`, 30 random characters and a 6-character CRC32 checksum.
    _shape("npm", "an npm access token", r"npm_(?P<secret>[A-Za-z0-9]{36})"),
    # pulumi.com/docs/pulumi-cloud/access-management/access-tokens: `pul-` and 40 hexadecimal digits.
    _shape("pulumi", "a Pulumi access token", r"pul-(?P<secret>[0-9a-f]{40})", _random),
    # docs.docker.com/security/for-developers/access-tokens: personal `dckr_pat_`, organisation `dckr_oat_`.
    _shape("docker-hub", "a Docker Hub access token", r"dckr_(?:pat|oat)_(?P<secret>[A-Za-z0-9_-]{20,})"),
    # docs.databricks.com/en/dev-tools/auth/pat.html: `dapi` and 32 hexadecimal digits (an optional `-N`).
    _shape("databricks", "a Databricks token", r"dapi(?P<secret>[0-9a-f]{32})(?:-[0-9])?", _random),
    # support.atlassian.com/atlassian-account/docs/manage-api-tokens-for-your-atlassian-account: API tokens
    # `ATATT` (with a CRC32 suffix), Bitbucket app passwords `ATBB`.
    _shape("atlassian", "an Atlassian API token", r"(?:ATATT|ATCTT|ATBB)(?P<secret>[A-Za-z0-9_=-]{28,})"),
    # shopify.dev/docs/apps/build/authentication-authorization/access-tokens: `shpat_`, `shpca_`, `shppa_`
    # access tokens and `shpss_` shared secrets, 32 hexadecimal digits.
    _shape("shopify", "a Shopify access token or secret", r"shp(?:at|ca|pa|ss)_(?P<secret>[0-9a-fA-F]{32})"),
    # developer.squareup.com/docs/build-basics/access-tokens: access tokens `EAAA` (`sq0atp-` before 2019).
    _shape("square-legacy", "a Square access token", r"sq0atp-(?P<secret>[0-9A-Za-z_-]{22,})"),
    _shape("square", "a Square access token", r"EAAA(?P<secret>[0-9A-Za-z_-]{60})(?![0-9A-Za-z_-])", before=_BASE64),
    # documentation.mailgun.com/docs/mailgun/api-reference/authentication: `key-` and 32 hexadecimal digits,
    # and the newer 32-8-8 hexadecimal form.
    _shape("mailgun-legacy", "a Mailgun API key", r"key-(?P<secret>[0-9a-f]{32})(?![0-9A-Za-z])", _random),
    _shape("mailgun", "a Mailgun API key", r"(?P<secret>[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{8})(?![0-9A-Za-z])", _random),
    # docs.digitalocean.com/reference/api/create-personal-access-token: `dop_v1_` (OAuth `doo_v1_`,
    # refresh `dor_v1_`) and 64 hexadecimal digits.
    _shape("digitalocean", "a DigitalOcean token", r"do[opr]_v1_(?P<secret>[0-9a-f]{64})"),
    # devcenter.heroku.com/articles/authentication: API keys `HRKU-`.
    _shape("heroku", "a Heroku API key", r"HRKU-(?P<secret>[A-Za-z0-9_-]{20,})"),
    # developer.hashicorp.com/vault/docs/concepts/tokens#token-prefixes: service `hvs.`, batch `hvb.`,
    # recovery `hvr.`.
    _shape("vault", "a Vault token", r"hv[sbr]\.(?P<secret>[A-Za-z0-9_-]{20,})", _random),
    # developer.hashicorp.com/terraform/cloud-docs/users-teams-organizations/api-tokens: `<14>.atlasv1.<...>`.
    _shape(
        "terraform-cloud",
        "a Terraform Cloud token",
        r"(?P<secret>[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,})",
    ),
    # docs.doppler.com/docs/auth-token-formats: `dp.ct.`, `dp.pt.`, `dp.st.[config.]`, `dp.sa.`, `dp.said.`,
    # `dp.scim.`, `dp.audit.` and 40 to 44 letters and digits.
    _shape(
        "doppler",
        "a Doppler token",
        r"dp\.(?:ct|pt|sa|said|scim|audit|st(?:\.[a-z0-9_-]{2,35})?)\.(?P<secret>[A-Za-z0-9]{40,44})",
    ),
    # linear.app/developers/graphql (authentication): personal API keys `lin_api_`, OAuth `lin_oauth_`.
    _shape("linear", "a Linear API key", r"lin_(?:api|oauth)_(?P<secret>[A-Za-z0-9]{40})"),
    # developers.notion.com/docs/authorization: integration secrets `secret_` (`ntn_` since 2024).
    _shape("notion", "a Notion integration secret", r"(?:secret|ntn)_(?P<secret>[A-Za-z0-9]{40,})"),
    # replicate.com/docs/topics/security/api-tokens: `r8_` and 37 letters and digits.
    _shape("replicate", "a Replicate API token", r"r8_(?P<secret>[A-Za-z0-9]{37})"),
    # console.groq.com/docs/api-keys: `gsk_`.
    _shape("groq", "a Groq API key", r"gsk_(?P<secret>[A-Za-z0-9]{48,})"),
    # docs.stripe.com/keys: secret `sk_` and restricted `rk_` keys, live and test (detect-secrets knows
    # live ones of 24 characters); docs.stripe.com/webhooks: signing secrets `whsec_`.
    _shape("stripe", "a Stripe secret key", r"[rs]k_(?:live|test)_(?P<secret>[A-Za-z0-9]{10,})"),
    _shape("stripe-webhook", "a Stripe webhook signing secret", r"whsec_(?P<secret>[A-Za-z0-9+/=]{24,})"),
    # api.slack.com/authentication/token-types: app-level `xapp-`, configuration `xoxe.xoxp-`/`xoxe-`.
    _shape(
        "slack-app",
        "a Slack app or configuration token",
        r"(?:xapp-[0-9]-|xoxe\.xox[bp]-[0-9]-|xoxe-[0-9]-)(?P<secret>[A-Za-z0-9-]{20,})",
    ),
    # tailscale.com/kb/1277/key-prefixes: `tskey-api-`, `tskey-auth-`, `tskey-client-`, `tskey-scim-`,
    # `tskey-webhook-`.
    _shape(
        "tailscale",
        "a Tailscale key",
        r"tskey-(?:api|auth|client|scim|webhook)-(?P<secret>[A-Za-z0-9-]{20,})",
    ),
    # learning.postman.com/docs/developer/postman-api/authentication: `PMAK-`.
    _shape("postman", "a Postman API key", r"PMAK-(?P<secret>[0-9a-f]{24}-[0-9a-f]{34})"),
    # grafana.com/docs/grafana/latest/administration/service-accounts: service-account tokens `glsa_`;
    # Grafana Cloud access policy tokens `glc_`.
    _shape("grafana", "a Grafana token", r"gl(?:sa|c)_(?P<secret>[A-Za-z0-9+/_=]{32,})"),
    # age-encryption.org/v1: `AGE-SECRET-KEY-1` and 58 Bech32 characters.
    _shape("age", "an age secret key", r"AGE-SECRET-KEY-1(?P<secret>[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58})"),
    # docs.perplexity.ai/guides/getting-started: `pplx-`.
    _shape("perplexity", "a Perplexity API key", r"pplx-(?P<secret>[A-Za-z0-9]{40,})"),
    # docs.x.ai/docs/api-reference (authentication): `xai-`.
    _shape("xai", "an xAI API key", r"xai-(?P<secret>[A-Za-z0-9]{60,})"),
    # docs.dynatrace.com/docs/manage/identity-access-management/access-tokens-and-oauth-clients/access-tokens
    # ("Token format"): `dt0c01.`, a 24-character public part and a 64-character secret.
    _shape("dynatrace", "a Dynatrace token", r"dt0c01\.(?P<secret>[A-Z0-9]{24}\.[A-Z0-9]{64})"),
    # docs.sentry.io/account/auth-tokens: organisation tokens `sntrys_`, user tokens `sntryu_`.
    _shape("sentry", "a Sentry auth token", r"sntry[su]_(?P<secret>[A-Za-z0-9+/=_]{40,})"),
    # docs.newrelic.com/docs/apis/intro-apis/new-relic-api-keys: user keys `NRAK-`, insert keys `NRII-`.
    _shape("newrelic", "a New Relic key", r"NR(?:AK|II)-(?P<secret>[A-Za-z0-9-]{27,32})"),
    # planetscale.com/docs/concepts/service-tokens and connection strings: `pscale_tkn_`, `pscale_pw_`.
    _shape(
        "planetscale",
        "a PlanetScale token or password",
        r"pscale_(?:tkn|pw|oauth)_(?P<secret>[A-Za-z0-9_.=-]{32,})",
    ),
    # guides.rubygems.org/api-key-scopes: `rubygems_` and 48 hexadecimal digits.
    _shape("rubygems", "a RubyGems API key", r"rubygems_(?P<secret>[0-9a-f]{48})"),
    # developer.1password.com/docs/service-accounts: service-account tokens `ops_eyJ...`.
    _shape("1password", "a 1Password service-account token", r"ops_(?P<secret>eyJ[A-Za-z0-9+/=_-]{40,})"),
    # docs.mapbox.com/accounts/guides/tokens: secret tokens `sk.eyJ...`.
    _shape(
        "mapbox",
        "a Mapbox secret token",
        r"sk\.(?P<secret>eyJ[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{20,})",
    ),
    # airtable.com/developers/web/guides/personal-access-tokens: `pat`, 14 characters, `.`, 64 hex digits.
    _shape("airtable", "an Airtable personal access token", r"pat(?P<secret>[A-Za-z0-9]{14}\.[0-9a-f]{64})"),
    # supabase.com/docs/guides/api/api-keys: secret keys `sb_secret_`; personal access tokens `sbp_`.
    _shape("supabase", "a Supabase key", r"(?:sb_secret_|sbp_)(?P<secret>[A-Za-z0-9_-]{32,})"),
)

# What a pattern matches literally at its start (`_literal_prefix`).
_LITERAL = re.compile(r"(?:\\[^A-Za-z0-9]|[A-Za-z0-9_=:/ -])+")

# detect-secrets plugins that judge something other than a credential's published shape.
NOT_SHAPES: Mapping[str, str] = {
    "Base64HighEntropyString": "randomness, not a shape: image digests, hashes and Cloud Monitoring JSON "
    "in the committed stacks' plans trip it",
    "HexHighEntropyString": "randomness, not a shape: sha256 image digests and commit hashes trip it",
    "IPPublicDetector": "an address is no credential: source ranges and NetworkPolicy CIDRs are public by design",
}


@functools.cache
def plugins() -> tuple[BasePlugin, ...]:
    """detect-secrets' plugins but `NOT_SHAPES`, imported on first use (the package imports `requests`)."""
    try:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    except ModuleNotFoundError as missing:  # a virtualenv built before the pin: say what to install
        raise ModuleNotFoundError(
            "settings/credentials.py needs detect-secrets (pinned in requirements.txt and constraints.txt): "
            "pip install -r requirements.txt -c constraints.txt, or `make` rebuilds .venv"
        ) from missing
    classes: Mapping[str, type[BasePlugin]] = get_mapping_from_secret_type_to_class()
    return tuple(cls() for cls in classes.values() if cls.__name__ not in NOT_SHAPES)


def _literal_prefix(pattern: str) -> str:
    """What a regular expression matches literally before its first class or group (`AccountKey=`)."""
    found = _LITERAL.match(pattern)
    return re.sub(r"\\(.)", r"\1", found.group()) if found else ""


def _plugin_spans(plugin: BasePlugin, text: str) -> Iterator[Span]:
    """What a detect-secrets plugin matches in `text`; its secret part starts after the literal start its
    pattern publishes (`AccountKey=`)."""
    denylist = getattr(plugin, "denylist", None)
    if not denylist:
        yield from ((s, 0, len(s)) for s in plugin.analyze_string(text) if isinstance(s, str))
        return
    for regex in denylist:
        prefix = _literal_prefix(regex.pattern)
        for match in regex.finditer(text):
            found, base = match.group(), match.start()
            # A pattern that captures its secret (`password=(...)`, `://user:(...)@`) names it by its longest
            # group; a short group is a prefix (`(ghp|gho|...)_`), and the rest of the match is the secret.
            groups = [match.span(i) for i in range(1, (regex.groups or 0) + 1) if match.start(i) >= 0]
            start, end = max(groups, key=lambda span: span[1] - span[0], default=(base, base))
            if end - start >= 8:
                yield found, start - base, end - base
            else:
                yield found, len(prefix) if prefix and found.startswith(prefix) else 0, len(found)


# --- Structural shapes: a credential of any vendor, found by where it sits -----------------------------

# The words a secret's name ends with (`HF_TOKEN`, `dbPassword`, `client_secret`, `X-Goog-Signature`).
SECRET_WORDS = frozenset(
    {"token", "password", "passwd", "passphrase", "pwd", "secret", "apikey", "credential", "credentials"}
)
SECRET_PAIRS = frozenset(
    {("api", "key"), ("access", "key"), ("secret", "key"), ("private", "key"), ("auth", "key"), ("client", "key")}
)
# In a URL query a bare `key` is an API key (`?key=AIza...`) and `sig`/`signature` sign the request
# (Cloud Storage's X-Goog-Signature, S3's X-Amz-Signature, Azure's SAS `sig`).
QUERY_WORDS = SECRET_WORDS | {"key", "sig", "signature", "pass", "auth", "authorization"}

_USERINFO = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://(?!\*\*\*@)([^\s/?#@]+)@")  # `***@`: masked already
_QUERY = re.compile(r"[?&;]([A-Za-z0-9_.-]+)=([^&#\s\"'<>]+)")
# `name = value`, `name: value`, `--name=value`: a literal value of eight or more token characters,
# ended by a delimiter (a call, an index or an interpolation is no literal: `token = os.environ[...]`).
# Matched at every position (a lookahead), so `image:v1/password=...` is read as `password=...` too.
_ASSIGNMENT = re.compile(
    r"(?<![A-Za-z0-9_.])(?=([A-Za-z][A-Za-z0-9_.-]*)[\"']?[ \t]*[=:][ \t]*[\"']?"
    r"([A-Za-z0-9._~+/=%-]{8,})(?=[\s\"',;&)]|$))"
)
_AUTHORIZATION = re.compile(r"(?i)(?<![A-Za-z0-9])(?:bearer|basic)[ \t]+([A-Za-z0-9._~+/-]{16,}=*)")
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")


def _words(name: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(name)]


def secret_name(name: str, words: frozenset[str] = SECRET_WORDS) -> bool:
    """Whether `name` names a secret: its last word, or its last two words, say so."""
    parts = _words(name)
    return bool(parts) and (parts[-1] in words or tuple(parts[-2:]) in SECRET_PAIRS)


def _is_reference(value: str) -> bool:
    """A value the workload resolves itself, or an unmistakable placeholder, is no credential."""
    return value[:1] in "$%{<*" or len(set(value.lower())) <= 2


def _structural(text: str) -> Iterator[tuple[str, str]]:
    """(kind, secret) of each credential `text` holds by where it sits."""
    for userinfo in _USERINFO.findall(text):
        yield "credentials in a URL's userinfo (before the host's '@')", userinfo
    for name, value in _QUERY.findall(text):
        if secret_name(name, QUERY_WORDS) and not _is_reference(unquote(value)):
            yield "a URL query parameter named like a secret", value
    for name, value in _ASSIGNMENT.findall(text):
        if secret_name(name) and not _is_reference(value):
            yield "a value assigned to a secret-named key", value
    for value in _AUTHORIZATION.findall(text):
        yield "an HTTP Authorization credential (Bearer or Basic)", value


def _kind(text: str) -> str | None:
    """The kind of credential `text` holds as written (a phrase), or None."""
    for shape in SHAPES:
        if shape.found(text):
            return shape.kind
    for plugin in plugins():
        if next(iter(plugin.analyze_string(text)), None) is not None:
            return f"a credential detect-secrets recognises ({plugin.secret_type})"
    return next((kind for kind, _ in _structural(text)), None)


def _spans_as_written(text: str) -> Iterator[Span]:
    """Every credential `text` holds as written, by every rule."""
    for shape in SHAPES:
        yield from shape.spans(text)
    for plugin in plugins():
        yield from _plugin_spans(plugin, text)
    for _, secret in _structural(text):
        yield secret, 0, len(secret)


# --- Decoding: base64 and percent-encoding ---------------------------------------------------------

_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_SPLITS = "/-_+"
_MAX_STARTS = 8
_MAX_DEPTH = 2


def _printable(text: str) -> bool:
    return all(c.isprintable() or c in "\t\n\r" for c in text)


def _b64(candidate: str) -> str | None:
    body = candidate.rstrip("=")
    body = body[: len(body) - len(body) % 4] if len(body) % 4 == 1 else body
    if len(body) < 12:
        return None
    padded = body + "=" * (-len(body) % 4)
    altchars = b"-_" if ("-" in body or "_" in body) else None
    if altchars and ("+" in body or "/" in body):
        return None  # both alphabets at once: no base64 encoder writes that
    try:
        raw = base64.b64decode(padded, altchars=altchars, validate=True)
        text = raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return text if len(text) >= 8 and _printable(text) else None


def _base64_decodings(text: str) -> Iterator[tuple[str, str]]:
    """(encoded, decoded) for each base64 run of `text`: the run from its start or after a '/', '-', '_'
    or '+' (so `models/<base64>` is found), and the whole value with line breaks removed (wrapped base64)."""
    seen: set[str] = set()
    runs = [m.group() for m in _BASE64_RUN.finditer(text)]
    joined = "".join(text.split())
    if joined != text and _BASE64_RUN.fullmatch(joined):
        runs.append(joined)
    for run in runs:
        starts = [0, *(i + 1 for i, c in enumerate(run) if c in _SPLITS)][:_MAX_STARTS]
        for start in starts:
            decoded = _b64(run[start:])
            if decoded is not None and decoded not in seen:
                seen.add(decoded)
                yield run[start:], decoded


def _percent_decoded(text: str) -> str | None:
    if not _PERCENT.search(text):
        return None
    try:
        decoded = unquote(text, errors="strict")
    except UnicodeDecodeError:
        return None
    return decoded if decoded != text else None


def _views(text: str, depth: int = 0) -> Iterator[tuple[str, tuple[str, ...], str]]:
    """`text` as written, then each decoding of it (and of those, to `_MAX_DEPTH`), with how it was
    encoded and the encoded text it came from (what a message must not show of it)."""
    yield text, (), text
    if depth >= _MAX_DEPTH:
        return
    decoded = _percent_decoded(text)
    if decoded is not None:
        for view, how, _ in _views(decoded, depth + 1):
            yield view, ("percent-encoded", *how), text
    for encoded, decoded_run in _base64_decodings(text):
        for view, how, _ in _views(decoded_run, depth + 1):
            yield view, ("base64-encoded", *how), encoded


@dataclass(frozen=True)
class Finding:
    kind: str  # e.g. "a Hugging Face token"
    encodings: tuple[str, ...] = ()  # outermost first, e.g. ("base64-encoded",)

    @property
    def phrase(self) -> str:
        return f"{self.kind}, {' and '.join(self.encodings)}," if self.encodings else self.kind


@functools.lru_cache(maxsize=8192)
def find(text: str) -> Finding | None:
    """The credential `text` holds, as written or decoded, or None (cached: a plan repeats its strings)."""
    for view, how, _ in _views(text):
        kind = _kind(view)
        if kind:
            return Finding(kind, how)
    return None


def kind_of(text: str) -> str | None:
    """Which credential `text` holds (a phrase for a message), or None."""
    found = find(text)
    return found.phrase if found else None


def _windows(text: str, start: int = 0, end: int | None = None) -> set[str]:
    """Every `ECHO_WINDOW` characters of `text` that hold one of `text[start:end]`."""
    end = len(text) if end is None else end
    return {
        text[i : i + ECHO_WINDOW] for i in range(len(text) - ECHO_WINDOW + 1) if i < end and i + ECHO_WINDOW > start
    }


@functools.lru_cache(maxsize=1024)
def secret_windows(text: str) -> frozenset[str]:
    """What of `text` a message may never show: every `ECHO_WINDOW` characters of a credential any rule
    finds in it that hold a character of its secret part (a window inside the vendor's published prefix
    may be shown); for one found only once decoded, those of the secret percent-encoded too, and of the
    base64 run it was encoded in."""
    windows: set[str] = set()
    for view, how, encoded in _views(text):
        spans = [span for span in _spans_as_written(view) if span[2] > span[1]]
        for matched, start, end in spans:
            windows |= _windows(matched, start, end)
            if how:
                windows |= _windows(quote(matched[start:end], safe=""))
        if spans and how[:1] == ("base64-encoded",):  # the whole run encodes it
            windows |= _windows(encoded)
    return frozenset(windows)


def masked(text: str) -> str:
    """`text` as a message may show it: URL userinfo, URL queries and fragments, and every word that holds
    a credential replaced by `***`. For values that must be shown (a rule names what it refused)."""
    text = re.sub(r"(?i)(\b[a-z][a-z0-9+.-]*://)[^\s/?#]*@", r"\1***@", text)
    text = re.sub(r"([?#])[^\s'\"]*", r"\1***", text)
    return re.sub(r"\S+", lambda m: "***" if find(m.group()) else m.group(), text)


# --- Echoes: what a refusal may show of a value the stack gave ------------------------------------------
#
# A rule names the value it refused. Before a refusal leaves the loader (`redact`), every run of token
# characters it holds is masked when it shares ECHO_WINDOW characters with the secret part of a
# credential any rule finds in the stack (`secret_windows`): however the message splits or joins the
# credential ('-', '_', '/', '.', a quote), no five characters of it are shown.
#
# A credential of a kind no rule knows would still be printed, so a run is also masked when a piece of
# it (split at '-', '_' and '/', which names and paths use between words) is at least ECHO_PIECE_MIN
# characters, random-looking and given by the stack: letters and digits mixed (every vendor's token
# alphabet, base62, base64 and hex, mixes them), letters in no word's case pattern, or a long number.
# Names, paths, images and versions stay readable: their pieces are words, short, or content addresses
# that name public data (a Hugging Face snapshot's commit, huggingface_hub's `snapshots/<40-hex>`; an
# image's `sha256:` digest). Entropy alone cannot tell a 16-character word from a 16-character token
# (`cloud-tpu-images` scores as high as a random hex string), hence the alphabet test. A run the stack
# did not give (the program's own words: allowed values) is never masked by it, nor a name the
# program's catalogs publish (a Saxml servable class, `LmCloudSpmd175B32Test`, is a long mixed piece).
# The cost: another long mixed piece the stack gave is masked if a refusal echoes it, and an unknown
# kind's word-cased or short pieces are shown.
ECHO_WINDOW = 5
ECHO_PIECE_MIN = 16
ECHO_NUMBER_MIN = 20  # a project number is 12 digits
MASK = "***"
_ECHO_RUN = re.compile(r"[A-Za-z0-9+/=_\\-]+")  # (a backslash: an escape inside JSON text)
_ECHO_PIECE = re.compile(r"[A-Za-z0-9+=]+")
_CONTENT_ADDRESS = re.compile(r"(?i)(?<=snapshots/)[0-9a-f]{40}(?![0-9a-f])|(?<=sha256:)[0-9a-f]{64}(?![0-9a-f])")
_WORD_CASE = re.compile(r"[A-Z]?[a-z]+(?:[A-Z][a-z]+)*|[A-Z]+|[A-Z]+[a-z]+")


def random_looking(piece: str) -> bool:
    """Whether `piece` (letters, digits, '+' and '=') could be a token rather than a word or a number."""
    if len(piece) < ECHO_PIECE_MIN:
        return False
    letters = [c for c in piece if c.isalpha()]
    digits = sum(c.isdigit() for c in piece)
    if letters and digits:
        return True
    if digits:
        return digits >= ECHO_NUMBER_MIN
    return not _WORD_CASE.fullmatch("".join(letters))


def _suspect_pieces(judged: str) -> list[str]:
    return [p for p in _ECHO_PIECE.findall(judged) if random_looking(p)]


def given_strings(raw: Mapping[str, Any]) -> list[str]:
    """Every string a stack gave: its keys, and each value and mapping key below them."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, str):
            found.append(node)
        elif isinstance(node, Mapping):
            for key, inner in node.items():
                walk(str(key))
                walk(inner)
        elif isinstance(node, list):
            for inner in node:
                walk(inner)

    for key, value in raw.items():
        walk(key)
        walk(value)
    return found


def redact(message: str, given: Iterable[str], public: Iterable[str] = ()) -> str:
    """`message` with every run that shares `ECHO_WINDOW` characters with a credential the stack gave, or
    could be a secret the stack gave (see above), replaced by `MASK`; `public` are names the program's own
    catalogs publish (a servable class), never masked as random-looking."""
    given = [g for g in given if len(g) >= ECHO_WINDOW]
    if not given:
        return message
    hidden: set[str] = set()
    for text in given:
        hidden |= secret_windows(text)
    long_given = [g for g in given if len(g) >= ECHO_PIECE_MIN]
    # Content addresses are judged as blanks, where they stand in the whole message (`sha256:` ends a run),
    # and so is an address the stack gave in its place, wherever the message repeats it alone.
    blanked = _CONTENT_ADDRESS.sub(lambda m: "-" * len(m.group()), message)
    public_pieces = {m.group() for text in long_given for m in _CONTENT_ADDRESS.finditer(text)}
    public_pieces |= {piece for word in public for piece in _ECHO_PIECE.findall(word)}

    def shown(match: re.Match[str]) -> str:
        run = match.group()
        if hidden and not _windows(run).isdisjoint(hidden):
            return MASK
        pieces = [p for p in _suspect_pieces(blanked[match.start() : match.end()]) if p not in public_pieces]
        return MASK if any(piece in text for piece in pieces for text in long_given) else run

    return _ECHO_RUN.sub(shown, message)


# --- The settings ----------------------------------------------------------------------------------------


def _strings(value: Any, path: str) -> Iterator[tuple[str, str, bool]]:
    """(path, text, is_key) for every string in `value`: the values, and the mapping keys."""
    if isinstance(value, str):
        yield path, value, False
    elif isinstance(value, Mapping):
        for key, inner in value.items():
            if isinstance(key, str) and find(key):
                yield path, key, True  # the key itself is never shown, nor anything under it
                continue
            yield from _strings(inner, f"{path}.{key}")
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _strings(inner, f"{path}[{index}]")


def _structured(value: Any) -> Any:
    """A structured config value as a mapping or list: the engine hands them to programs as JSON text."""
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _problem(where: str, found: Finding) -> str:
    return f"{where} {found.phrase} in plain text, which git and every pod reading it would keep; {ALLOWED}"


def plain_credentials(
    raw: Mapping[str, Any], secret_keys: Iterable[str], secret_leaves: Iterable[str] | None = None
) -> list[str]:
    """One problem per plain setting that holds a credential: the key, what it holds, never the value.

    A key in `secret_keys` whose value is a string is a secret whole and is not read. Pulumi marks a
    key secret when a `secure:` value (or an ESC secret) sits anywhere inside it, so a structured one is
    read leaf by leaf like any other: its secrets are `[secret]` offline (settings/esc_environment.py)
    and `secret_leaves` (paths such as `tpu-slicing:serving.model.path`, or a whole key) at `pulumi up`,
    where the CLI hands them decrypted (settings/loader.py reads which they are from the stack file)."""
    secrets = set(secret_keys)
    leaves = set(secret_leaves or ())
    problems = []
    for key in sorted(raw):
        value = _structured(raw[key]) if key in secrets else raw[key]
        if key in leaves or (key in secrets and not isinstance(value, Mapping | list)):
            continue
        namespace = key.partition(":")[0] if ":" in key else "the project's"
        found_in_key = find(key)
        if found_in_key:
            problems.append(_problem(f"a config key of namespace {namespace} holds", found_in_key))
            continue
        for path, text, is_key in _strings(value, key):
            if not is_key and path in leaves:
                continue
            found = find(text)
            if found:
                problems.append(_problem(f"{path}: a key of it holds" if is_key else f"{path}: holds", found))
    return problems
