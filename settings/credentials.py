"""Credentials written into ordinary settings: found by their shape, refused before anything runs.

A plain (non-secret) value of a stack file is committed to git and flows into pod arguments, labels,
Job environments, build/plan/, the PR comment and the Pulumi state, where anyone who can read any of
them reads it. Each value (and each mapping key) of every non-secret config key is checked as written,
after percent-decoding and after base64-decoding (the whole value or any run of base64 in it, standard
or URL-safe alphabet, twice over), so an encoded credential is found as well as a bare one.

Where the shapes come from: a maintained rule set, used as a library
----------------------------------------------------------------------
The shapes of vendors' tokens come first from Yelp's detect-secrets, pinned in requirements.txt,
policy/requirements.txt and constraints.txt (1.5.0). Every plugin it ships is used, found through its
own plugin registry (`detect_secrets.core.plugins.util.get_mapping_from_secret_type_to_class`, what
`detect-secrets scan --list-all-plugins` lists), each through the documented plugin method
`analyze_string` (docs/plugins.md), so a newer pin brings its new rules without a change here; only
the plugins in `NOT_SHAPES` are left out, each for its reason. `analyze_string` never verifies a
secret, so no value is ever sent anywhere and nothing needs the network. Why this source:

* gitleaks' rules (config/gitleaks.toml) are the broadest published set, but they ship with a Go
  binary or module: the program may neither read the Go module cache at run time nor copy their
  text into this repository, and no PyPI package ships them as data;
* Samsung's CredSweeper ships a broad rule file, but as part of a scanner that installs pandas,
  onnxruntime, lxml and twenty more packages into the program's and the policy pack's virtualenvs;
* detect-secrets is pure Python, needs only PyYAML and requests (both pinned already), is reviewed
  and versioned upstream (Apache-2.0), and its rules are readable in the installed package.

Its rules stop at what its maintainers published (May 2024), and it knows none of the credentials this
project is most likely to hold, so the project's own shapes (`RULES`) add those, each from the
vendor's published format:

* Hugging Face user access tokens start with `hf_`, organisation API tokens with `api_org_`
  (huggingface.co/docs/hub/security-tokens);
* Google OAuth 2.0 access tokens start with `ya29.` and API keys with `AIza`
  (developers.google.com/identity/protocols/oauth2, cloud.google.com/docs/authentication/api-keys);
* a service-account key is JSON with `"type": "service_account"` and a PEM private key
  (cloud.google.com/iam/docs/keys-create-delete); any PEM private-key block, encrypted or not
  (RFC 7468 §10 and §11: `PRIVATE KEY`, `ENCRYPTED PRIVATE KEY`, and the `RSA`/`EC`/`OPENSSH` forms);
* a kubeconfig with a token, client key or password (kubernetes.io/docs/concepts/configuration/
  organize-cluster-access-kubeconfig);
* GitHub fine-grained personal access tokens start with `github_pat_` (docs.github.com, "About
  authentication to GitHub", GitHub's token formats; the `ghp_`/`gho_`/`ghu_`/`ghs_`/`ghr_` forms are
  detect-secrets');
* Anthropic API keys start with `sk-ant-` (as the Anthropic Console issues them, e.g. `sk-ant-api03-`).

And a credential of a kind nobody listed is still found where it sits (`STRUCTURAL`): in a URL's
userinfo (`https://user:password@host`, RFC 3986 §3.2.1, which deprecates a password there), in a URL
query parameter whose name says secret (`?access_token=`, `&sig=`, `?key=`), after a secret-named
assignment (`password=...`, `apiToken: ...`) or in an HTTP Authorization value (`Bearer ...`,
RFC 6750 §2.1; `Basic ...`, RFC 7617).

A refusal names the key and the kind of credential, never the value; `masked` is how a message shows a
value that must be shown (userinfo, queries and anything shaped like a credential are masked), and
`redact` is what the loader runs on every refusal, for a credential of a kind no rule knows.
Provider credentials by key (`gcp:credentials`) are settings/loader.py's, and keys of namespaces the
program never reads (`kubernetes:kubeconfig`) are refused by settings/stack_file.py before this runs.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

try:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import BasePlugin
except ModuleNotFoundError as missing:  # a virtualenv built before the pin: say what to install
    raise ModuleNotFoundError(
        "settings/credentials.py needs detect-secrets (pinned in requirements.txt and constraints.txt): "
        "pip install -r requirements.txt -c constraints.txt, or `make` rebuilds .venv"
    ) from missing

ALLOWED = "allowed: a Pulumi secret (`pulumi config set --secret`) or a reference the workload resolves itself"

# The project's own shapes: what detect-secrets 1.5.0 does not know (sources in the module docstring).
RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a Hugging Face token", re.compile(r"(?<![A-Za-z0-9])(hf_|api_org_)[A-Za-z0-9]{20,}")),
    ("a Google OAuth access token", re.compile(r"(?<![A-Za-z0-9])ya29\.[A-Za-z0-9_-]{20,}")),
    ("a Google API key", re.compile(r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{35}")),
    ("a private key", re.compile(r"-----BEGIN ([A-Z0-9]+ )*PRIVATE KEY( BLOCK)?-----")),
    ("a service-account key", re.compile(r"\"type\"\s*:\s*\"service_account\"")),
    ("a kubeconfig credential", re.compile(r"(?m)^\s*(token|client-key-data|password)\s*:[ \t]*(?![\"']{2})[^\s${<]")),
    ("a GitHub fine-grained token", re.compile(r"(?<![A-Za-z0-9])github_pat_[A-Za-z0-9_]{40,}")),
    ("an Anthropic API key", re.compile(r"(?<![A-Za-z0-9])sk-ant-[A-Za-z0-9_-]{20,}")),
)

# detect-secrets plugins that judge something other than a credential's published shape.
NOT_SHAPES: Mapping[str, str] = {
    "Base64HighEntropyString": "randomness, not a shape: image digests, hashes and Cloud Monitoring JSON "
    "in the committed stacks' plans trip it",
    "HexHighEntropyString": "randomness, not a shape: sha256 image digests and commit hashes trip it",
    "IPPublicDetector": "an address is no credential: source ranges and NetworkPolicy CIDRs are public by design",
}


def _detect_secrets_plugins() -> tuple[BasePlugin, ...]:
    classes: Mapping[str, type[BasePlugin]] = get_mapping_from_secret_type_to_class()
    return tuple(cls() for cls in classes.values() if cls.__name__ not in NOT_SHAPES)


PLUGINS: tuple[BasePlugin, ...] = _detect_secrets_plugins()

# --- Structural shapes: a credential of any vendor, found by where it sits -----------------------------

# The words a secret's name ends with (`HF_TOKEN`, `dbPassword`, `client_secret`, `X-Goog-Signature`).
SECRET_WORDS = frozenset(
    {"token", "password", "passwd", "passphrase", "pwd", "secret", "apikey", "credential", "credentials"}
)
SECRET_PAIRS = frozenset(
    {("api", "key"), ("access", "key"), ("secret", "key"), ("private", "key"), ("auth", "key"), ("client", "key")}
)
# In a URL query a bare `key` is an API key (`?key=AIza...`) and `sig`/`signature` sign the request
# (Cloud Storage's X-Goog-Signature, S3's X-Amz-Signature, Azure's SAS `sig`).
QUERY_WORDS = SECRET_WORDS | {"key", "sig", "signature", "pass", "auth", "authorization"}

_USERINFO = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://(?!\*\*\*@)[^\s/?#@]+@")  # `***@`: masked already
_QUERY = re.compile(r"[?&;]([A-Za-z0-9_.-]+)=([^&#\s\"'<>]+)")
# `name = value`, `name: value`, `--name=value`: a literal value of eight or more token characters,
# ended by a delimiter (a call, an index or an interpolation is no literal: `token = os.environ[...]`).
# Matched at every position (a lookahead), so `image:v1/password=...` is read as `password=...` too.
_ASSIGNMENT = re.compile(
    r"(?<![A-Za-z0-9_.])(?=([A-Za-z][A-Za-z0-9_.-]*)[\"']?[ \t]*[=:][ \t]*[\"']?"
    r"([A-Za-z0-9._~+/=%-]{8,})(?=[\s\"',;&)]|$))"
)
_AUTHORIZATION = re.compile(r"(?i)(?<![A-Za-z0-9])(bearer|basic)[ \t]+[A-Za-z0-9._~+/-]{16,}=*")
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")


def _words(name: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(name)]


def secret_name(name: str, words: frozenset[str] = SECRET_WORDS) -> bool:
    """Whether `name` names a secret: its last word, or its last two words, say so."""
    parts = _words(name)
    return bool(parts) and (parts[-1] in words or tuple(parts[-2:]) in SECRET_PAIRS)


def _is_reference(value: str) -> bool:
    """A value the workload resolves itself, or an unmistakable placeholder, is no credential."""
    return value[:1] in "$%{<*" or len(set(value.lower())) <= 2


def _structural(text: str) -> str | None:
    if _USERINFO.search(text):
        return "credentials in a URL's userinfo (before the host's '@')"
    for name, value in _QUERY.findall(text):
        if secret_name(name, QUERY_WORDS) and not _is_reference(unquote(value)):
            return "a URL query parameter named like a secret"
    for name, value in _ASSIGNMENT.findall(text):
        if secret_name(name) and not _is_reference(value):
            return "a value assigned to a secret-named key"
    if _AUTHORIZATION.search(text):
        return "an HTTP Authorization credential (Bearer or Basic)"
    return None


def _shape(text: str) -> str | None:
    """The kind of credential `text` holds as written (a phrase), or None."""
    for kind, pattern in RULES:
        if pattern.search(text):
            return kind
    for plugin in PLUGINS:
        if next(iter(plugin.analyze_string(text)), None) is not None:
            return f"a credential detect-secrets recognises ({plugin.secret_type})"
    return _structural(text)


# --- Decoding: base64 and percent-encoding ---------------------------------------------------------

_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_SPLITS = "/-_+"
_MAX_STARTS = 8
_MAX_DEPTH = 2


def _printable(text: str) -> bool:
    return all(c.isprintable() or c in "\t\n\r" for c in text)


def _b64(candidate: str) -> str | None:
    body = candidate.rstrip("=")
    body = body[: len(body) - len(body) % 4] if len(body) % 4 == 1 else body
    if len(body) < 12:
        return None
    padded = body + "=" * (-len(body) % 4)
    altchars = b"-_" if ("-" in body or "_" in body) else None
    if altchars and ("+" in body or "/" in body):
        return None  # both alphabets at once: no base64 encoder writes that
    try:
        raw = base64.b64decode(padded, altchars=altchars, validate=True)
        text = raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return text if len(text) >= 8 and _printable(text) else None


def _base64_decodings(text: str) -> Iterator[str]:
    """Texts that a base64 run of `text` decodes to: the run from its start or after a '/', '-', '_' or
    '+' (so `models/<base64>` is found), and the whole value with line breaks removed (wrapped base64)."""
    seen: set[str] = set()
    runs = [m.group() for m in _BASE64_RUN.finditer(text)]
    joined = "".join(text.split())
    if joined != text and _BASE64_RUN.fullmatch(joined):
        runs.append(joined)
    for run in runs:
        starts = [0, *(i + 1 for i, c in enumerate(run) if c in _SPLITS)][:_MAX_STARTS]
        for start in starts:
            decoded = _b64(run[start:])
            if decoded is not None and decoded not in seen:
                seen.add(decoded)
                yield decoded


def _percent_decoded(text: str) -> str | None:
    if not _PERCENT.search(text):
        return None
    try:
        decoded = unquote(text, errors="strict")
    except UnicodeDecodeError:
        return None
    return decoded if decoded != text else None


def _views(text: str, depth: int = 0) -> Iterator[tuple[str, tuple[str, ...]]]:
    """`text` as written, then each decoding of it (and of those, to `_MAX_DEPTH`), with how it was encoded."""
    yield text, ()
    if depth >= _MAX_DEPTH:
        return
    decoded = _percent_decoded(text)
    if decoded is not None:
        for view, how in _views(decoded, depth + 1):
            yield view, ("percent-encoded", *how)
    for decoded in _base64_decodings(text):
        for view, how in _views(decoded, depth + 1):
            yield view, ("base64-encoded", *how)


@dataclass(frozen=True)
class Finding:
    kind: str  # e.g. "a Hugging Face token"
    encodings: tuple[str, ...] = ()  # outermost first, e.g. ("base64-encoded",)

    @property
    def phrase(self) -> str:
        return f"{self.kind}, {' and '.join(self.encodings)}," if self.encodings else self.kind


@functools.lru_cache(maxsize=8192)
def find(text: str) -> Finding | None:
    """The credential `text` holds, as written or decoded, or None (cached: a plan repeats its strings)."""
    for view, how in _views(text):
        kind = _shape(view)
        if kind:
            return Finding(kind, how)
    return None


def kind_of(text: str) -> str | None:
    """Which credential `text` holds (a phrase for a message), or None."""
    found = find(text)
    return found.phrase if found else None


def masked(text: str) -> str:
    """`text` as a message may show it: URL userinfo, URL queries and fragments, and every word that holds
    a credential replaced by `***`. For values that must be shown (a rule names what it refused)."""
    text = re.sub(r"(?i)(\b[a-z][a-z0-9+.-]*://)[^\s/?#]*@", r"\1***@", text)
    text = re.sub(r"([?#])[^\s'\"]*", r"\1***", text)
    return re.sub(r"\S+", lambda m: "***" if find(m.group()) else m.group(), text)


# --- Echoes: what a refusal may show of a value the stack gave ------------------------------------------
#
# A rule names the value it refused; a credential of a kind no rule above knows would then be printed
# wherever the refusal goes (a terminal, CI logs, the PR comment). So before a refusal leaves the loader,
# every run of token characters it holds that could be a secret, and that came from the stack, is masked.
# A run "could be a secret" when a piece of it (split at '-', '_' and '/', which names and paths use
# between words) is at least ECHO_PIECE_MIN characters and random-looking: letters and digits mixed
# (every vendor's token alphabet, base62, base64 and hex, mixes them: Hugging Face, Google API keys,
# GitHub, AWS secrets, JWTs), letters in no word's case pattern, or a long number. Names, paths, images
# and versions stay readable: their pieces are words, short, or content addresses that name public data
# (a Hugging Face snapshot's commit, huggingface_hub's `snapshots/<40-hex>`; an image's `sha256:` digest).
# Entropy alone cannot tell a 16-character word from a 16-character token (`cloud-tpu-images` scores as
# high as a random hex string), hence the alphabet test. A run the stack did not give (the program's own
# words: allowed values) is never masked, nor a name the program's catalogs publish (a Saxml servable
# class, `LmCloudSpmd175B32Test`, is a long mixed piece). The cost: another long mixed piece the stack
# gave is masked if a refusal echoes it, and a word-cased or short secret is shown.
ECHO_PIECE_MIN = 16
ECHO_NUMBER_MIN = 20  # a project number is 12 digits
MASK = "***"
_ECHO_RUN = re.compile(r"[A-Za-z0-9+/=_-]+")
_ECHO_PIECE = re.compile(r"[A-Za-z0-9+=]+")
_CONTENT_ADDRESS = re.compile(r"(?i)(?<=snapshots/)[0-9a-f]{40}(?![0-9a-f])|(?<=sha256:)[0-9a-f]{64}(?![0-9a-f])")
_WORD_CASE = re.compile(r"[A-Z]?[a-z]+(?:[A-Z][a-z]+)*|[A-Z]+|[A-Z]+[a-z]+")


def random_looking(piece: str) -> bool:
    """Whether `piece` (letters, digits, '+' and '=') could be a token rather than a word or a number."""
    if len(piece) < ECHO_PIECE_MIN:
        return False
    letters = [c for c in piece if c.isalpha()]
    digits = sum(c.isdigit() for c in piece)
    if letters and digits:
        return True
    if digits:
        return digits >= ECHO_NUMBER_MIN
    return not _WORD_CASE.fullmatch("".join(letters))


def _suspect_pieces(judged: str) -> list[str]:
    return [p for p in _ECHO_PIECE.findall(judged) if random_looking(p)]


def given_strings(raw: Mapping[str, Any]) -> list[str]:
    """Every string a stack gave: its keys, and each value and mapping key below them."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, str):
            found.append(node)
        elif isinstance(node, Mapping):
            for key, inner in node.items():
                walk(str(key))
                walk(inner)
        elif isinstance(node, list):
            for inner in node:
                walk(inner)

    for key, value in raw.items():
        walk(key)
        walk(value)
    return found


