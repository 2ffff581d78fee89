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

_GKE_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)-gke\.(\d+)$")


def version_key(version: str) -> tuple[int, int, int, int]:
    match = _GKE_VERSION.match(version)
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


def choose(offered: OfferedVersions, channel: str, prefix: str | None, floor: str | None) -> str:
    """The channel's default version when it fits, else the newest offered one that does.

    Fits: starts with `prefix` (when given) and is not below `floor` (when given). The channel's
    default comes first because it is the version GKE itself recommends for new clusters there.
    """

    def fits(version: str) -> bool:
        if not _GKE_VERSION.match(version):
            return False
        if prefix and not version.startswith(prefix):
            return False
        return floor is None or version_key(version) >= version_key(floor)

    candidates = [
        offered.release_channel_default_version.get(channel, ""),
        offered.release_channel_latest_version.get(channel, ""),
    ]
    for candidate in candidates:
        if candidate and fits(candidate):
            return candidate
    newest = sorted((v for v in offered.valid_master_versions if fits(v)), key=version_key, reverse=True)
    if newest:
        return newest[0]
    wanted = " and ".join(
        part for part in (f"starting with {prefix!r}" if prefix else "", f"at least {floor}" if floor else "") if part
    )
    raise NoOfferedVersionError(
        f"the {channel} channel offers no GKE version {wanted or 'at all'} here "
        f"(offered: {', '.join(sorted(offered.valid_master_versions, key=version_key)[-5:]) or 'none'}); "
        "set tpu-slicing:cluster.version to an offered version or change cluster.versionPrefix"
    )
