"""pricing.currency against ISO 4217 (domain/currencies.py), with pycountry's own API as the judge."""

from __future__ import annotations

import string

import pycountry
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from domain import currencies
from settings.pricing import PricingConfig
from tests.conftest import config_with, refusal

PRICED = {"chipHour": {"tpu7x": {"reserved": 3.25}}, "source": "an example"}


def test_the_list_read_from_the_file_is_the_one_the_package_serves() -> None:
    """The file is read without importing pycountry; its public API must give the same codes."""
    served = {currency.alpha_3 for currency in pycountry.currencies}
    assert currencies.iso_4217() == served - currencies.NOT_MONEY
    assert {"USD", "EUR", "JPY", "CHF", "INR"} <= currencies.iso_4217()
    assert served >= currencies.NOT_MONEY  # still ISO's codes, refused as prices


def test_every_iso_currency_prices_the_stack() -> None:
    config_with({"pricing": {"currency": "CHF", **PRICED}})
    for code in sorted(currencies.iso_4217()):  # the block alone: a whole stack each takes 40 ms
        assert PricingConfig.model_validate({"currency": code, **PRICED}).currency == code


@hypothesis_settings(max_examples=40)
@given(
    st.text(alphabet=string.ascii_uppercase, min_size=3, max_size=3).filter(lambda c: c not in currencies.iso_4217())
)
def test_three_capitals_that_are_no_currency_are_refused_naming_the_key_and_the_value(code: str) -> None:
    message = refusal({"pricing": {"currency": code, **PRICED}})
    assert "pricing.currency" in message and repr(code) in message and "ISO 4217" in message


def test_the_codes_that_name_no_money_and_other_shapes_are_refused() -> None:
    for code in ("XXX", "XTS", "usd", "US", "USDT", "€"):
        message = refusal({"pricing": {"currency": code, **PRICED}})
        assert "pricing.currency" in message, (code, message)
