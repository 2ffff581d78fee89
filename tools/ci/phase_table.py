"""Prints the phase table `make test` collects (tools/ci/phase.sh lines: name, seconds, status).

Lines whose name starts with "pytest " are the suite's own breakdown (tests/conftest.py): summed
test durations per xdist group, which overlap in wall time, so they are listed apart and not
added to the total.
"""

from __future__ import annotations

import sys
from pathlib import Path


def _clock(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes:3d} min {rest:02d} s"


def main(path: str) -> int:
    file = Path(path)
    if not file.exists():
        return 0
    phases: list[tuple[str, float, str]] = []
    groups: list[tuple[str, float, str]] = []
    for line in file.read_text().splitlines():
        name, wall, status = line.split("\t")
        (groups if name.startswith("pytest ") else phases).append((name, float(wall), status))
    width = max((len(n) for n, _, _ in phases + groups), default=10)
    print()
    print("phase".ljust(width), "wall".rjust(11), "status", sep="  ")
    for name, seconds, status in phases:
        print(name.ljust(width), _clock(seconds), "ok" if status == "0" else f"exit {status}", sep="  ")
    print("total".ljust(width), _clock(sum(s for _, s, _ in phases)), sep="  ")
    if groups:
        print("\nwithin pytest (summed test durations per worker group; groups run side by side):")
        for name, seconds, _ in groups:
            print(name.ljust(width), _clock(seconds), sep="  ")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
