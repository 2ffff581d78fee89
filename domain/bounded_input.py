"""Reading a file the user hands a command, within bounds: one line of refusal, never a traceback,
never a hang, in bounded time and memory (issue 64 item 5).

Every reader of user files goes through here: stack files and opened ESC environments (settings/),
benchmark results, drift audit inputs, reservation snapshots and plan documents (plan/). What is
refused, each a class a hostile or broken file falls in:

- **not a regular file**: a FIFO would block the read forever, a device never ends; judged on the
  open descriptor (fstat), opened with O_NONBLOCK so that opening a FIFO does not wait for a writer;
- **oversized**: at most `max_bytes` are read, then the file is refused;
- **not UTF-8**: what the CLI and the Job write is UTF-8;
- **deeply nested**: Python's JSON and YAML readers recurse per level, and the interpreter stops
  them with a RecursionError near 1,000 levels; no real input of these kinds nests past
  `MAX_DEPTH`, so the depth is measured first, by a scan that does not recurse;
- **huge integers**: Python refuses to convert more than 4,300 digits (sys.int_info
  default_max_str_digits) with a ValueError; `MAX_DIGITS` is far beyond any figure these files hold;
- **YAML aliases**: a few hundred bytes of nested aliases expand to billions of nodes (the
  "billion laughs"); no stack file needs one, so any alias is refused before anything is built.

Plain Python; `yaml` for the event scan only.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml

MAX_DEPTH = 64
MAX_DIGITS = 64
DEFAULT_MAX_BYTES = 16 << 20

_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, as a refusal names it (from its st_mode)."""
    return _KINDS.get(stat.S_IFMT(mode), "not a file")


class InputError(ValueError):
    """A file or text refused: the message is one line, naming what is wrong and what is allowed."""


def read_bytes(path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The bytes of `path` if it is a regular file of at most `max_bytes`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise InputError(f"cannot be read: {err.strerror or err.__class__.__name__}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise InputError(f"is not a regular file ({file_kind(mode)}); allowed: a file")
    with os.fdopen(fd, "rb") as file:
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise InputError(f"is over {max_bytes} bytes; allowed: at most {max_bytes} bytes")
    return data


def read_text(path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """`read_bytes`, decoded as UTF-8."""
    data = read_bytes(path, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(
            f"is not UTF-8 (byte 0x{data[err.start]:02x} at offset {err.start}); allowed: UTF-8 text"
        ) from None


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON `text`, without recursing (strings skipped)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_DIGITS:
        raise InputError(f"holds an integer of {digits} digits; allowed: at most {MAX_DIGITS}")
    return int(text)


def load_json(text: str, **options: Any) -> Any:
    """`json.loads` of `text` once its depth and integers are within bounds; InputError otherwise,
    also for text that is not JSON (its first error, one line)."""
    deepest = json_depth(text)
    if deepest > MAX_DEPTH:
        raise InputError(f"nests {deepest} levels deep; allowed: at most {MAX_DEPTH}")
    parse_int = options.pop("parse_int", None)

    def bounded(number: str) -> Any:
        _bounded_int(number)
        return parse_int(number) if parse_int else int(number)

    try:
        return json.loads(text, parse_int=bounded, **options)
    except json.JSONDecodeError as err:
        raise InputError(f"is not JSON ({err.msg}, line {err.lineno} column {err.colno})") from None
    except InputError:
        raise
    except (ValueError, RecursionError) as err:
        raise InputError(f"is not JSON a reader can hold ({' '.join(str(err).split())[:120]})") from None


def check_yaml(text: str, loader: type[Any] = yaml.SafeLoader) -> None:
    """Refuse YAML with an alias or nested past `MAX_DEPTH`, from its event stream (nothing is built)."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.AliasEvent):
                line = event.start_mark.line + 1 if event.start_mark else 0
                raise InputError(
                    f"line {line}: a YAML alias (*{event.anchor}); allowed: values written out, no anchors or aliases"
                )
            if isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    line = event.start_mark.line + 1 if event.start_mark else 0
                    raise InputError(f"line {line}: nests deeper than {MAX_DEPTH} levels; allowed: at most {MAX_DEPTH}")
            elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
                depth -= 1
    except yaml.YAMLError:
        return  # not valid YAML: the reader's own parse says where, in its words
