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
import random
import string
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from settings import credentials, refusals
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


# --- A credential of a kind no rule knows ------------------------------------------------------------

_BASE62 = string.ascii_letters + string.digits


def _unknown_token(seed: int) -> str:
    """42 random characters of the base62 alphabet most vendors' tokens use, of no rule's shape (40 alone
    are the shape of an AWS or Cloud Storage HMAC secret key, settings/credentials.py)."""
    rng = random.Random(seed)
    body = "".join(rng.choice(_BASE62) for _ in range(40))
    token = body + rng.choice(string.digits) + rng.choice(string.ascii_lowercase)
    assert credentials.find(token) is None, token  # no rule knows it: only the echo rule keeps it out
    return token


@pytest.mark.parametrize(
    ("index", "refused"), list(enumerate(REFUSED_CLASSES)), ids=[f"{i}-{n}" for i, n in enumerate(refusals.NAMES)]
)
def test_no_refusal_echoes_a_long_random_token(index: int, refused: RefusedClass, tmp_path: Path) -> None:
    """A token no credential rule recognises, in place of each string of the class's example and after
    it: whatever the settings refuse, no 12 characters of the token are in the message."""
    token = _unknown_token(index)
    windows = {token[i : i + 12] for i in range(len(token) - 11)}
    for number, (example, lines) in enumerate(variants(refused, token)):
        folder = tmp_path / f"variant-{number}"
        folder.mkdir()
        message = settings_verdict(write_variant(folder, refused.stack, example, lines), refused.stack)
        if message is None:
            continue  # accepted: nothing is said
        shown = [w for w in windows if w in message]
        assert not shown, f"{refused.name}: {example} {lines!r} echoes {shown[:1]}:\n{message}"


# The echo rule on its own (settings/credentials.py `redact`): values a stack gives every day stay readable.
_READABLE = (
    "models--Qwen--Qwen3.5-397B-A17B-FP8/snapshots/ea5b4f81096f3901c91dea97f81324302495781d",
    "us-docker.pkg.dev/cloud-tpu-images/inference/maxengine-server@sha256:" + "423ed6ab25b1921a" * 4,
    "example-tpu-project-saxml-v5e-sax",
    "gke-tpu-partition-4x4x4-id",
    "NO_MINOR_OR_NODE_UPGRADES",
    "impersonateServiceAccount",
    "1.35.0-gke.1795000",
    "123456789012-compute@developer.gserviceaccount.com",
    "gs://example-jetstream-checkpoints/llama2-70b/int8_",
)


@pytest.mark.parametrize("value", _READABLE)
def test_a_value_of_words_paths_and_content_addresses_is_echoed_as_it_is(value: str) -> None:
    message = f"tpu-slicing:x: {value!r} is not allowed"
    assert credentials.redact(message, [value]) == message


@pytest.mark.parametrize(
    "token",
    [
        _unknown_token(1),
        random.Random(2).randbytes(16).hex(),  # a hex key
        "".join(random.Random(3).choices(string.ascii_letters, k=24)),  # letters, no word's case
        "7" * 24,  # a long number
        base64.b64encode(random.Random(4).randbytes(30)).decode(),  # standard base64, '/' and '+' included
    ],
)
def test_a_token_the_stack_gave_is_masked_wherever_a_message_puts_it(token: str) -> None:
    for shown in (f"{token!r}", f"gs://bucket/{token}/x", f"dev-{token}-gke", token[:20]):
        message = f"tpu-slicing:x: {shown} is not allowed; allowed: LmCloudSpmd175B64Test"
        redacted = credentials.redact(message, [f"prefix/{token}"])
        assert token[:16] not in redacted and token[-16:] not in redacted, redacted
        assert "LmCloudSpmd175B64Test" in redacted  # the program's own words, not the stack's, stay


def test_a_name_the_catalogs_publish_is_shown_though_the_stack_gave_it() -> None:
    from settings.loader import PUBLIC_NAMES

    servable = "saxml.server.pax.lm.params.lm_cloud.LmCloudSpmd175B32Test"
    message = f"tpu-slicing:serving.saxml.modelPath 'x' shards over 64 devices; allowed: {servable.rsplit('.', 1)[1]}"
    assert credentials.redact(message, [servable], PUBLIC_NAMES) == message
    assert "LmCloudSpmd175B32Test" not in credentials.redact(message, [servable])  # what PUBLIC_NAMES is for