def redact(message: str, given: Iterable[str], public: Iterable[str] = ()) -> str:
    """`message` with every run that could be a secret the stack gave (see above) replaced by `MASK`;
    `public` are names the program's own catalogs publish (a servable class), never masked."""
    given = [g for g in given if len(g) >= ECHO_PIECE_MIN]
    if not given:
        return message
    # Content addresses are judged as blanks, where they stand in the whole message (`sha256:` ends a run),
    # and so is an address the stack gave in its place, wherever the message repeats it alone.
    blanked = _CONTENT_ADDRESS.sub(lambda m: "-" * len(m.group()), message)
    public_pieces = {m.group() for text in given for m in _CONTENT_ADDRESS.finditer(text)}
    public_pieces |= {piece for word in public for piece in _ECHO_PIECE.findall(word)}

    def shown(match: re.Match[str]) -> str:
        pieces = [p for p in _suspect_pieces(blanked[match.start() : match.end()]) if p not in public_pieces]
        return MASK if any(piece in text for piece in pieces for text in given) else match.group()

    return _ECHO_RUN.sub(shown, message)


# --- The settings ----------------------------------------------------------------------------------------


def _strings(value: Any, path: str) -> Iterator[tuple[str, str, bool]]:
    """(path, text, is_key) for every string in `value`: the values, and the mapping keys."""
    if isinstance(value, str):
        yield path, value, False
    elif isinstance(value, Mapping):
        for key, inner in value.items():
            if isinstance(key, str) and find(key):
                yield path, key, True  # the key itself is never shown, nor anything under it
                continue
            yield from _strings(inner, f"{path}.{key}")
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _strings(inner, f"{path}[{index}]")


def _problem(where: str, found: Finding) -> str:
    return f"{where} {found.phrase} in plain text, which git and every pod reading it would keep; {ALLOWED}"


def plain_credentials(raw: Mapping[str, Any], secret_keys: Iterable[str]) -> list[str]:
    """One problem per plain setting that holds a credential: the key, what it holds, never the value."""
    secrets = set(secret_keys)
    problems = []
    for key in sorted(raw):
        if key in secrets:
            continue
        namespace = key.partition(":")[0] if ":" in key else "the project's"
        found_in_key = find(key)
        if found_in_key:
            problems.append(_problem(f"a config key of namespace {namespace} holds", found_in_key))
            continue
        for path, text, is_key in _strings(raw[key], key):
            found = find(text)
            if found:
                problems.append(_problem(f"{path}: a key of it holds" if is_key else f"{path}: holds", found))
    return problems
