"""The prediction in words and as a map: event details, the narrative, the cube map (no Kueue source).

Nothing here decides anything: it writes what domain/admission_replay.py predicted, for the plan's
preview (plan/render.py) and its pull-request impact (plan/impact.py). An LWS's groups (A1) are
told together where they did the same thing, and share one letter on the map.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from domain.admission_requests import Event, Prediction, Request

# The WorkloadPriorityClass values of the reference demo (§8): low, medium, high.
DEFAULT_PRIORITY_NAMES: Mapping[int, str] = {1000: "low", 2000: "medium", 3000: "high"}

_SYMBOLS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_OVERFLOW_SYMBOL = "+"
_FREE_SYMBOL = "."
_DOWN_SYMBOL = "#"
_CELLS_PER_GROUP = 4


def preempted_text(by: str, priority: int, own: int) -> str:
    """An eviction's detail (written when first read, see Event)."""
    return f"by {by} (priority {priority} > {own}); back to pending"


class Texts:
    """The chip ranges of cube masks, as event details and reasons write them; remembered per mask."""

    def __init__(self, cell_chips: int, cells: int) -> None:
        self.cell_chips, self.cells = cell_chips, cells
        self.span_text: dict[int, str] = {}  # cube << cells | mask -> "cube 3 [0-32)"
        self.range_text: dict[int, str] = {}  # cell mask -> "[0-32) [48-64)"

    def admitted(self, spans: tuple[tuple[int, int], ...], readmission: bool, victims: tuple[str, ...]) -> str:
        """An admission's detail (written when first read, see Event)."""
        detail = ("re-admitted; " if readmission else "") + self.where(spans)
        if victims:
            detail = f"preempts {', '.join(victims)}; {detail}"
        return detail

    def where(self, spans: Iterable[tuple[int, int]]) -> str:
        """Each cube with the chip ranges used there, adjacent pieces merged."""
        texts, width, parts = self.span_text, self.cells, []
        for cube, bits in spans:  # in cube order
            text = texts.get((cube << width) | bits)
            if text is None:
                text = texts[(cube << width) | bits] = f"cube {cube} {self.ranges(bits)}"
            parts.append(text)
        return ", ".join(parts)

    def ranges(self, bits: int) -> str:
        """'[0-32) [48-64)': the runs of set bits (cells) of one cube's mask, in chips."""
        text = self.range_text.get(bits)
        if text is None:
            cell, runs, offset, rest = self.cell_chips, [], 0, bits
            while rest:
                skip = (rest & -rest).bit_length() - 1  # free cells before the next run
                offset, rest = offset + skip, rest >> skip
                length = (~rest & (rest + 1)).bit_length() - 1  # the run's cells
                runs.append(f"[{offset * cell}-{(offset + length) * cell})")
                offset, rest = offset + length, rest >> length
            text = self.range_text[bits] = " ".join(runs)
        return text


def plural_s(count: int) -> str:
    """A noun's plural ending for `count`: "" for one, "s" otherwise."""
    return "" if count == 1 else "s"


def cube_span(cubes: Iterable[int]) -> str:
    """Name a set of cubes compactly: cube 3, cubes 0-1, cubes 0, 2-4."""
    ordered = sorted(set(cubes))
    if not ordered:
        return "no cube"
    runs: list[list[int]] = []
    for cube in ordered:
        if runs and runs[-1][1] == cube - 1:
            runs[-1][1] = cube
        else:
            runs.append([cube, cube])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
    return f"cube {text}" if len(ordered) == 1 else f"cubes {text}"


def _priority(value: int, names: Mapping[int, str]) -> str:
    return names.get(value, str(value))


def _label(request: Request, names: Mapping[int, str]) -> str:
    size = request.shape if request.slices == 1 else f"{request.slices} x {request.shape}"
    return f"{request.name} ({_priority(request.priority, names)}, {size})"


def _owner(request: Request) -> str:
    """The workload a request belongs to in the stack: its LWS, or itself."""
    return request.lws or request.name


def _workload_label(prediction: Prediction, owner: str, names: Mapping[int, str]) -> str:
    """A map legend's label: an LWS by how many of its groups hold cells."""
    members = prediction.members(owner)
    first = members[0]
    if not first.lws:
        return _label(first, names)
    running, total = prediction.groups(owner)
    count = f"{total}" if running == total else f"{running} of {total}"
    return f"{owner} ({_priority(first.priority, names)}, {count} group{plural_s(total)} x {first.shape})"


def _group_run(requests: Sequence[Request]) -> str:
    """Name requests for a sentence: 'a/1' alone, or 'a groups 0-2, 5' for several groups of one LWS."""
    if len(requests) == 1:
        return requests[0].name
    indexes = [int(r.name.rsplit("/", 1)[1]) for r in requests]
    runs: list[list[int]] = []
    for index in sorted(indexes):
        if runs and runs[-1][1] == index - 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
    return f"{requests[0].lws} groups {text}"


def _run_label(requests: Sequence[Request], names: Mapping[int, str]) -> str:
    """'x (high, 2x2x2)' for one request, 'x groups 0-3 (high, 2x2x2 each)' for several groups."""
    if len(requests) == 1:
        return _label(requests[0], names)
    first = requests[0]
    return f"{_group_run(requests)} ({_priority(first.priority, names)}, {first.shape} each)"


def symbols(prediction: Prediction) -> dict[str, str]:
    """The map letter of each workload holding cells (an LWS's groups share one), in queue order
    ('+' once letters run out)."""
    owners = list(dict.fromkeys(_owner(r) for r in prediction.requests if prediction.final[r.name] == "admitted"))
    return {name: _SYMBOLS[i] if i < len(_SYMBOLS) else _OVERFLOW_SYMBOL for i, name in enumerate(owners)}


