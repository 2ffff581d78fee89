"""One rule for names and identifiers, and the characters a free-form string may hold: standard library only.

Shared by the settings and the policy pack (policy/guardrails.py imports it from the repository, in its
own virtualenv without pydantic), so both judge a name alike.

Whole strings. Python's `re.match(r"...$", s)` accepts `s` with a final "\\n": `$` also matches just
before a trailing newline. And without `re.ASCII`, `\\d` and `\\w` match any script's digits and letters
("١", "１"), which `int()` then reads as numbers. A `NameRule` is compiled with `re.ASCII` and matched with
`fullmatch`; a pattern outside one is written the same way (`re.fullmatch`, or `\\Z`). pydantic's
`Field(pattern=...)` runs in pydantic-core's Rust regex, whose `$` matches only at the end of the text
(a trailing "\\n" is refused: tests/test_names.py holds it to that) but whose `\\d` is Unicode, so those
patterns spell `[0-9]`.

Visible characters. Every string of the stack configuration is refused when it holds a character a
reader cannot see or cannot tell from another (`character_problem`): a control character (Unicode
category Cc: NUL, TAB, CR, LF, ESC, DEL, C1), a format character (Cf: zero-width space U+200B, joiners,
bidirectional controls, the byte-order mark U+FEFF), a surrogate or private-use code point (Cs, Co), a
line or paragraph separator (Zl, Zp), a space other than the ASCII space (Zs: U+00A0, U+2003, U+3000,
...), or a compatibility character that NFKC normalization changes (fullwidth `ｄｅｖ`, ligatures such as
`ﬁ`, superscripts, the micro sign). Each looks like nothing or like another name, and would reach
Google Cloud, Kubernetes or a model server as a different string than the one the reader sees. The
ASCII space is left to each field's own rule (a Cloud Storage object name may hold one; a DNS label
may not).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from typing import Any, NamedTuple

_KINDS = {
    "Cc": "a control character",
    "Cf": "an invisible format character",
    "Cs": "a surrogate code point",
    "Co": "a private-use character",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
    "Zs": "a space other than the ASCII space",
}
TEXT_ALLOWED = (
    "allowed: visible characters only: no control characters (U+0000-U+001F, U+007F-U+009F), no invisible "
    "format characters (U+200B, U+FEFF, ...), no space but the ASCII space U+0020, no "
    "compatibility forms that NFKC normalization changes (fullwidth letters such as U+FF41, ligatures)"
)


class NameRule:
    """A name or identifier grammar, matched on the whole string with ASCII classes."""

    __slots__ = ("allowed", "pattern", "regex")

    def __init__(self, pattern: str, allowed: str, flags: int = 0) -> None:
        if pattern.startswith("^") or pattern.endswith("$"):
            raise ValueError(f"{pattern!r}: a NameRule matches the whole string; write it without ^ and $")
        self.pattern = pattern
        self.allowed = allowed
        self.regex = re.compile(pattern, flags | re.ASCII)

    def match(self, value: object) -> re.Match[str] | None:
        """The match of the whole of `value` (for its groups), or None; None for a non-string too."""
        return self.regex.fullmatch(value) if isinstance(value, str) else None

    def matches(self, value: object) -> bool:
        return self.match(value) is not None

    def __repr__(self) -> str:
        return f"NameRule({self.pattern!r})"


# Control characters have no name in unicodedata; their aliases (Unicode's NameAliases.txt).
_CONTROL_NAMES = {
    0x00: "NULL",
    0x09: "CHARACTER TABULATION",
    0x0A: "LINE FEED",
    0x0B: "LINE TABULATION",
    0x0C: "FORM FEED",
    0x0D: "CARRIAGE RETURN",
    0x1B: "ESCAPE",
    0x7F: "DELETE",
    0x85: "NEXT LINE",
}


def codepoint(char: str) -> str:
    """A character as a reader can find it: `U+200B ZERO WIDTH SPACE`, `U+000A LINE FEED`."""
    name = unicodedata.name(char, "") or _CONTROL_NAMES.get(ord(char), "")
    return f"U+{ord(char):04X} {name}" if name else f"U+{ord(char):04X}"


def character_problem(text: str, *, space: bool = True) -> str | None:
    """The first character of `text` a reader cannot see or tell from another, named and placed
    (`U+200B ZERO WIDTH SPACE (an invisible format character) at position 4`), or None.
    With `space` False the ASCII space is refused as well."""
    if text.isascii() and text.isprintable() and (space or " " not in text):
        return None  # printable ASCII: no control, format or other space, nothing NFKC changes
    for position, char in enumerate(text):
        category = unicodedata.category(char)
        if char == " ":
            if not space:
                return f"{codepoint(char)} (a space) at position {position}"
        elif category in _KINDS:
            return f"{codepoint(char)} ({_KINDS[category]}) at position {position}"
        folded = unicodedata.normalize("NFKC", char)
        if folded != char:
            return (
                f"{codepoint(char)} (a compatibility form NFKC normalization turns into {folded!a}, a look-alike) "
                f"at position {position}"
            )
    if unicodedata.normalize("NFKC", text) != text:  # a combining mark NFKC joins to the letter before it
        position, char = next(((i, c) for i, c in enumerate(text) if unicodedata.combining(c)), (0, text[:1]))
        what = "a combining mark NFKC normalization joins to the character before it"
        return f"{codepoint(char)} ({what}) at position {position}"
    return None


class Found(NamedTuple):
    """The first refused character of a value: where in a list (`[1]`, or ""), the string, the
    character and the phrase `character_problem` says of it."""

    where: str
    text: str
    char: str
    problem: str


def _strings(value: Any, where: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _strings(item, f"{where}[{index}]")


def first_problem(value: Any) -> Found | None:
    """The first refused character of a string, or of a list of strings; None for other values."""
    for where, text in _strings(value):
        problem = character_problem(text)
        if problem:
            position = int(problem.rsplit(" ", 1)[-1]) if problem[-1].isdigit() else 0
            return Found(where, text, text[position : position + 1], problem)
    return None


# The longest string a setting may hold, in UTF-8 bytes. No setting needs more (the longest, a Cloud
# Storage object path, is 1,024), and the strings reach containers' commands and the files they open:
# Linux takes a path of at most 4,096 bytes with its NUL (PATH_MAX, include/uapi/linux/limits.h) and
# one argument of at most 32 pages, 131,072 bytes (MAX_ARG_STRLEN, include/uapi/linux/binfmts.h);
# execve refuses a longer one (E2BIG) and the container never starts.
TEXT_MAX_BYTES = 4095
TEXT_LENGTH_ALLOWED = (
    f"allowed: at most {TEXT_MAX_BYTES:,} bytes (a path the kernel opens, PATH_MAX with its NUL; a command's "
    "argument, MAX_ARG_STRLEN, is longer)"
)


def length_problem(value: Any) -> str | None:
    """Why a string of the stack configuration, or an item of a list of them, is too long to reach a
    container (a message that shows its start and its size, never all of it), or None."""
    items = (
        [(None, value)] if isinstance(value, str) else list(enumerate(value)) if isinstance(value, list | tuple) else []
    )
    for where, item in items:
        if not isinstance(item, str):
            continue
        size = len(item.encode("utf-8"))
        if size > TEXT_MAX_BYTES:
            label = f"item {where} " if where is not None else ""
            return f"{label}{item[:24]!a}... is {size:,} bytes long; {TEXT_LENGTH_ALLOWED}"
    return None


def text_problem(value: Any) -> str | None:
    """Why a string of the stack configuration, or a list of them, is refused (a message that shows the
    value with its characters escaped and says what is allowed), or None. Other values pass."""
    found = first_problem(value)
    if found is None:
        return None
    item = f"item {found.where} " if found.where else ""
    return f"{item}{found.text!a} holds {found.problem}; {TEXT_ALLOWED}"
