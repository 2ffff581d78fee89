"""The endpoint picker's configuration is in the order its loader builds plugins."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k8s import epp_config
from k8s.epp_config import Plugin
from k8s.router import PD_PLUGIN_SET, PD_PLUGINS, PD_PROFILES


def test_the_generated_config_builds_every_plugin_after_those_it_names() -> None:
    assert epp_config.load_order_problems(PD_PLUGINS) == []
    types = [p["type"] for p in PD_PLUGINS["plugins"]]
    assert types.index("prefix-based-pd-decider") < types.index("disagg-profile-handler")


def test_the_order_before_the_fix_is_refused_as_the_loader_refuses_it() -> None:
    # Stop 9 listed the handler before its decider; v0.9.0 exits with "plugin not found".
    written_order = {**PD_PLUGINS, "plugins": [p.body() for p in PD_PLUGIN_SET]}
    assert epp_config.load_order_problems(written_order) == [
        "disagg-profile-handler: prefix-based-pd-decider plugin not found (declared later)"
    ]


def test_a_profile_naming_an_undeclared_plugin_is_refused_before_registration() -> None:
    with pytest.raises(ValueError, match="undeclared plugin 'nope'"):
        epp_config.config(PD_PLUGIN_SET, [{"name": "x", "plugins": [{"pluginRef": "nope"}]}])


def test_plugins_naming_each_other_are_refused() -> None:
    with pytest.raises(ValueError, match="cycle"):
        epp_config.ordered([Plugin("a", {"next": "b"}), Plugin("b", {"next": "a"})])


@settings(deadline=None)
@given(st.permutations(list(PD_PLUGIN_SET)))
def test_any_written_order_becomes_a_loadable_one(order: list[Plugin]) -> None:
    document = epp_config.config(order, PD_PROFILES)
    assert epp_config.load_order_problems(document) == []
    assert sorted(p["type"] for p in document["plugins"]) == sorted(p.type for p in PD_PLUGIN_SET)
