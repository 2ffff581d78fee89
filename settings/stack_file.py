"""Read a `Pulumi.<stack>.yaml` the way the Pulumi CLI reads it, so the plan sees what `pulumi up` sees.

The CLI parses stack files with go-yaml v3 (YAML 1.2 core schema): `22:00` and `yes` are strings,
not the sexagesimal integer 1320 and the boolean PyYAML's YAML 1.1 makes of them; a repeated key
is an error ("mapping key ... already defined"). A config key without a namespace belongs to the
project (sdk/go/common/resource/config/key.go, `ParseKey` via the project's default namespace).
go-yaml reads UTF-8, or UTF-16 after a byte-order mark (readerc.go, `yaml_parser_determine_encoding`).

The CLI passes on any other namespace silently, so a typo, a look-alike letter or a namespace no
part of the program reads would be a setting that never applies: only `NAMESPACES` are accepted.
That judgement (`namespace_problems`) is the settings loader's, run on the keys the engine hands
`pulumi up` exactly as on the keys this reader returns to `make plan` (settings/loader.py `load`).
A stack file is a regular file of at most `MAX_BYTES`, refused before it is read otherwise (a FIFO
or /dev/zero would never end). Every error is one line that starts with the file's name.
"""

from __future__ import annotations

import difflib
import os
import re
import stat
import unicodedata
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from domain import bounded_input
from settings import esc_environment

PROJECT = "tpu-slicing"

# The namespaces a key of this program's stack files may have, and who reads each. Stack config
# reaches a provider only as its default provider's; every Kubernetes object goes through the
# program's own provider (backends/platform.py, `cluster_provider`), whose unset arguments come from
# the environment, not the stack (pulumi_kubernetes/provider.py: KUBECONFIG, PULUMI_K8S_*), and
# pulumi-command's provider has no configuration. tests/test_stack_file.py checks this on the plan.
NAMESPACES = {
    PROJECT: "this program's settings (settings/model.py)",
    "gcp": "the default Google Cloud provider (gcp:project, gcp:region, ...) and settings/loader.py",
    "pulumi": "the engine's own keys, e.g. pulumi:disable-default-providers",
}
UNREAD = {
    "kubernetes": "every Kubernetes object goes through the program's own provider, built from the "
    "cluster's kubeconfig, which reads no kubernetes: key",
    "command": "pulumi-command's provider has no configuration",
}

# Committed stack files are about 1 KiB: a file above the cap is refused before it is read.
MAX_BYTES = 1 << 20

# The Pulumi CLI's rule (sdk/go/common/tokens/stack_name.go, `ParseStackName`; the Service's too).
STACK_NAME = re.compile(r"[A-Za-z0-9_.-]*", flags=re.ASCII)
STACK_NAME_MAX = 100
STACK_NAME_ALLOWED = (
    f"a stack name may only contain alphanumeric, hyphens, underscores, or periods, 1 to {STACK_NAME_MAX} "
    "characters (the Pulumi CLI's rule)"
)


class StackFileError(ValueError):
    pass


def check_stack_name(name: str) -> str:
    """`name` if the Pulumi CLI accepts it as a stack name; one line saying why not otherwise."""
    if not name:
        raise StackFileError(f"stack name {name!r} is empty; allowed: {STACK_NAME_ALLOWED}")
    if len(name.encode()) > STACK_NAME_MAX:
        raise StackFileError(f"stack name {name!r} is {len(name.encode())} bytes long; allowed: {STACK_NAME_ALLOWED}")
    matched = STACK_NAME.match(name)
    end = matched.end() if matched else 0
    if end != len(name):
        raise StackFileError(
            f"stack name {name!r} is not allowed: invalid character {name[end]!r} at position {end}; "
            f"allowed: {STACK_NAME_ALLOWED}"
        )
    return name


