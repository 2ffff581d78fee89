"""Which GKE version a new cluster asks for, from what the release channel offers. No Pulumi here.

GKE drops old patch versions from a channel over time, and creating a cluster with a version no
longer offered is refused, so an exact default goes stale. Like cluster-toolkit's gke-cluster
module (it reads `google_container_engine_versions` with a prefix), the program asks the
location's offered versions at plan time and keeps the TPU slice controller's floor as a check.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Matched on the whole string (`fullmatch`: `$` would let a final "\n" through) and ASCII digits only
# (`\d` alone matches any script's digits, which int() would read): settings/names.py says why.
_GKE_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)-gke\.(\d+)", re.ASCII)


def version_key(version: str) -> tuple[int, int, int, int]:
    match = _GKE_VERSION.fullmatch(version) if isinstance(version, str) else None
    if not match:
        raise ValueError(f"{version!r} is not a GKE version like 1.36.0-gke.3712000")
    major, minor, patch, build = (int(g) for g in match.groups())
    return (major, minor, patch, build)


@dataclass(frozen=True)
class OfferedVersions:
    """The fields of `gcp.container.get_engine_versions` this choice reads."""

    valid_master_versions: Sequence[str]
    release_channel_latest_version: Mapping[str, str]
    release_channel_default_version: Mapping[str, str]


class NoOfferedVersionError(ValueError):
    pass


@dataclass(frozen=True)
class Choice:
    """The version a new cluster asks for, and whether it is what the stack asked for.

    When the channel offers nothing that fits, `version` is the channel's default and `problem`
    says why: an existing cluster ignores the choice (it is kept in state and the channel upgrades
    the control plane itself), so the stack keeps previewing; only creating a cluster refuses
    (infra/cluster.py). cluster-toolkit's gke-cluster module falls back the same way
    (modules/scheduler/gke-cluster/main.tf).
    """

    version: str
    problem: str | None = None

    def required(self) -> str:
        if self.problem is not None:
            raise NoOfferedVersionError(self.problem)
        return self.version


def choose(offered: OfferedVersions, channel: str, prefix: str | None, floor: str | None) -> Choice:
    """The channel's default version when it fits, else the channel's newest one that does.

    Fits: starts with `prefix` (when given) and is not below `floor` (when given). The default
    comes first: it is the version GKE itself recommends for new clusters in the channel. Only
    the channel's own versions are candidates: the data source's `release_channel_latest_version`
    is the channel's newest valid version with the prefix, while `valid_master_versions` is the
    location's list across channels (google-beta/services/container/
    data_source_google_container_engine_versions.go, dataSourceGoogleContainerEngineVersionsRead),
    and a version outside the channel is refused at create.
    """

    def fits(version: str) -> bool:
        if not _GKE_VERSION.fullmatch(version):
            return False
        if prefix and not version.startswith(prefix):
            return False
        return floor is None or version_key(version) >= version_key(floor)

    default = offered.release_channel_default_version.get(channel, "")
    latest = offered.release_channel_latest_version.get(channel, "")
    for candidate in (default, latest):
        if candidate and fits(candidate):
            return Choice(candidate)
    wanted = " and ".join(
        part for part in (f"starting with {prefix!r}" if prefix else "", f"at least {floor}" if floor else "") if part
    )
    offers = ", ".join(sorted({v for v in (default, latest) if v})) or "none"
    problem = (
        f"the {channel} channel offers no GKE version {wanted or 'at all'} here for a new cluster "
        f"(its default and newest{' with that prefix' if prefix else ''}: {offers}); "
        "set tpu-slicing:cluster.version to a version the channel offers, or change cluster.versionPrefix"
    )
    return Choice(default or latest, problem)


def check_pinned(offered: OfferedVersions, channel: str, pinned: str, location: str) -> Choice:
    """A pinned `cluster.version` against what the location offers: the pin when GKE would create a
    cluster at it, else the pin with the reason it would not. A version the location does not list
    (a patch dropped from it, an unreleased minor) is refused at create, and so is one newer than the
    channel's newest (it belongs to a faster channel: GKE creates a cluster of a channel only at a
    version that channel offers; the data source reports each channel's newest, not its list,
    google-beta/services/container/data_source_google_container_engine_versions.go)."""
    offered_here = set(offered.valid_master_versions)
    newest = offered.release_channel_latest_version.get(channel, "")
    if pinned not in offered_here:
        minor = version_key(pinned)[:2]
        near = sorted(
            (v for v in offered_here if _GKE_VERSION.fullmatch(v) and version_key(v)[:2] == minor),
            key=version_key,
            reverse=True,
        )
        also = f"; of its minor it offers {', '.join(near[:3])}" if near else "; it offers none of its minor"
        return Choice(
            pinned,
            f"cluster.version {pinned} is not offered in {location}{also}; set tpu-slicing:cluster.version to an "
            f"offered version, or leave it unset for the {channel} channel's default",
        )
    if newest and version_key(pinned) > version_key(newest):
        return Choice(
            pinned,
            f"cluster.version {pinned} is newer than the {channel} channel's newest in {location}, {newest}: it "
            f"is another channel's, and GKE creates a {channel} cluster only at a version its channel offers; "
            f"set a version at most {newest}, or another cluster.releaseChannel",
        )
    return Choice(pinned)
