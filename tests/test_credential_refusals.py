"""No refusal shows a credential: every class of settings/refusals.py, as it is and with one pasted in.

For each refused class, its own message holds nothing a credential rule finds and no URL userinfo.
Then a credential (a different kind for each class, in turn: a vendor's shape, the project's own,
userinfo, a secret-named query parameter or assignment, base64- and percent-encoded) is put into each
string of the class's example, in place of it and after it, or into the value of each stack-file line
it appends: the settings refuse it naming the key, and neither the message nor, for the first variant,
`python -m plan`'s output or the files it leaves under --out hold the credential, encoded or not.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from settings import refusals
from settings.refusals import REFUSED_CLASSES, RefusedClass
from tests.test_credentials import OPAQUE, leaks
from tests.test_verdicts import plan_verdict, settings_verdict, write_variant

# Each holds OPAQUE (or, encoded, a form of it), which no message may hold. Put together at run time.
_PASTED: tuple[str, ...] = (
    "hf_" + OPAQUE + "x" * 8,  # the project's own rule
    "AKIA" + OPAQUE.upper(),  # detect-secrets' AWS access key
    f"https://deploy:{OPAQUE}@git.example.com/org/repo.git",  # userinfo
    f"https://example.com/weights?access_token={OPAQUE}",  # a secret-named query parameter
    f"password={OPAQUE}",  # a secret-named assignment
    base64.b64encode(("sk-ant-api03-" + OPAQUE * 2).encode()).decode(),  # base64 of the project's rule
    quote(f"oci://robot:{OPAQUE}@registry.example.com/charts", safe=""),  # percent-encoded userinfo
    "github_pat_" + OPAQUE * 3,  # the project's own rule
)


def _forms(pasted: str) -> list[str]:
    """What of `pasted` a message must not hold: the secret itself, the pasted text and its decoded forms."""
    return [OPAQUE, pasted, base64.b64encode(OPAQUE.encode()).decode()[:16], quote(OPAQUE, safe="")]


def _strings(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str]]:
    if isinstance(node, str):
        yield path, node
    elif isinstance(node, Mapping):
        for key, value in node.items():
            yield from _strings(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _strings(value, (*path, index))


def _with(example: Mapping[str, Any], path: tuple[Any, ...], value: str) -> dict[str, Any]:
    out: Any = copy.deepcopy(dict(example))
    node = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return dict(out)


def variants(refused: RefusedClass, pasted: str) -> Iterator[tuple[dict[str, Any], str]]:
    """(example, stack lines) with `pasted` in each string of the example (in place of it and after it), or
    in the value of each stack line; a class with neither gets it in namePrefix beside its own example."""
    found = False
    for path, text in _strings(refused.example):
        found = True
        yield _with(refused.example, path, pasted), refused.stack_lines
        yield _with(refused.example, path, f"{text}/{pasted}"), refused.stack_lines
    lines = refused.stack_lines.splitlines(keepends=True)
    for index, line in enumerate(lines):
        key, sep, _ = line.rstrip("\n").rpartition(": ")
        if sep and not line.lstrip().startswith("#"):
            found = True
            salted = [*lines[:index], f"{key}: {json.dumps(pasted)}\n", *lines[index + 1 :]]
            yield dict(refused.example), "".join(salted)
    if not found:
        yield {**refused.example, "namePrefix": pasted}, refused.stack_lines


def _assert_clean(text: str, pasted: str, where: str) -> None:
    for form in _forms(pasted):
        assert form not in text, f"{where} holds {form!r}:\n{text}"
    assert leaks(text) == [], f"{where}:\n{text}"


@pytest.mark.parametrize(
    ("index", "refused"), list(enumerate(REFUSED_CLASSES)), ids=[f"{i}-{n}" for i, n in enumerate(refusals.NAMES)]
)
def test_no_refusal_shows_a_credential(
    index: int,
    refused: RefusedClass,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The class as the table has it: nothing in its message is credential-shaped.
    path = write_variant(tmp_path, refused.stack, refused.example, refused.stack_lines)
    message = settings_verdict(path, refused.stack)
    assert message is not None, refused.name
    assert leaks(message) == [], message

    # With a credential pasted into its bad value: refused naming the key, the credential nowhere.
    pasted = _PASTED[index % len(_PASTED)]
    for number, (example, lines) in enumerate(variants(refused, pasted)):
        folder = tmp_path / f"variant-{number}"
        folder.mkdir()
        path = write_variant(folder, refused.stack, example, lines)
        message = settings_verdict(path, refused.stack)
        assert message is not None, f"{refused.name}: {example} {lines!r} is accepted"
        _assert_clean(message, pasted, f"{refused.name}, the settings' message")
        if number == 0:
            out = folder / "out"
            err = plan_verdict(path, refused.stack, monkeypatch, capsys)
            assert err is not None, f"{refused.name}: the plan accepts {example}"
            _assert_clean(err, pasted, f"{refused.name}, the plan's output")
            for file in (p for p in out.rglob("*") if p.is_file()) if out.exists() else ():
                _assert_clean(file.read_text(errors="replace"), pasted, str(file))
