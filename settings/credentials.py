"""Credentials written into ordinary settings: found by their shape, refused before anything runs.

A plain (non-secret) value of a stack file is committed to git and flows into pod arguments, labels
and Job environments, where anyone who can read the namespace reads it. Each pattern is the
published shape of one credential, so an ordinary value (a model name, a path) never matches:

* Hugging Face user access tokens start with `hf_` (huggingface.co/docs/hub/security-tokens);
* Google OAuth 2.0 access tokens start with `ya29.` and API keys with `AIza`
  (developers.google.com/identity/protocols/oauth2, cloud.google.com/docs/authentication/api-keys);
* a service-account key is JSON with `"type": "service_account"` and a PEM private key
  (cloud.google.com/iam/docs/keys-create-delete);
* a kubeconfig with a token, client key or password (kubernetes.io/docs/concepts/configuration/
  organize-cluster-access-kubeconfig).

Provider credentials by key (`gcp:credentials`) are settings/loader.py's, and keys of namespaces the
program never reads (`kubernetes:kubeconfig`) are refused by settings/stack_file.py before this runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a Hugging Face token", re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{20,}")),
    ("a Google OAuth access token", re.compile(r"(?<![A-Za-z0-9])ya29\.[A-Za-z0-9_-]{20,}")),
    ("a Google API key", re.compile(r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{35}")),
    ("a private key", re.compile(r"-----BEGIN ([A-Z]+ )?PRIVATE KEY-----")),
    ("a service-account key", re.compile(r"\"type\"\s*:\s*\"service_account\"")),
    ("a kubeconfig credential", re.compile(r"(?m)^\s*(token|client-key-data|password)\s*:\s*\S")),
)
ALLOWED = "allowed: a Pulumi secret (`pulumi config set --secret`) or a reference the workload resolves itself"


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, inner in value.items():
            yield from _strings(inner, f"{path}.{key}")
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _strings(inner, f"{path}[{index}]")


def kind_of(text: str) -> str | None:
    """Which credential `text` holds (a phrase), or None."""
    return next((kind for kind, pattern in PATTERNS if pattern.search(text)), None)


def plain_credentials(raw: Mapping[str, Any], secret_keys: Iterable[str]) -> list[str]:
    """One problem per plain setting that holds a credential: the key, what it holds, never the value."""
    secrets = set(secret_keys)
    problems = []
    for key in sorted(raw):
        if key in secrets:
            continue
        for path, text in _strings(raw[key], key):
            kind = kind_of(text)
            if kind:
                problems.append(
                    f"{path}: holds {kind} in plain text, which git and every pod reading it would keep; {ALLOWED}"
                )
    return problems
