"""Prints the phase table `make test` collects (tools/ci/phase.sh lines: name, seconds, status, start).

`make test` runs some phases side by side (the two Go builds, the virtualenvs and lint beside them),
so each phase is listed with its start, relative to the first, and the total is the clock's: from
the first phase's start to the last one's end. Lines without a start (an older phase.sh) are taken
as running one after the other, and their total is their sum.

Lines whose name starts with "pytest " are the suite's own breakdown (tests/conftest.py): summed
test durations per xdist group, which overlap in wall time, so they are listed apart and not
added to the total; nor are lines whose name starts with "beside:" (work run in the background,
beside the phases: the Go module downloads of tools/ci/prefetch.sh).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float
    status: str
    start: float | None  # seconds since the epoch; None on a line without one


def _clock(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes:3d} min {rest:02d} s"


def _status(status: str) -> str:
    return "ok" if status == "0" else f"exit {status}"


def _parse(line: str) -> Phase:
    name, wall, status, *start = line.split("\t")
    return Phase(name, float(wall), status, float(start[0]) if start else None)


def total(phases: list[Phase]) -> float:
    """The wall time the phases took together: first start to last end when every line has a start."""
    if not phases:
        return 0.0
    if any(p.start is None for p in phases):
        return sum(p.seconds for p in phases)
    first = min(p.start for p in phases if p.start is not None)
    return max(p.start + p.seconds for p in phases if p.start is not None) - first


def main(path: str) -> int:
    file = Path(path)
    if not file.exists():
        return 0
    rows = [_parse(line) for line in file.read_text().splitlines() if line.strip()]
    groups = [p for p in rows if p.name.startswith("pytest ")]
    beside = [p for p in rows if p.name.startswith("beside:")]
    phases = [p for p in rows if p not in groups and p not in beside]
    timed = all(p.start is not None for p in phases)
    first = min((p.start for p in rows if p.start is not None), default=0.0)
    width = max((len(p.name) for p in rows), default=10)
    print()
    print("phase".ljust(width), "wall".rjust(11), "started".rjust(13) if timed else "", "status", sep="  ")
    for p in phases + beside:
        start = f"+{_clock(p.start - first)}" if timed and p.start is not None else ""
        print(p.name.ljust(width), _clock(p.seconds), start.rjust(13) if timed else "", _status(p.status), sep="  ")
    label = "total (clock)" if timed else "total"
    print(label.ljust(width), _clock(total(phases)), sep="  ")
    if groups:
        print("\nwithin pytest (summed test durations per worker group; groups run side by side):")
        for p in groups:
            print(p.name.ljust(width), _clock(p.seconds), sep="  ")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
