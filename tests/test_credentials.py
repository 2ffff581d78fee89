"""Credentials in ordinary settings are found wherever they are pasted, and never echoed."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plan import engine
from settings import credentials
from settings.loader import ConfigError
from tests.conftest import config_with

TOKEN = "hf_" + "a1B2" * 9


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"serving": {"model": {"name": f"org/{TOKEN}"}}}, "tpu-slicing:serving.model.name"),
        ({"serving": {"gateway": {"name": TOKEN}}}, "tpu-slicing:serving.gateway.name"),
        ({"namePrefix": TOKEN}, "tpu-slicing:namePrefix"),
        ({"observability": {"alerts": {"notificationChannels": [TOKEN]}}}, "notificationChannels[0]"),
    ],
)
def test_a_token_is_refused_where_it_is_pasted_and_not_echoed(overrides: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config_with(overrides)
    message = str(caught.value)
    assert key in message and "Hugging Face token" in message, message
    assert TOKEN not in message  # refused alone, before any rule that would show the value


@given(st.from_regex(r"[a-z0-9./-]{0,80}", fullmatch=True))
def test_model_names_and_paths_are_no_credential(text: str) -> None:
    # The alphabet of model names, bucket paths and DNS names: no pattern may fire on it.
    assert credentials.kind_of(text) is None


def test_the_committed_stacks_hold_no_credential() -> None:
    for stack in ("dev", "dev-b", "saxml-v5e", "jetstream-v5e"):
        raw, secrets = engine.read_stack_config(engine.stack_file(stack))
        assert credentials.plain_credentials(raw, secrets) == []
