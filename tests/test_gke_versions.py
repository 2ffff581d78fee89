"""The GKE version a new cluster asks for: offered by the channel, not below the floor."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.gke_versions import NoOfferedVersionError, OfferedVersions, choose, version_key

versions = st.builds(
    lambda minor, patch, build: f"1.{minor}.{patch}-gke.{build}",
    st.integers(30, 38),
    st.integers(0, 9),
    st.integers(100, 9_999_999),
)


def offered(valid: list[str], default: str = "", latest: str = "") -> OfferedVersions:
    return OfferedVersions(valid, {"RAPID": latest} if latest else {}, {"RAPID": default} if default else {})


def test_the_channel_default_comes_first_when_it_fits() -> None:
    found = offered(["1.36.2-gke.5", "1.36.0-gke.3712000"], default="1.36.0-gke.3712000")
    assert choose(found, "RAPID", None, "1.36.0-gke.3712000") == "1.36.0-gke.3712000"


def test_a_default_below_the_floor_gives_way_to_the_newest_offered() -> None:
    found = offered(["1.35.2-gke.1842000", "1.36.1-gke.7", "1.36.0-gke.3712000"], default="1.35.2-gke.1842000")
    assert choose(found, "RAPID", None, "1.36.0-gke.3712000") == "1.36.1-gke.7"


def test_nothing_offered_at_the_floor_is_an_error_naming_the_key() -> None:
    with pytest.raises(NoOfferedVersionError, match=r"at least 1\.36\.0-gke\.3712000.*tpu-slicing:cluster\.version"):
        choose(offered(["1.35.2-gke.1842000"]), "RAPID", None, "1.36.0-gke.3712000")


@settings(deadline=None)
@given(st.lists(versions, min_size=1, max_size=12), versions, st.sampled_from([None, "1.36.", "1.3"]))
def test_the_choice_is_offered_fits_and_is_the_newest_fit(valid: list[str], floor: str, prefix: str | None) -> None:
    fits = [v for v in valid if version_key(v) >= version_key(floor) and (not prefix or v.startswith(prefix))]
    if not fits:
        with pytest.raises(NoOfferedVersionError):
            choose(offered(valid), "RAPID", prefix, floor)
        return
    chosen = choose(offered(valid), "RAPID", prefix, floor)
    assert chosen in valid
    assert version_key(chosen) >= version_key(floor)
    assert chosen == max(fits, key=version_key)
