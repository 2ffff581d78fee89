"""Prints the phase table `make test` collects (tools/ci/phase.sh lines: name, seconds, status).

Lines whose name starts with "pytest " are the suite's own breakdown (tests/conftest.py): summed
test durations per xdist group, which overlap in wall time, so they are listed apart and not
added to the total; nor are lines whose name starts with "beside:" (work run in the background,
beside the phases: the Go module downloads of tools/ci/prefetch.sh).
"""

from __future__ import annotations

import sys
from pathlib import Path


def _clock(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes:3d} min {rest:02d} s"


def _status(status: str) -> str:
    return "ok" if status == "0" else f"exit {status}"


def main(path: str) -> int:
    file = Path(path)
    if not file.exists():
        return 0
    phases: list[tuple[str, float, str]] = []
    groups: list[tuple[str, float, str]] = []
    beside: list[tuple[str, float, str]] = []
    for line in file.read_text().splitlines():
        name, wall, status = line.split("\t")
        kind = groups if name.startswith("pytest ") else beside if name.startswith("beside:") else phases
        kind.append((name, float(wall), status))
    width = max((len(n) for n, _, _ in phases + groups + beside), default=10)
    print()
    print("phase".ljust(width), "wall".rjust(11), "status", sep="  ")
    for name, seconds, status in phases:
        print(name.ljust(width), _clock(seconds), _status(status), sep="  ")
    print("total".ljust(width), _clock(sum(s for _, s, _ in phases)), sep="  ")
    for name, seconds, status in beside:
        print(name.ljust(width), _clock(seconds), _status(status), sep="  ")
    if groups:
        print("\nwithin pytest (summed test durations per worker group; groups run side by side):")
        for name, seconds, _ in groups:
            print(name.ljust(width), _clock(seconds), sep="  ")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