class CliLoader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2 core-schema scalars and duplicate keys refused."""


CliLoader.yaml_implicit_resolvers = {}
_RESOLVERS = [
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)\Z", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)\Z", list("tTfF")),
    ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)\Z", list("-+0123456789")),
    (
        "tag:yaml.org,2002:float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))\Z",
        list("-+.0123456789"),
    ),
]
for _tag, _pattern, _first in _RESOLVERS:
    CliLoader.add_implicit_resolver(_tag, re.compile(_pattern), _first)


def _int_1_2(loader: CliLoader, node: yaml.ScalarNode) -> int:
    text = str(loader.construct_scalar(node))
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text)  # decimal only: a leading 0 is not octal in YAML 1.2


def _mapping_without_duplicates(loader: CliLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, list | dict):
            raise StackFileError(
                f"line {key_node.start_mark.line + 1}: a key is a {'list' if isinstance(key, list) else 'mapping'}; "
                "allowed: a string"
            )
        if key in seen:
            raise StackFileError(
                f"line {key_node.start_mark.line + 1}: key {key!r} is given twice (first on line {seen[key]}); "
                "the Pulumi CLI refuses the file: keep one"
            )
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


CliLoader.add_constructor("tag:yaml.org,2002:int", _int_1_2)
CliLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def parse(text: str) -> dict[str, Any]:
    try:
        bounded_input.check_yaml(text, CliLoader)  # aliases and depth, before anything is built
    except bounded_input.InputError as err:
        raise StackFileError(str(err)) from None
    try:
        document = yaml.load(text, Loader=CliLoader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = "; ".join(_one_line(part) for part in (err.context, err.problem) if part)
        raise StackFileError(f"{where}not valid YAML: {what}") from None
    except yaml.YAMLError as err:  # the reader's: a character YAML does not allow, at a position
        raise StackFileError(f"not valid YAML: {_one_line(str(err))}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise StackFileError("a stack file is a mapping with a `config:` key")
    return document


# Letters that render like the ASCII letters of the known namespaces (Unicode's confusables.txt:
# Cyrillic, Greek, Armenian and IPA look-alikes). Only for naming the namespace meant: any unknown
# namespace is refused whether or not it is listed here.
_LOOK_ALIKES = str.maketrans(
    {
        **dict(zip("асеһіјӏорԛѕԝхуԁ", "acehijlopqswxyd", strict=True)),  # Cyrillic
        **dict(zip("АВСЕНІЈКМОРЅТХУ", "ABCEHIJKMOPSTXY", strict=True)),
        **dict(zip("αιορυνϲ", "aiopuvc", strict=True)),  # Greek
        **dict(zip("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧ", "ABEZHIKMNOPTYX", strict=True)),
        **dict(zip("ոս", "nu", strict=True)),  # Armenian
        **dict(zip("ıɩɡ", "iig", strict=True)),  # Latin and IPA
    }
)


def _skeleton(text: str) -> str:
    """What `text` looks like: compatibility forms folded (fullwidth letters), look-alike letters
    as the ASCII they resemble, every dash a hyphen, no whitespace or invisible characters, no case."""
    out = []
    for char in unicodedata.normalize("NFKC", text).translate(_LOOK_ALIKES):
        category = unicodedata.category(char)
        if category == "Pd" or char == "\u2212":  # dashes and the minus sign
            out.append("-")
        elif not (char.isspace() or category.startswith(("C", "Z"))):
            out.append(char)
    return "".join(out).casefold()


def _known(project: str) -> list[str]:
    """The namespaces a stack of `project` may use: the project's own and the others of NAMESPACES."""
    return sorted({project, *(NAMESPACES.keys() - {PROJECT})})


def _meant(namespace: str, project: str) -> str | None:
    """The known namespace `namespace` looks like or is one typo from, if any."""
    skeletons = {_skeleton(name): name for name in _known(project)}
    looks = _skeleton(namespace)
    if looks in skeletons:
        return skeletons[looks]
    close = difflib.get_close_matches(looks, list(skeletons), n=1, cutoff=0.8)
    return skeletons[close[0]] if close else None


def _unseen(namespace: str) -> str:
    """The characters of `namespace` a reader cannot tell from ASCII, named: `U+0456 CYRILLIC ...`."""
    hidden = [f"U+{ord(c):04X} {unicodedata.name(c, 'unnamed')}" for c in namespace if not c.isascii()]
    if namespace != namespace.strip():
        hidden.append("surrounding whitespace")
    return f" (it holds {', '.join(dict.fromkeys(hidden))})" if hidden else ""


def _unknown_namespace(key: str, namespace: str, rest: str, project: str) -> str:
    meant = _meant(namespace, project)
    if meant is not None:
        return (
            f"config key {key!r}: namespace {namespace!r} is not {meant!r}{_unseen(namespace)}: the program "
            f"reads no look-alike, so the setting would silently not apply; allowed: {meant}:{rest}"
        )
    why = UNREAD.get(namespace, "a setting there would silently not apply")
    return (
        f"config key {key!r}: namespace {namespace!r}{_unseen(namespace)} is not one this program reads ({why}); "
        f"allowed namespaces: {', '.join(_known(project))} (a key without one is {project}'s)"
    )


def namespace_problems(keys: Iterable[str], project: str = PROJECT) -> list[str]:
    """One line per full config key (`namespace:key`, as the engine hands them to the program) whose
    namespace no part of the program reads (`NAMESPACES`), naming the namespace meant where it looks
    like or is one typo from a known one. Never shows a value: a key alone says what is wrong."""
    known = set(_known(project))
    problems = []
    for key in sorted(keys):
        namespace, _, rest = key.partition(":")
        if namespace not in known:
            problems.append(_unknown_namespace(key, namespace, rest, project))
    return problems


