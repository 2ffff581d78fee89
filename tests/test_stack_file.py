"""Stack files are read as the Pulumi CLI reads them: YAML 1.2, no duplicate keys, bare keys namespaced."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest
import yaml
from hypothesis import assume, given
from hypothesis import strategies as st

from plan import engine, stacks
from settings import stack_file
from settings.stack_file import StackFileError, config_keys, namespace_problems, parse, read

ROOT = Path(__file__).resolve().parent.parent


def test_clock_times_and_yes_are_strings_as_in_yaml_1_2() -> None:
    document = parse("config:\n  a: 22:00\n  b: 1:00:00\n  c: yes\n  d: on\n  e: 010\n  f: 0o10\n  g: true\n")
    assert document["config"] == {"a": "22:00", "b": "1:00:00", "c": "yes", "d": "on", "e": 10, "f": 8, "g": True}


@given(st.integers(0, 23), st.integers(0, 59))
def test_every_unquoted_clock_time_stays_a_string(hour: int, minute: int) -> None:
    text = f"{hour}:{minute:02d}"
    assert parse(f"config:\n  t: {text}\n")["config"]["t"] == text


def test_a_repeated_key_is_refused_as_the_cli_refuses_it() -> None:
    with pytest.raises(StackFileError, match=r"key 'tpu-slicing:zone' is given twice"):
        parse("config:\n  tpu-slicing:zone: a\n  tpu-slicing:zone: b\n")
    with pytest.raises(StackFileError, match="given twice"):
        parse("config:\n  x: 1\nconfig:\n  y: 2\n")


def test_a_bare_key_is_the_projects() -> None:
    assert config_keys({"zone": "us-central1-ai1a", "gcp:project": "p"}) == {
        "tpu-slicing:zone": "us-central1-ai1a",
        "gcp:project": "p",
    }
    with pytest.raises(StackFileError, match="given twice"):
        config_keys({"zone": "a", "tpu-slicing:zone": "b"})


def _namespace_refused(key: str) -> str:
    """The one line `namespace_problems` gives for `key` (the loader's judgement of a namespace)."""
    problems = namespace_problems([key])
    assert len(problems) == 1, problems
    return problems[0]


@pytest.mark.parametrize("typo", ["tpu-slicng", "tpu_slicing", "tpu-slicing2", "tpuslicing"])
def test_a_namespace_one_typo_from_the_projects_is_refused(typo: str) -> None:
    assert re.search(
        rf"namespace '{typo}' is not 'tpu-slicing'.*tpu-slicing:serving", _namespace_refused(f"{typo}:serving")
    )


def test_the_namespaces_the_program_reads_pass() -> None:
    keys = {"gcp:project": "p", "pulumi:disable-default-providers": ["kubernetes"], "tpu-slicing:zone": "z"}
    assert config_keys(keys) == keys
    assert namespace_problems(keys) == []


def test_the_reader_keeps_a_key_of_an_unknown_namespace_for_the_loader_to_refuse() -> None:
    """As the CLI does: the judgement is the loader's, so `make plan` and `pulumi up` give the same lines."""
    assert config_keys({"kubernetes:context": "kind", "zone": "z"}) == {
        "kubernetes:context": "kind",
        "tpu-slicing:zone": "z",
    }


def test_every_unknown_namespace_is_one_line_at_once_in_key_order() -> None:
    problems = namespace_problems(["tpu-slicng:zone", "gcp:project", "kubernetes:context", "aws:region"])
    assert [p.split(":")[0] for p in problems] == [
        "config key 'aws",
        "config key 'kubernetes",
        "config key 'tpu-slicng",
    ]


def test_the_plan_reads_stack_files_through_the_cli_reader(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text("config:\n  gcp:project: p\n  zone: us-central1-ai1a\n")
    config, _ = engine.read_stack_config(path)
    assert config["tpu-slicing:zone"] == "us-central1-ai1a"
    path.write_text("config:\n  zone: a\n  zone: b\n")
    with pytest.raises(StackFileError, match=r"Pulumi\.x\.yaml: line 3"):
        engine.read_stack_config(path)


@pytest.mark.parametrize("path", sorted(ROOT.glob("Pulumi.*.yaml")), ids=lambda p: p.name)
def test_committed_stack_files_read_the_same_under_both_readers(path: Path) -> None:
    assert read(path) == yaml.safe_load(path.read_text())["config"]


# --- Stack names, as the CLI's tokens.ParseStackName accepts them -----------------------------------


@pytest.mark.parametrize("name", ["dev", "dev-b", "saxml-v5e", "a_b.c", "A1", "x" * 100, "..."])
def test_stack_names_the_cli_accepts_pass(name: str) -> None:
    assert stack_file.check_stack_name(name) == name


@pytest.mark.parametrize(
    "name", ["", "dev; touch /tmp/pwned", "dev --out /elsewhere", "a/b", "../etc", "dév", "dev\nx", "x" * 101]
)
def test_stack_names_the_cli_refuses_are_refused_in_one_line(name: str) -> None:
    with pytest.raises(StackFileError) as caught:
        stack_file.check_stack_name(name)
    message = str(caught.value)
    assert repr(name) in message and "\n" not in message, message
    assert "alphanumeric, hyphens, underscores, or periods" in message and "100" in message


@given(st.text(min_size=1, max_size=30))
def test_a_stack_name_passes_exactly_when_the_cli_pattern_matches(name: str) -> None:
    cli_accepts = re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", name, flags=re.ASCII) is not None
    try:
        stack_file.check_stack_name(name)
    except StackFileError:
        assert not cli_accepts, name
    else:
        assert cli_accepts, name


# --- The file itself: a regular UTF-8 file under the cap, every error one line naming it -------------------


def _refused(path: Path) -> str:
    with pytest.raises(StackFileError) as caught:
        read(path)
    message = str(caught.value)
    assert message.startswith(f"{path.name}: ") and "\n" not in message, message
    return message


def test_a_non_utf8_stack_file_names_the_file_and_the_byte_offset(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.x.yaml"
    data = b"config:\n  tpu-slicing:zone: caf\xe9\n"
    path.write_bytes(data)
    message = _refused(path)
    assert "not UTF-8: byte 0xe9 at offset 31" in message and data.index(b"\xe9") == 31, message


def test_a_stack_file_with_a_byte_order_mark_reads_as_the_cli_reads_it(tmp_path: Path) -> None:
    # go-yaml v3 (readerc.go, yaml_parser_determine_encoding) reads UTF-8, or UTF-16 after its BOM.
    path = tmp_path / "Pulumi.x.yaml"
    text = "config:\n  tpu-slicing:zone: us-central1-ai1a\n"
    for encoded in (b"\xef\xbb\xbf" + text.encode(), text.encode("utf-16"), b"\xfe\xff" + text.encode("utf-16-be")):
        path.write_bytes(encoded)
        assert read(path) == {"tpu-slicing:zone": "us-central1-ai1a"}


def test_a_fifo_a_directory_and_a_device_are_refused_without_reading(tmp_path: Path) -> None:
    fifo = tmp_path / "Pulumi.fifo.yaml"
    os.mkfifo(fifo)
    folder = tmp_path / "Pulumi.folder.yaml"
    folder.mkdir()
    device = tmp_path / "Pulumi.zero.yaml"
    device.symlink_to("/dev/zero")
    found: dict[Path, str] = {}

    def judge() -> None:
        for path in (fifo, folder, device):
            found[path] = _refused(path)

    # Reading a FIFO with no writer would block, /dev/zero would never end: judge in a thread.
    worker = threading.Thread(target=judge, daemon=True)
    worker.start()
    worker.join(20)
    if worker.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # unblock the reader before failing
        pytest.fail("reading a stack file that is not a regular file did not return")
    assert "not a regular file (a FIFO)" in found[fifo]
    assert "not a regular file (a directory)" in found[folder]
    assert "not a regular file (a character device)" in found[device]


def test_a_stack_file_over_the_cap_says_the_cap_and_its_size(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.big.yaml"
    body = "config:\n  tpu-slicing:zone: us-central1-ai1a\n"
    path.write_text(body + "#" * (stack_file.MAX_BYTES - len(body)))
    assert read(path) == {"tpu-slicing:zone": "us-central1-ai1a"}  # at the cap: read
    path.write_text(body + "#" * (stack_file.MAX_BYTES - len(body) + 1))
    message = _refused(path)
    assert f"{stack_file.MAX_BYTES + 1} bytes" in message and f"cap of {stack_file.MAX_BYTES} bytes" in message


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("config:\n  a: [1, 2\n", "line 3, column 1: not valid YAML"),
        ("config:\n  a: b: c\n", "line 2, column 7: not valid YAML"),
        ("config:\n  a: \x07\n", "not valid YAML: unacceptable character #x0007"),
        ("config: [1, 2]\n", "`config:` is a mapping"),
        ("config:\n  ? [a, b]\n  : 1\n", "line 2: a key is a list"),
        ("- config\n", "a stack file is a mapping"),
    ],
)
def test_every_error_is_one_line_naming_the_file(text: str, fragment: str, tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text(text)
    assert fragment in _refused(path)


def test_a_stack_file_that_cannot_be_opened_is_one_line(tmp_path: Path) -> None:
    assert "cannot read" in _refused(tmp_path / "Pulumi.missing.yaml")


# --- Namespaces: only those the program reads ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("tpu-slіcing:zone", "tpu-slicing:zone"),  # Cyrillic і (U+0456)
        ("tpu\u2010slicing:zone", "tpu-slicing:zone"),  # HYPHEN
        ("tpu\u2011slicing:zone", "tpu-slicing:zone"),  # NON-BREAKING HYPHEN
        ("tpu\u2212slicing:zone", "tpu-slicing:zone"),  # MINUS SIGN
        ("TPU-Slicing:zone", "tpu-slicing:zone"),
        (" tpu-slicing:zone", "tpu-slicing:zone"),
        ("tpu-slicing :zone", "tpu-slicing:zone"),
        ("tpu-slicing\u200b:zone", "tpu-slicing:zone"),  # ZERO WIDTH SPACE
        ("GCP:project", "gcp:project"),
        ("gсp:project", "gcp:project"),  # Cyrillic с (U+0441)
        ("Pulumi:disable-default-providers", "pulumi:disable-default-providers"),
    ],
)
def test_a_look_alike_namespace_is_refused_naming_the_key_meant(key: str, meant: str) -> None:
    message = _namespace_refused(key)
    assert repr(key) in message and f"allowed: {meant}" in message and "\n" not in message, message


@pytest.mark.parametrize("namespace", ["kubernetes", "command", "aws", "gcp-beta", "config"])
def test_a_namespace_the_program_never_reads_is_refused(namespace: str) -> None:
    assert re.search(
        rf"'{namespace}:x'.*allowed namespaces: gcp, pulumi, tpu-slicing", _namespace_refused(f"{namespace}:x")
    )


# Look-alikes of the ASCII letters of `tpu-slicing` (Unicode's confusables.txt), Unicode hyphens and
# dashes, fullwidth forms (NFKC folds them), and whitespace the eye does not see.
LOOK_ALIKES = {
    "t": "ｔТ",
    "p": "рρＰ",
    "u": "υսｕ",
    "-": "\u2010\u2011\u2012\u2013\u2014\u2212\ufe63\uff0d",
    "s": "ѕｓЅ",
    "l": "ӏⅼℓ",
    "i": "іıɩιІ",
    "c": "сϲｃС",
    "n": "ոｎ",
    "g": "ɡｇ",
}
_SPACE = st.sampled_from(["", " ", "\t", "\u00a0", "\u2003", "\u200b", "\n"])


@st.composite
def look_alike(draw: st.DrawFn, namespace: str = stack_file.PROJECT) -> str:
    letters = [draw(st.sampled_from([c, c.upper(), *LOOK_ALIKES.get(c, "")])) for c in namespace]
    return draw(_SPACE) + "".join(letters) + draw(_SPACE)


@given(look_alike(), st.sampled_from(["zone", "serving", "hfToken"]))
def test_every_look_alike_of_the_projects_namespace_is_refused_and_named(namespace: str, rest: str) -> None:
    assume(namespace != stack_file.PROJECT)
    key = f"{namespace}:{rest}"
    message = _namespace_refused(key)
    assert repr(key) in message and f"allowed: tpu-slicing:{rest}" in message and "\n" not in message, message


@given(st.text(min_size=1, max_size=20).filter(lambda ns: ":" not in ns and ns not in stack_file.NAMESPACES))
def test_any_namespace_the_program_does_not_know_is_refused(namespace: str) -> None:
    assert "\n" not in _namespace_refused(f"{namespace}:key")


@pytest.mark.parametrize("stack", ["dev", "saxml-v5e"])
def test_the_known_namespaces_are_the_project_the_engine_and_the_default_providers(stack: str) -> None:
    """A provider the program reaches through its default provider reads its namespace of the stack's
    config; one reached only through an explicit provider (every Kubernetes object: backends/platform.py,
    `cluster_provider`) reads none of it, and pulumi-command has no configuration at all."""
    plan = engine.run_stack(stack)
    default = {r.type.split(":")[0] for r in plan.resources if r.custom and not r.provider}
    assert default - {"pulumi", "command"} == {"gcp"}  # pulumi: the explicit providers themselves
    assert set(stack_file.NAMESPACES) == {stack_file.PROJECT, "pulumi", "gcp"}


@pytest.mark.parametrize(
    ("environment", "named"),
    [
        ("environment:\n  - tpu/fleet-defaults\n  - tpu/gcp-login\n", "tpu/fleet-defaults, tpu/gcp-login"),
        ("environment:\n  imports:\n    - tpu/fleet-defaults\n", "tpu/fleet-defaults"),
    ],
)
def test_a_stack_file_that_imports_an_environment_is_never_planned_without_it(
    environment: str, named: str, tmp_path: Path
) -> None:
    path = tmp_path / "Pulumi.esc.yaml"
    path.write_text(environment + "config:\n  tpu-slicing:zone: us-central1-c\n")
    with pytest.raises(StackFileError) as err:
        read(path)
    said = str(err.value)
    assert said.startswith(f"Pulumi.esc.yaml: imports the ESC environment(s) {named},") and "\n" not in said
    # `make stacks` (and the fleet) report the file in the same line, with the others checked.
    configs, problems = stacks.load_stacks(tmp_path)
    assert configs == {} and [str(p) for p in problems] == [f"esc: {said}"]


def test_an_inline_environment_is_refused_for_pulumi_cloud_evaluates_it(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.esc.yaml"
    path.write_text(
        "environment:\n  imports:\n    - tpu/fleet\n  values:\n    pulumiConfig:\n"
        "      tpu-slicing:zone: us-central1-c\n"
    )
    with pytest.raises(StackFileError) as err:
        read(path)
    assert str(err.value).startswith("Pulumi.esc.yaml: has an inline environment (`environment:` with `values:`)")


def test_an_empty_environment_list_imports_nothing(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.esc.yaml"
    path.write_text("environment: []\nconfig:\n  tpu-slicing:zone: us-central1-c\n")
    assert read(path) == {"tpu-slicing:zone": "us-central1-c"}
