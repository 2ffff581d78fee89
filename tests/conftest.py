"""Shared fixtures: one mock engine (plan/engine.py) runs the real program for every test."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from plan import engine
from settings.loader import ConfigError, load
from settings.model import StackConfig

DevRunner = Callable[..., engine.PlanResult]

pytest_plugins = ["tests.suite_timing", "tests.suite_order"]

# The harness modules that run what `make engine` and `make controlplane` build (the CLI, the
# provider, Helm, the chart registry, the control plane, the controllers, the NetworkPolicy
# matcher). A test module that uses any of them, or starts a plane, is marked `go_built`; `make
# check` runs the others.
GO_HARNESSES = frozenset(
    f"tests.{name}"
    for name in (
        "engine",
        "controllers",
        "charts",
        "chart_mirror",
        "installed_controllers",
        "operations",
        "network_judge",
    )
)


def _uses_go_built(module: object) -> bool:
    """Whether a test module holds one of the harness modules, or anything defined in one.

    tests/control_plane.py is left out: its pure helpers (free_port, load_stack, ApiError) serve
    tests that start nothing; a module that starts a plane carries the plane's xdist group.
    """
    for value in vars(module).values():
        origin = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", None)
        if origin in GO_HARNESSES:
            return True
    return False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Imported here: imported with this module, the plugin would be loaded before pytest could
    # rewrite its asserts (PytestAssertRewriteWarning).
    from tests.suite_order import PLANE_GROUPS, group_of

    verdicts: dict[object, bool] = {}
    for item in items:
        module = getattr(item, "module", None)
        if module not in verdicts:
            verdicts[module] = module is not None and _uses_go_built(module)
        if verdicts[module] or group_of(item) in PLANE_GROUPS:
            item.add_marker(pytest.mark.go_built)


def stack_raw(stack: str) -> tuple[dict[str, Any], list[str]]:
    """A committed stack file's config and secret keys, as the engine hands them to the program."""
    return engine.read_stack_config(engine.stack_file(stack))


def dev_raw() -> tuple[dict[str, Any], list[str]]:
    return stack_raw("dev")


def merged(overrides: dict[str, Any], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """`base` (the dev stack's config when None) with `overrides` deep-merged in (None deletes a key)."""
    raw = copy.deepcopy(base if base is not None else dev_raw()[0])
    for key, value in overrides.items():
        full = key if ":" in key else f"tpu-slicing:{key}"
        if value is None:
            raw.pop(full, None)
            continue
        current = raw.get(full)
        if isinstance(value, dict) and isinstance(current, str) and current.startswith("{"):
            raw[full] = json.dumps(_deep_merge(json.loads(current), value))
        else:
            raw[full] = value if isinstance(value, str) else json.dumps(value)
    return raw


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def config_with(overrides: dict[str, Any] | None = None, stack: str = "dev") -> StackConfig:
    """The committed `Pulumi.<stack>.yaml` with `overrides` merged in, loaded as the plan loads it."""
    raw, secrets = stack_raw(stack)
    raw = merged(overrides or {}, raw)
    return load(raw, stack=stack, project=raw.get("gcp:project"), secret_keys=secrets)


def refusal(overrides: dict[str, Any] | None = None, stack: str = "dev") -> str:
    """The loader's refusal of `config_with(overrides, stack)`; fails the test when it loads."""
    with pytest.raises(ConfigError) as caught:
        config_with(overrides, stack)
    return str(caught.value)


@pytest.fixture(scope="session")
def dev_plan() -> engine.PlanResult:
    """The dev stack as committed, in apply mode."""
    return engine.run_stack("dev")


@pytest.fixture(scope="session")
def dev_preview() -> engine.PlanResult:
    """The dev stack as a brand-new stack in `pulumi preview`: cloud-computed values unknown."""
    return engine.run_stack("dev", preview=True)


@pytest.fixture()
def run_dev() -> DevRunner:
    """Run the program with the dev config plus overrides."""

    def runner(
        overrides: dict[str, Any] | None = None, *, preview: bool = False, secret_keys: list[str] | None = None
    ) -> engine.PlanResult:
        raw, secrets = dev_raw()
        return engine.run(
            merged(overrides or {}, raw),
            stack="dev",
            secret_keys=[*secrets, *(secret_keys or [])],
            preview=preview,
        )

    return runner