def config_keys(config: dict[str, Any], project: str = PROJECT) -> dict[str, Any]:
    """The config mapping with every key as the CLI reads it: bare keys in the project's namespace.
    A key of a namespace the program does not read is kept, as the CLI keeps it; the settings loader
    refuses it (`namespace_problems`), on this path and on `pulumi up`'s alike."""
    if not isinstance(config, dict):
        raise StackFileError(f"`config:` is a mapping of keys to values, not a {type(config).__name__}")
    found: dict[str, Any] = {}
    for key, value in config.items():
        if not isinstance(key, str):
            raise StackFileError(f"config key {key!r} is not a string")
        full = key if ":" in key else f"{project}:{key}"
        if full in found:
            raise StackFileError(f"config key {full!r} is given twice (once without its namespace)")
        found[full] = value
    return found


def read_bytes(path: Path) -> bytes:
    """The file's bytes, if it is a regular file of at most `MAX_BYTES`: judged on the open file
    (fstat), opened without blocking, so that a FIFO or a device is refused before any read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise StackFileError(f"cannot read: {err.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = bounded_input.file_kind(mode)
        raise StackFileError(f"is not a regular file ({kind}); allowed: a regular file")
    with os.fdopen(fd, "rb") as file:
        data = file.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            size = max(os.fstat(fd).st_size, len(data))
            raise StackFileError(
                f"is {size} bytes, over the cap of {MAX_BYTES} bytes for a stack file; "
                f"allowed: at most {MAX_BYTES} bytes"
            )
    return data


def decode(data: bytes) -> str:
    """Text as go-yaml decodes it: UTF-16 after its byte-order mark, UTF-8 otherwise (a UTF-8 BOM
    is skipped by the YAML reader)."""
    encoding = "utf-16" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else "utf-8"
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as err:
        name = "UTF-16" if encoding == "utf-16" else "UTF-8"
        raise StackFileError(
            f"not {name}: byte 0x{data[err.start]:02x} at offset {err.start} ({err.reason}); "
            "allowed: UTF-8 text, as the Pulumi CLI reads it"
        ) from None


def environments(document: Mapping[str, Any]) -> list[str]:
    """What a stack file's `environment:` brings in: each environment of its list of names (Pulumi
    ESC docs, "Pulumi IaC integration"), or, for a mapping (an environment written inline), its
    `imports` and `an inline environment` when it defines values too. Any of them means `pulumi up`
    sees configuration this file does not hold."""
    value = document.get("environment")
    if not value:
        return []
    if isinstance(value, Mapping):
        imports = value.get("imports") or []
        names = [str(i) for i in (imports if isinstance(imports, list) else [imports])]
        return names + ([INLINE] if set(value) - {"imports"} else [])
    items = value if isinstance(value, list) else [value]
    return [str(item) for item in items]


INLINE = "an inline environment"


def inline_problem() -> str:
    return (
        "has an inline environment (`environment:` with `values:`), which Pulumi Cloud evaluates when `pulumi up` "
        "runs (interpolations, fn:: functions) and the offline plan cannot; allowed: those values in an environment "
        "of their own, imported by name and handed to the plan opened (docs/deploy.md, ESC environments)"
    )


def read_merged(path: Path, project: str = PROJECT, opened: Mapping[str, Path] | None = None) -> esc_environment.Merged:
    """The config `pulumi up` hands the program for this stack file: its `config:` (keys namespaced,
    values as the CLI parses them) with the `pulumiConfig` of each environment it imports merged in
    from `opened` (environment name to the file `pulumi env open NAME --format detailed` wrote),
    as the CLI merges it (settings/esc_environment.py). An import not in `opened` is refused in one
    line, never read as if it were empty."""
    given = opened or {}
    try:
        document = parse(decode(read_bytes(path)))
        config = config_keys(document.get("config") or {}, project)
        imported = environments(document)
        if INLINE in imported:
            raise StackFileError(inline_problem())
        if any(name not in given for name in imported):
            raise StackFileError(esc_environment.missing_problem(imported, given))
        pulumi_config = esc_environment.merge_imports([esc_environment.read_opened(n, given[n]) for n in imported])
        return esc_environment.merge(config, pulumi_config, project)
    except (StackFileError, esc_environment.EscValuesError) as err:
        raise StackFileError(f"{path.name}: {err}") from None


def read(path: Path, project: str = PROJECT) -> dict[str, Any]:
    """The `config:` mapping of a stack file that imports no ESC environment (`read_merged`)."""
    return read_merged(path, project).config
