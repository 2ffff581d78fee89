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

from settings import names
from settings.names import NameRule, character_problem

# Channel words: a tag that is one of them, or starts with one and a separator, follows new builds.
CHANNEL_WORDS = frozenset(
    {"latest", "main", "master", "nightly", "stable", "edge", "dev", "develop", "head", "canary", "rolling"}
)
# Reference grammar (distribution/reference, reference.go): lowercase path components, an optional
# registry port, a tag of at most 128 characters, an optional digest. Every rule here is ASCII (`\d` is
# 0-9 only) and matched on the whole string (settings/names.py).
_IMAGE = NameRule(
    r"(?P<repo>[a-z0-9]+([._/-][a-z0-9]+)*(:[0-9]+(?=/))?(/[a-z0-9]+([._-][a-z0-9]+)*)*)"
    r"(:(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(@(?P<digest>[^@]*))?",
    "[registry[:port]/]lowercase/path[:tag][@sha256:<64 hex>]",
)
DIGEST = NameRule(r"sha256:[0-9a-f]{64}", "sha256:<64 lowercase hex>")
_FULL_VERSION = re.compile(r"(?<![0-9.])\d+\.\d+\.\d+(?![0-9])", re.ASCII)
_DATE = re.compile(r"(?<![0-9])20\d{2}-?(0[1-9]|1[0-2])-?(0[1-9]|[12]\d|3[01])(?![0-9])", re.ASCII)
_COMMIT = re.compile(r"(?<![0-9a-f])[0-9a-f]{40}(?![0-9a-f])")
_MAJOR_ONLY = NameRule(r"v?\d+", "a major version")
# A version after a base-OS word is the OS's (ubuntu-22.04.4, alpine3.20.1), not the image's own build:
# the publisher re-pushes that tag at every build on the same base.
_OS_VERSION = re.compile(
    r"(?<![A-Za-z])(ubuntu|debian|alpine|centos|rocky|rockylinux|ubi|almalinux|amazonlinux|bookworm|bullseye|trixie|"
    r"jammy|noble|focal)[-_.]?\d+(\.\d+)*",
    re.IGNORECASE | re.ASCII,
)
# Tokens that mark a moving build even after a version (v0.26.0-nightly, 1.2.3-SNAPSHOT).
_CHANNEL_SUFFIXES = CHANNEL_WORDS | {"snapshot", "unstable", "preview-latest"}
# Semantic Versioning 2.0.0's grammar (semver.org), with the `v` the LWS chart tags carry.
SEMVER = NameRule(
    r"v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?",
    "an exact semantic version",
)

IMAGE_ALLOWED = (
    "allowed: a pinned tag or digest: @sha256:<64 hex>, or a tag holding a full x.y.z version, a date or a "
    "40-hex commit (v0.26.0, jax-0.5.3, v0.8.0-200, 20260101); floating tags such as latest, main, "
    "nightly*, v1, 3.12-slim, a version followed by a channel word (v1.2.3-nightly, -dev, -SNAPSHOT) or a "
    "base OS's version alone (ubuntu-22.04.4) are refused; no whitespace or control characters"
)
CHART_ALLOWED = "allowed: an exact semantic version such as 0.11.1 or v0.8.0 (no ranges, no 'latest', no 'v0')"


def _channel(tag: str) -> bool:
    first = re.split(r"[-_.]", tag.lower(), maxsplit=1)[0]
    return tag.lower() in CHANNEL_WORDS or first in CHANNEL_WORDS


def _channel_suffix(tag: str) -> str | None:
    """A channel word anywhere after the first token (v0.26.0-nightly), or None."""
    tokens = re.split(r"[-_.+]", tag.lower())[1:]
    return next((token for token in tokens if token in _CHANNEL_SUFFIXES), None)


def _version_problem(tag: str) -> str | None:
    """Why a tag that is no channel still names no single build, or None."""
    suffix = _channel_suffix(tag)
    if suffix:
        return f"the channel word '{suffix}' after the version: a build that is re-pushed"
    own = _OS_VERSION.sub("", tag)  # what is left once the base OS's version is taken out
    if _FULL_VERSION.search(own) or _DATE.search(own) or _COMMIT.search(own):
        return None
    if own != tag:
        return "its only version is the base OS's, not the image's own build"
    if _MAJOR_ONLY.matches(tag):
        return "a major-version line"
    return "no full x.y.z version, date or commit: a line that is re-pushed"


def tag_problem(tag: str) -> str | None:
    """Why a tag alone does not name one build, or None when it does."""
    if not tag:
        return "an empty tag"
    if _channel(tag):
        return f"the moving tag '{tag}' (a channel that follows new builds)"
    why = _version_problem(tag)
    return f"the moving tag '{tag}' ({why})" if why else None


def _characters_problem(image: str) -> str | None:
    # The API server refuses a Pod whose image has surrounding whitespace (k8s.io/kubernetes
    # pkg/apis/core/validation/validation.go validateContainerCommon: "must not have leading or trailing
    # whitespace"); inside a reference, whitespace and control characters break the grammar below.
    if image != image.strip():
        return "leading or trailing whitespace (the API server refuses such a Pod)"
    bad = next((c for c in image if c.isspace()), None)
    if bad is not None:
        return f"the character {names.codepoint(bad)} inside it (the API server refuses such a Pod)"
    characters = character_problem(image, space=False)
    return f"{characters} (the API server refuses such a Pod)" if characters else None


def image_problem(image: str) -> str | None:
    """Why an image reference is not pinned (a phrase to follow "has"), or None when it is."""
    characters = _characters_problem(image)
    if characters:
        return characters
    match = _IMAGE.match(image)
    if "@" in image:
        digest = image.split("@", 1)[1]
        if not DIGEST.matches(digest):
            return f"malformed digest '{digest}' (expected sha256:<64 lowercase hex>)"
    if match is None:
        return (
            "an empty tag"
            if image.endswith(":")
            else "no valid reference syntax ([registry[:port]/]lowercase/path[:tag][@sha256:<64 hex>])"
        )
    if match.group("digest"):
        return None
    tag = match.group("tag")
    return "no tag (Kubernetes pulls :latest)" if tag is None else tag_problem(tag)


def chart_problem(version: str) -> str | None:
    """Why a Helm chart version is not one exact release, or None when it is."""
    if SEMVER.matches(version):
        return None
    if _channel(version.strip()) or _MAJOR_ONLY.matches(version.strip()):
        return f"the moving version {version!r}"
    return f"{version!r}, not an exact semantic version"
