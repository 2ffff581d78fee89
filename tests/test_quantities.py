"""contracts/quantities.py: binary amounts in the canonical form the API server stores."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts import quantities

POWERS = {"Gi": 0, "Ti": 1, "Pi": 2, "Ei": 3}


@pytest.mark.parametrize(
    ("gib", "written"),
    [(30720, "30Ti"), (13600, "13600Gi"), (850, "850Gi"), (1024 * 1024, "1Pi"), (0, "0"), (1, "1Gi")],
)
def test_known_amounts_are_written_as_the_api_server_writes_them(gib: int, written: str) -> None:
    assert quantities.binary(gib) == written


@given(st.integers(min_value=1, max_value=2**40))
def test_the_amount_is_kept_and_the_mantissa_is_whole_and_no_larger_suffix_fits(gib: int) -> None:
    match = re.fullmatch(r"([0-9]+)(Gi|Ti|Pi|Ei)", quantities.binary(gib))
    assert match, quantities.binary(gib)
    mantissa, suffix = int(match[1]), match[2]
    assert mantissa * 1024 ** POWERS[suffix] == gib
    assert suffix == "Ei" or mantissa % 1024 != 0


def test_a_negative_amount_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        quantities.binary(-1)
