"""The GKE version a new cluster asks for: offered by the channel, not below the floor, and never an
error for a cluster that already exists."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.gke_versions import Choice, NoOfferedVersionError, OfferedVersions, check_pinned, choose, version_key
from plan.engine import engine_versions

versions = st.builds(
    lambda minor, patch, build: f"1.{minor}.{patch}-gke.{build}",
    st.integers(30, 38),
    st.integers(0, 9),
    st.integers(100, 9_999_999),
)


def offered(valid: list[str], default: str = "", latest: str = "") -> OfferedVersions:
    return OfferedVersions(valid, {"RAPID": latest} if latest else {}, {"RAPID": default} if default else {})


def from_channel(channel_versions: list[str], default: str, prefix: str | None) -> OfferedVersions:
    """What the data source reports for a RAPID channel listing these versions, newest first."""
    ordered = sorted(channel_versions, key=version_key, reverse=True)
    found = engine_versions({"versionPrefix": prefix}, {"RAPID": ordered}, {"RAPID": default})
    return OfferedVersions(
        found["validMasterVersions"], found["releaseChannelLatestVersion"], found["releaseChannelDefaultVersion"]
    )


def test_the_channel_default_comes_first_when_it_fits() -> None:
    found = offered(["1.36.2-gke.5", "1.36.0-gke.3712000"], default="1.36.0-gke.3712000", latest="1.36.2-gke.5")
    assert choose(found, "RAPID", None, "1.36.0-gke.3712000").required() == "1.36.0-gke.3712000"


def test_a_default_below_the_floor_gives_way_to_the_channels_newest() -> None:
    found = offered(["1.35.2-gke.1842000", "1.36.1-gke.7"], default="1.35.2-gke.1842000", latest="1.36.1-gke.7")
    assert choose(found, "RAPID", None, "1.36.0-gke.3712000").required() == "1.36.1-gke.7"


def test_a_version_outside_the_channel_is_never_chosen() -> None:
    # validMasterVersions spans every channel; before, the newest fit there was the fallback.
    found = offered(["1.37.0-gke.1", "1.35.2-gke.1842000"], default="1.35.2-gke.1842000")
    choice = choose(found, "RAPID", None, "1.36.0-gke.3712000")
    assert choice.problem is not None
    assert choice.version == "1.35.2-gke.1842000"


def test_nothing_offered_at_the_floor_falls_back_and_refuses_only_when_required() -> None:
    choice = choose(offered(["1.35.2-gke.1842000"], default="1.35.2-gke.1842000"), "RAPID", None, "1.36.0-gke.3712000")
    assert choice.version == "1.35.2-gke.1842000"  # what an existing cluster's preview sees: no error
    with pytest.raises(NoOfferedVersionError, match=r"at least 1\.36\.0-gke\.3712000.*tpu-slicing:cluster\.version"):
        choice.required()


def test_a_prefix_the_channel_dropped_names_the_prefix_and_what_is_offered() -> None:
    choice = choose(from_channel(["1.37.1-gke.2", "1.37.0-gke.9"], "1.37.0-gke.9", "1.36."), "RAPID", "1.36.", None)
    assert choice.problem is not None
    assert "starting with '1.36.'" in choice.problem and "1.37.0-gke.9" in choice.problem
    assert "cluster.versionPrefix" in choice.problem


@settings(deadline=None)
@given(
    st.lists(versions, min_size=1, max_size=12, unique=True),
    st.data(),
    versions,
    st.sampled_from([None, "1.36.", "1.3"]),
)
def test_the_choice_is_in_the_channel_and_fits_or_says_why(
    channel: list[str], data: st.DataObject, floor: str, prefix: str | None
) -> None:
    default = data.draw(st.sampled_from(channel))
    found = from_channel(channel, default, prefix)
    choice = choose(found, "RAPID", prefix, floor)
    assert choice.version in channel  # never outside the channel, even when falling back

    def fits(v: str) -> bool:
        return version_key(v) >= version_key(floor) and (not prefix or v.startswith(prefix))

    newest_with_prefix = max((v for v in channel if not prefix or v.startswith(prefix)), key=version_key, default="")
    if fits(default):
        assert choice.required() == default
    elif newest_with_prefix and fits(newest_with_prefix):
        assert choice.required() == newest_with_prefix
    else:
        assert choice.problem is not None
        assert choice.version == default


# --- a pinned cluster.version ------------------------------------------------------------------

OFFERED_HERE = OfferedVersions(
    ["1.36.2-gke.9000000", "1.36.0-gke.3712000", "1.35.2-gke.1842000", "1.34.6-gke.1000000"],
    {"RAPID": "1.36.2-gke.9000000", "REGULAR": "1.35.2-gke.1842000"},
    {"RAPID": "1.36.2-gke.9000000", "REGULAR": "1.35.2-gke.1842000"},
)


def test_a_pinned_version_the_location_offers_is_kept() -> None:
    assert check_pinned(OFFERED_HERE, "RAPID", "1.36.0-gke.3712000", "us-central1") == Choice("1.36.0-gke.3712000")


@pytest.mark.parametrize(
    ("pinned", "said"),
    [
        # A patch GKE dropped from the location: the same minor's offered builds are named.
        ("1.36.0-gke.1000000", "of its minor it offers 1.36.2-gke.9000000, 1.36.0-gke.3712000"),
        # A minor not released.
        ("1.38.0-gke.1000000", "it offers none of its minor"),
    ],
)
def test_a_pinned_version_the_location_does_not_offer_is_refused_at_create(pinned: str, said: str) -> None:
    choice = check_pinned(OFFERED_HERE, "RAPID", pinned, "us-central1")
    assert choice.version == pinned and choice.problem is not None
    assert f"cluster.version {pinned} is not offered in us-central1" in choice.problem and said in choice.problem
    with pytest.raises(NoOfferedVersionError):
        choice.required()


def test_a_pinned_version_of_a_faster_channel_is_refused() -> None:
    choice = check_pinned(OFFERED_HERE, "REGULAR", "1.36.2-gke.9000000", "us-central1")
    assert choice.problem is not None and "newer than the REGULAR channel's newest" in choice.problem
