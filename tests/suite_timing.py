"""Where the suite's time goes: summed test durations per xdist group and per test module.

Registered by tests/conftest.py. `make test` runs pytest with `--dist loadgroup`: every module that
starts a control plane is in one of two groups, each on one worker (tests/suite_order.py): one
worker runs the first plane group, the other everything without a plane and then the late plane
group, so the suite's wall time is the larger of those two sums. The terminal
summary lists the groups and the slowest modules; when $TPU_SLICING_PHASES names a file (`make
test`, tools/ci/phase.sh), the group sums are appended to it for the closing phase table. Durations
are pytest's own (setup + call + teardown, from time.perf_counter), for reading, never asserted on.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Generator

import pytest

UNGROUPED = "(no group)"
GROUP_PROPERTY = "xdist_group"


class SuiteTiming:
    def __init__(self, selection: str = "") -> None:
        # `make unit` runs the suite in two parts, `-m "not go_built"` and `-m go_built`
        # (tools/ci/unit.sh): each part's lines in the phase table name it.
        self.suffix = f" [{selection}]" if selection else ""
        self.by_group: dict[str, float] = defaultdict(float)
        self.by_module: dict[str, float] = defaultdict(float)

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Under xdist the controller sees every worker's reports, with the group that
        # pytest_runtest_makereport below put in their user properties.
        group = dict(report.user_properties).get(GROUP_PROPERTY, UNGROUPED)
        self.by_group[str(group)] += report.duration
        self.by_module[report.nodeid.split("::", 1)[0]] += report.duration

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.by_group:
            return
        write = terminalreporter.write_line
        terminalreporter.section("time by group and module (summed durations)")
        for group, seconds in sorted(self.by_group.items(), key=lambda item: -item[1]):
            write(f"{seconds:9.1f} s  group {group}")
        for module, seconds in sorted(self.by_module.items(), key=lambda item: -item[1])[:15]:
            write(f"{seconds:9.1f} s  {module}")
        phases = os.environ.get("TPU_SLICING_PHASES")
        if phases:
            with open(phases, "a", encoding="utf-8") as out:
                for group, seconds in sorted(self.by_group.items()):
                    out.write(f"pytest {group}{self.suffix}\t{seconds:.3f}\t0\n")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    mark = item.get_closest_marker("xdist_group")
    if mark is not None:
        report.user_properties.append((GROUP_PROPERTY, mark.args[0] if mark.args else mark.kwargs.get("name")))
    return report


def pytest_configure(config: pytest.Config) -> None:
    # Only the process that reports: the controller, or a run without xdist (not its workers).
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(SuiteTiming(config.option.markexpr or ""), "suite-timing")