def render_map(
    prediction: Prediction, cubes: int | None = None, priority_names: Mapping[int, str] = DEFAULT_PRIORITY_NAMES
) -> list[str]:
    """One line per cube (the first `cubes` of them; all by default), then a legend.

    Each character is one cell (`cell_chips` chips, a 2x2x1 on tpu7x), grouped by 4;
    a letter marks the workload holding it (one letter for all groups of an LWS) and '.'
    a free cell.
    """
    shown = prediction.cubes if cubes is None else max(0, min(cubes, prediction.cubes))
    cells = prediction.cube_chips // prediction.cell_chips
    letters = symbols(prediction)
    owner = {r.name: _owner(r) for r in prediction.requests}
    grid = [[_DOWN_SYMBOL if cube in prediction.down else _FREE_SYMBOL] * cells for cube in range(shown)]
    for placement in prediction.placements:
        if placement.cube >= shown:
            continue
        first = placement.offset_chips // prediction.cell_chips
        for cell in range(first, first + placement.chips // prediction.cell_chips):
            grid[placement.cube][cell] = letters[owner[placement.workload]]
    width = len(str(max(shown - 1, 0)))
    lines = []
    for index, row in enumerate(grid):
        groups = " ".join("".join(row[i : i + _CELLS_PER_GROUP]) for i in range(0, cells, _CELLS_PER_GROUP))
        lines.append(f"cube {index:>{width}} | {groups} |")
    if shown < prediction.cubes:
        lines.append(f"... {prediction.cubes - shown} more cube{plural_s(prediction.cubes - shown)} not shown")
    for name, letter in letters.items():
        lines.append(f"{letter} = {_workload_label(prediction, name, priority_names)}")
    lines.append(f"{_FREE_SYMBOL} = free; one cell = {prediction.cell_chips} chips, {cells} cells per cube")
    if prediction.down:
        lines.append(f"{_DOWN_SYMBOL} = a failed host, out of Kueue's reach ({cube_span(prediction.down)})")
    by_name = {r.name: r for r in prediction.requests}
    for run in _runs([by_name[n] for n in prediction.pending], lambda r: ""):
        lines.append(f"pending: {_run_label(run, priority_names)}")
    return lines


def _runs(requests: Sequence[Request], key: Callable[[Request], object]) -> list[list[Request]]:
    """Consecutive requests of one LWS with equal `key`, as runs (a request of no LWS is a run alone)."""
    runs: list[list[Request]] = []
    last: object = None
    for request in requests:
        mark = (request.lws, key(request)) if request.lws else None
        if runs and mark is not None and mark == last:
            runs[-1].append(request)
        else:
            runs.append([request])
        last = mark
    return runs


def narrative(prediction: Prediction, priority_names: Mapping[int, str] = DEFAULT_PRIORITY_NAMES) -> list[str]:
    """The events as sentences, then what stays pending and the final use of the block.

    Consecutive like events of one LWS's groups (admitted or re-admitted without preempting,
    waiting for the same reason) make one sentence; an admission that preempts is told alone.
    """
    by_name = {r.name: r for r in prediction.requests}
    preempted: set[str] = set()
    told: list[tuple[str, bool, Event]] = []  # (what kind of sentence, comes back?, event)
    for event in prediction.events:
        again = event.workload in preempted  # preempted before this event
        if event.action == "preempted":
            preempted.add(event.workload)
        elif event.action in ("evicted", "failed"):  # a cube failed under it (A9)
            preempted.add(event.workload)
            told.append((event.action, False, event))
        elif event.action == "waiting":
            told.append((f"wait: {event.detail}", again, event))
        else:  # an admission that preempts is told alone: it names its own victims
            told.append(("" if event.victims else "admitted", again, event))
    chunks: list[list[tuple[bool, Event]]] = []
    last: tuple[str, int, str, bool] | None = None
    for kind, again, event in told:
        request = by_name[event.workload]
        # One sentence per arrival: groups an autoscaler adds later are told apart from the first ones.
        mark = (request.lws, request.order, kind, again) if request.lws and kind else None
        if chunks and mark is not None and mark == last:
            chunks[-1].append((again, event))
        else:
            chunks.append([(again, event)])
        last = mark
    lines = []
    for chunk in chunks:
        (back, event), requests = chunk[0], [by_name[e.workload] for _, e in chunk]
        subject, one = _run_label(requests, priority_names), len(chunk) == 1
        cubes = cube_span(c for _, e in chunk for c in e.cubes)
        if event.action == "waiting":
            lines.append(f"{subject} wait{'s' if one else ''}: {event.detail}.")
        elif event.action in ("evicted", "failed"):
            lines.append(f"{subject} on {cubes}: {event.detail}.")
        elif event.victims:
            victims = ", ".join(f"{v} ({_priority(by_name[v].priority, priority_names)})" for v in event.victims)
            lines.append(f"{subject}{' comes back and' if back else ''} preempts {victims} to take {cubes}.")
        else:
            lines.append(f"{subject} {'is' if one else 'are'} {'re-' if back else ''}admitted into {cubes}.")
    for run in _runs([by_name[n] for n in prediction.pending], lambda r: prediction.reasons[r.name]):
        verb = "stays" if len(run) == 1 else "stay"
        lines.append(f"{_run_label(run, priority_names)} {verb} pending: {prediction.reasons[run[0].name]}.")
    total = prediction.cubes * prediction.cube_chips
    ended = f", {len(prediction.failed)} ended" if prediction.failed else ""
    lines.append(
        f"Final: {len(prediction.admitted)} admitted, {len(prediction.pending)} pending{ended}; "
        f"{prediction.chips_in_use} of {total} chips in use."
    )
    return lines
