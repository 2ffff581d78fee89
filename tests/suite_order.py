"""The order the suite hands its work to the two xdist workers: two planes, the second one late.

Every module that starts a control plane carries one of two xdist groups, each group on one
worker, one plane at a time within it (`--dist loadgroup`). With `--no-loadscope-reorder`
(the Makefile's test command) xdist queues the work units in collection order (pytest-xdist
3.8.0 `LoadScopeScheduling.schedule`, which otherwise sorts them by test count) and hands a
worker the next unit once two or fewer of its tests are pending (`_reschedule`). This plugin puts
the `control-plane` group first, the tests without a plane next and the `control-plane-late`
group last: one worker starts the first plane at once, the other works through the tests without
a plane and only then starts the second plane. `make unit` runs the tests without a Go build
beforehand, beside the Go builds (tools/ci/unit.sh), so the tests without a plane left here are the
engine's, a few minutes, and the two planes run side by side for most of the suite; what they must
not have beside them is the rest of the suite as well (docs/testing.md, CI phases and timings).
"""

from __future__ import annotations

import pytest

PLANE_GROUP = "control-plane"
LATE_PLANE_GROUP = "control-plane-late"
PLANE_GROUPS = frozenset({PLANE_GROUP, LATE_PLANE_GROUP})
_RANK = {PLANE_GROUP: 0, LATE_PLANE_GROUP: 2}


def group_of(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return None
    return str(mark.args[0] if mark.args else mark.kwargs.get("name"))


def rank(group: str | None) -> int:
    """0 for the first plane, 2 for the late plane, 1 for everything else."""
    return _RANK.get(group or "", 1)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A stable sort: each module's tests keep their order, so module fixtures are set up once.
    items[:] = sorted(items, key=lambda item: rank(group_of(item)))
