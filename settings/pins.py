"""What "pinned" means for an image reference or a Helm chart version: one rule, standard library only.

Shared by the settings model (`versions.*`, checked before anything is registered) and the policy pack
(`policy/guardrails.py`, pinned-images, which runs in its own virtualenv with no pydantic and imports
this module from the repository), so a reference the settings accept the pack never refuses.

An image is pinned when it names one build:

* a digest `@sha256:<64 hex>` always does (with or without a tag; the runtime pulls the digest);
* a tag does when it carries a full `x.y.z` version (`v0.26.0`, `jax0.8.1-rev1`, `jax-0.5.3`,
  `v0.8.0-200`), a calendar date (`20260101`, `2026-01-01`) or a full 40-hex commit: publishers cut
  those once per build. Every default in `settings/model.py` and every committed stack is of this kind.

A tag without one of those names a line that is re-pushed: a channel (`latest`, `main`, `nightly*`,
`stable`, ...; a channel word stays a channel even with a date after it, `nightly-20260101`), a major
line (`v1`, `3`) or a major.minor line (`3.12-slim`: Docker Hub's python image moves it at every
3.12.z release, see docker-library/official-images `library/python`).
"""

from __future__ import annotations

import re

# Channel words: a tag that is one of them, or starts with one and a separator, follows new builds.
CHANNEL_WORDS = frozenset(
    {"latest", "main", "master", "nightly", "stable", "edge", "dev", "develop", "head", "canary", "rolling"}
)
# Reference grammar (distribution/reference, reference.go): lowercase path components, an optional
# registry port, a tag of at most 128 characters, an optional digest.
_IMAGE = re.compile(
    r"^(?P<repo>[a-z0-9]+([._/-][a-z0-9]+)*(:[0-9]+(?=/))?(/[a-z0-9]+([._-][a-z0-9]+)*)*)"
    r"(:(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(@(?P<digest>[^@]*))?$"
)
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_FULL_VERSION = re.compile(r"(?<![0-9.])\d+\.\d+\.\d+(?![0-9])")
_DATE = re.compile(r"(?<![0-9])20\d{2}-?(0[1-9]|1[0-2])-?(0[1-9]|[12]\d|3[01])(?![0-9])")
_COMMIT = re.compile(r"(?<![0-9a-f])[0-9a-f]{40}(?![0-9a-f])")
_MAJOR_ONLY = re.compile(r"^v?\d+$")
# Semantic Versioning 2.0.0's grammar (semver.org), with the `v` the LWS chart tags carry.
SEMVER = re.compile(
    r"^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$"
)

IMAGE_ALLOWED = (
    "allowed: a pinned tag or digest: @sha256:<64 hex>, or a tag holding a full x.y.z version, a date or a "
    "40-hex commit (v0.26.0, jax-0.5.3, v0.8.0-200, 20260101); floating tags such as latest, main, "
    "nightly*, v1 or 3.12-slim are refused"
)
CHART_ALLOWED = "allowed: an exact semantic version such as 0.11.1 or v0.8.0 (no ranges, no 'latest', no 'v0')"


def _channel(tag: str) -> bool:
    first = re.split(r"[-_.]", tag.lower(), maxsplit=1)[0]
    return tag.lower() in CHANNEL_WORDS or first in CHANNEL_WORDS


def tag_problem(tag: str) -> str | None:
    """Why a tag alone does not name one build, or None when it does."""
    if not tag:
        return "an empty tag"
    if _channel(tag):
        return f"the moving tag '{tag}' (a channel that follows new builds)"
    if _FULL_VERSION.search(tag) or _DATE.search(tag) or _COMMIT.search(tag):
        return None
    if _MAJOR_ONLY.match(tag):
        return f"the moving tag '{tag}' (a major-version line)"
    return f"the moving tag '{tag}' (no full x.y.z version, date or commit: a line that is re-pushed)"


def image_problem(image: str) -> str | None:
    """Why an image reference is not pinned (a phrase to follow "has"), or None when it is."""
    reference = image.strip()
    match = _IMAGE.match(reference)
    if "@" in reference:
        digest = reference.split("@", 1)[1]
        if not DIGEST.match(digest):
            return f"malformed digest '{digest}' (expected sha256:<64 lowercase hex>)"
    if match is None and reference.endswith(":"):
        return "an empty tag"
    if match is None:
        return "no valid reference syntax ([registry[:port]/]lowercase/path[:tag][@sha256:<64 hex>])"
    if match.group("digest"):
        return None
    tag = match.group("tag")
    if tag is None:
        return "no tag (Kubernetes pulls :latest)"
    return tag_problem(tag)


def chart_problem(version: str) -> str | None:
    """Why a Helm chart version is not one exact release, or None when it is."""
    text = version.strip()
    if SEMVER.match(text):
        return None
    if _channel(text) or _MAJOR_ONLY.match(text):
        return f"the moving version '{version}'"
    return f"'{version}', not an exact semantic version"
