"""The `gcp:` and `pulumi:` keys the engine and the default providers read, judged like the program's own.

settings/stack_file.py lets these namespaces through (`NAMESPACES`); the provider or the engine reads
them later, mid-`up`, and a bad value fails there, after resources were registered, or never (a label
GCP refuses on the first resource, an impersonated user account, default providers disabled that the
program relies on). settings/loader.py runs `problems` on the config as `pulumi up` hands it to the
program and as `make plan` reads it from the stack file, so both refuse alike and before anything.

Values arrive as the engine passes them: structured ones as JSON text. A key set with --secret is not
judged: its value is never echoed, and the plan cannot read it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from settings.refused import RefusedClass

# The packages whose default provider the program uses: every Google Cloud resource and read
# (infra/, observability/) and pulumi-command's local commands (k8s/inference_crds.py,
# k8s/slice_controller.py) pass no `provider=`; every Kubernetes object goes through the program's
# own provider (backends/platform.py `cluster_provider`). tests/test_provider_keys.py checks this on the plan.
DEFAULT_PROVIDERS = {
    "gcp": "every Google Cloud resource and read (infra/, observability/)",
    "command": "the local commands of k8s/inference_crds.py and k8s/slice_controller.py",
}

# GCP's label requirements (cloud.google.com/resource-manager/docs/labels-overview#requirements, and the
# API's own wording, e.g. bigtableadmin v2 Instance.labels): at most 64 labels a resource; keys 1-63
# characters matching [\p{Ll}\p{Lo}][\p{Ll}\p{Lo}\p{N}_-]{0,62}, values 0-63 matching
# [\p{Ll}\p{Lo}\p{N}_-]{0,63} ("international characters are allowed"); keys and values under 128 bytes.
LABELS_MAX = 64
LABEL_MAX = 63
LABEL_BYTES_MAX = 127
LABEL_ALLOWED = (
    "keys of 1-63 characters starting with a lowercase or international letter, values of 0-63 characters; "
    "both only lowercase or international letters, digits, '_' and '-' (GCP label requirements)"
)

# A service account's email: the account id is 6-30 characters matching [a-z]([-a-z0-9]*[a-z0-9])
# (IAM projects.serviceAccounts.create, `accountId`) at <project>.iam.gserviceaccount.com; Google's
# default accounts are <number>-compute@developer and <project>@appspot.
_PROJECT = r"[a-z][-a-z0-9]{4,28}[a-z0-9]"
SERVICE_ACCOUNT = re.compile(
    rf"[a-z][-a-z0-9]{{4,28}}[a-z0-9]@(?:[a-z0-9.-]+\.)?{_PROJECT}\.iam\.gserviceaccount\.com"
    rf"|[0-9]+-compute@developer\.gserviceaccount\.com|{_PROJECT}@appspot\.gserviceaccount\.com",
    flags=re.ASCII,
)
SERVICE_ACCOUNT_ALLOWED = (
    "a service account's email, ACCOUNT@PROJECT.iam.gserviceaccount.com (ACCOUNT 6-30 characters: lowercase "
    "letters, digits and '-'), or a default account (NUMBER-compute@developer.gserviceaccount.com, "
    "PROJECT@appspot.gserviceaccount.com)"
)


def _label_part(text: str, first: bool) -> bool:
    for index, char in enumerate(text):
        category = unicodedata.category(char)
        if category in ("Ll", "Lo") or ((index or not first) and (category.startswith("N") or char in "_-")):
            continue
        return False
    return True


def _label_problem(key: Any, value: Any) -> str | None:
    if not isinstance(key, str) or not key or len(key) > LABEL_MAX or len(key.encode()) > LABEL_BYTES_MAX:
        return f"key {key!r} is not 1-{LABEL_MAX} characters"
    if not _label_part(key, first=True):
        return f"key {key!r} has a character GCP does not allow in a label key"
    if isinstance(value, bool) or not isinstance(value, str | int):
        return f"{key}: {value!r} is not a label value (a string)"
    text = str(value)
    if len(text) > LABEL_MAX or len(text.encode()) > LABEL_BYTES_MAX:
        return f"{key}: value {text!r} is longer than {LABEL_MAX} characters"
    if not _label_part(text, first=False):
        return f"{key}: value {text!r} has a character GCP does not allow in a label value"
    return None


def default_labels(value: Any) -> list[str]:
    """gcp:defaultLabels: labels the provider puts on every resource that takes labels."""
    labels = value
    if not isinstance(labels, Mapping):
        return [f"gcp:defaultLabels: {labels!r} is not a mapping; allowed: a mapping of labels, {LABEL_ALLOWED}"]
    if len(labels) > LABELS_MAX:
        return [
            f"gcp:defaultLabels: {len(labels)} labels, over GCP's {LABELS_MAX} a resource; "
            f"allowed: at most {LABELS_MAX}, {LABEL_ALLOWED}"
        ]
    problems = [p for p in (_label_problem(k, v) for k, v in labels.items()) if p]
    return [f"gcp:defaultLabels: {p}; allowed: {LABEL_ALLOWED}" for p in problems]


def impersonate_service_account(value: Any) -> list[str]:
    """gcp:impersonateServiceAccount: the provider acts as this account; only a service account can be."""
    if isinstance(value, str) and SERVICE_ACCOUNT.fullmatch(value):
        return []
    return [f"gcp:impersonateServiceAccount: {value!r} is not a service account; allowed: {SERVICE_ACCOUNT_ALLOWED}"]


def disable_default_providers(value: Any) -> list[str]:
    """pulumi:disable-default-providers: a list of packages, `*` for all (pulumi/pulumi#8829)."""
    packages = value
    allowed = (
        "packages the program reaches only through its own providers (kubernetes), or leave the key out; "
        f"the program uses the default providers of {', '.join(sorted(DEFAULT_PROVIDERS))}"
    )
    if not isinstance(packages, list) or not all(isinstance(p, str) for p in packages):
        return [f"pulumi:disable-default-providers: {packages!r} is not a list of package names; allowed: {allowed}"]
    used = sorted(DEFAULT_PROVIDERS) if "*" in packages else [p for p in packages if p in DEFAULT_PROVIDERS]
    return [
        f"pulumi:disable-default-providers: {packages!r} disables the default {name} provider, needed by "
        f"{DEFAULT_PROVIDERS[name]}: `pulumi up` would fail at the first of them; allowed: {allowed}"
        for name in used
    ]


CHECKS: dict[str, Callable[[Any], list[str]]] = {
    "gcp:defaultLabels": default_labels,
    "gcp:impersonateServiceAccount": impersonate_service_account,
    "pulumi:disable-default-providers": disable_default_providers,
}


def problems(raw: Mapping[str, Any], secret_keys: Iterable[str] = ()) -> list[str]:
    """Every problem of the provider and engine keys in `raw` (full keys; structured values decoded
    from the JSON text the engine passes, as settings/loader.py decodes them once for every key)."""
    secrets = set(secret_keys)
    return [p for key, check in CHECKS.items() if key in raw and key not in secrets for p in check(raw[key])]


REFUSED: tuple[RefusedClass, ...] = (
    RefusedClass(
        "default label GCP refuses",
        default_labels,
        {"gcp:defaultLabels": {"Team": "serving"}},
        "gcp:defaultLabels",
        "starting with a lowercase or international letter",
    ),
    RefusedClass(
        "more default labels than a resource takes",
        default_labels,
        {"gcp:defaultLabels": {f"label-{i}": "x" for i in range(LABELS_MAX + 1)}},
        "gcp:defaultLabels",
        f"at most {LABELS_MAX}",
    ),
    RefusedClass(
        "impersonating an account that is not a service account",
        impersonate_service_account,
        {"gcp:impersonateServiceAccount": "alice@example.com"},
        "gcp:impersonateServiceAccount",
        "ACCOUNT@PROJECT.iam.gserviceaccount.com",
    ),
    RefusedClass(
        "default provider the program uses disabled",
        disable_default_providers,
        {"pulumi:disable-default-providers": ["gcp"]},
        "pulumi:disable-default-providers",
        "packages the program reaches only through its own providers (kubernetes)",
    ),
)
