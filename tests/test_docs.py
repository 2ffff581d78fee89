"""The docs' commands run, through the Makefile recipes they name, and their links resolve, so the docs
cannot rot.

The README is for a user and stays short; docs/ holds the rest, one page per task a reader comes with
(CONTRIBUTING.md, "Documentation"). The offline commands of the `bash` blocks in the README and in
every page of docs/ run here; every relative link and `#anchor` in those pages and CONTRIBUTING.md
must resolve, anchors as GitHub makes them from headings.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
README_MAX_LINES = 250
# The pages whose `bash` blocks are commands a reader is told to run.
COMMAND_PAGES = ("README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")))
# The pages whose links must resolve.
LINKED_PAGES = ("CONTRIBUTING.md", *COMMAND_PAGES)
# Offline commands a reader is told to run; `make test` is what this suite is part of.
RUNNABLE = ("make plan", "make preview", "make graph", "make stacks", "make diff", "python -m plan")
# `env`: the CLI carries ESC's commands (`pulumi env open`, pkg/v3/cmd/esc at v3.274.0).
PULUMI_SUBCOMMANDS = {"login", "stack", "config", "preview", "up", "destroy", "refresh", "cancel", "env"}


def bash_commands(text: str) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def documented_commands() -> list[str]:
    """The bash lines of every command page, each once, in page order (the README first)."""
    commands = [c for page in COMMAND_PAGES for c in bash_commands((ROOT / page).read_text())]
    return list(dict.fromkeys(commands))


def recipe(target: str) -> list[str]:
    """The shell lines of a Makefile target, with make's own variables left for substitution."""
    makefile = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(makefile) if re.match(rf"^{re.escape(target)}:", line))
    lines = []
    for line in makefile[start + 1 :]:
        if not line.startswith("\t"):
            break
        lines.append(line.strip().lstrip("-"))
    return lines


def suite_options() -> list[str]:
    """The pytest options `make unit` and `make check` share (the Makefile's SUITE), two workers on
    any machine."""
    line = next(line for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith("SUITE :="))
    return ["2" if word == "auto" else word for word in shlex.split(line.split(":=", 1)[1])]


def expand(line: str, variables: dict[str, str]) -> list[str]:
    for name, value in variables.items():
        # STACK and BASE reach the recipes as environment variables (the Makefile's `export`).
        line = line.replace(f"$({name})", value).replace(f"$$TPU_SLICING_{name}", shlex.quote(value))
    assert "$(" not in line and "$$" not in line, f"unknown make variable in {line!r}"
    return shlex.split(line)


def offline_commands() -> list[str]:
    return [c for c in documented_commands() if c.startswith(RUNNABLE)]


# --- Links and anchors ---------------------------------------------------------------------------


def outside_fences(text: str) -> Iterator[str]:
    """The lines outside fenced code blocks (a `#` there is a comment, a `[x](y)` is code)."""
    fence = ""
    for line in text.splitlines():
        opening = re.match(r"^\s*(```|~~~)", line)
        if opening:
            fence = "" if fence and opening.group(1) == fence else fence or opening.group(1)
        elif not fence:
            yield line


def prose_lines(text: str) -> Iterator[str]:
    """The lines outside fenced code blocks, inline code blanked (a link's text may hold code)."""
    return (re.sub(r"`[^`]*`", "``", line) for line in outside_fences(text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link text kept, lowercase, punctuation but `-` and `_` dropped,
    each space a `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor; a repeated one gets `-1`, `-2`, ... as on GitHub."""
    found: set[str] = set()
    seen: Counter[str] = Counter()
    for line in outside_fences(text):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            base = slug(heading.group(1))
            found.add(f"{base}-{seen[base]}" if seen[base] else base)
            seen[base] += 1
    return found


def broken_links(page: Path, text: str | None = None) -> list[str]:
    """Each relative link of `page` (its `text`, if given) whose file is missing or whose `#anchor`
    names no heading of the page it points to. Links with a scheme (https:, mailto:) are not judged."""
    text = page.read_text() if text is None else text
    problems = []
    for line in prose_lines(text):
        for target in re.findall(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?[^)]*\)", line):
            if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target):
                continue
            file, _, anchor = target.partition("#")
            destination = (page.parent / file) if file else page
            if file and not destination.exists():
                problems.append(f"{page.name}: {target}: no file {file}")
            elif anchor and destination.suffix == ".md":
                headings = anchors(text if destination == page else destination.read_text())
                if anchor not in headings:
                    problems.append(f"{page.name}: {target}: no heading #{anchor} in {destination.name}")
    return problems


# --- The tests ------------------------------------------------------------------------------------


def test_readme_lists_the_two_commands_first() -> None:
    commands = bash_commands(README)
    assert commands[:2] == ["make plan STACK=dev", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_readme_is_short() -> None:
    lines = len(README.splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move what is not for a first reader to docs/"


def test_the_command_pages_are_the_readme_and_every_docs_page() -> None:
    assert COMMAND_PAGES[0] == "README.md"
    assert {"docs/deploy.md", "docs/operations.md", "docs/troubleshooting.md", "docs/testing.md"} <= set(COMMAND_PAGES)
    assert {"make diff STACK=dev BASE=HEAD", "make stacks"} <= set(offline_commands())  # from docs/review.md


@pytest.mark.parametrize("command", offline_commands())
def test_documented_command_runs(command: str, tmp_path: Path) -> None:
    words = shlex.split(command)
    if words[0] == "make":
        target = words[1]
        variables = {"PY": sys.executable, "STACK": "dev", "BASE": "HEAD"}
        variables |= dict(w.split("=", 1) for w in words[2:])
        invocations = [expand(line, variables) for line in recipe(target)]
    else:
        invocations = [[sys.executable, *words[1:]]]
    for invocation in invocations:
        argv = [a.replace("build/", f"{tmp_path}/") for a in invocation]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, f"{command}: {' '.join(argv)}\n{done.stderr[-2000:]}"
        assert done.stdout or argv[-1].endswith((".json", ".mmd", ".svg")), command


def test_real_cloud_commands_use_real_pulumi_subcommands() -> None:
    pulumi = [shlex.split(c) for c in documented_commands() if c.startswith("pulumi ")]
    assert [c for c in bash_commands(README) if c.startswith("pulumi ")], "the README shows the real-cloud path"
    assert {words[1] for words in pulumi} <= PULUMI_SUBCOMMANDS
    assert any(words[1:3] == ["config", "set"] and "--secret" in words for words in pulumi)


@pytest.mark.parametrize("page", LINKED_PAGES)
def test_links_and_anchors_resolve(page: str) -> None:
    assert broken_links(ROOT / page) == []


def test_slugs_are_githubs() -> None:
    assert slug("Operations: changes after the first `up`") == "operations-changes-after-the-first-up"
    assert slug("What the tests run, and what `pulumi up` runs") == "what-the-tests-run-and-what-pulumi-up-runs"
    assert slug("The endpoint picker's loader") == "the-endpoint-pickers-loader"
    assert slug("See [the page](other.md) now") == "see-the-page-now"
    assert anchors("# Notes\n## Notes\n```bash\n# not a heading\n```\n## Notes\n") == {"notes", "notes-1", "notes-2"}


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    """The link check on a small page: what resolves passes, each broken link or anchor is named."""
    (tmp_path / "other.md").write_text("# Other\n\n## A `code` heading, with punctuation!\n")
    page = tmp_path / "page.md"
    text = (
        "# Page\n\n## Two words\n\n"
        "[a](other.md), [b](other.md#a-code-heading-with-punctuation), [c](#two-words), "
        "[`d`](https://example.com/x#y), ![e](other.md)\n"
        "[f](nowhere.md) and [g](other.md#no-such-heading), then (see [h](#three-words)).\n"
        "```bash\n[not a link](inside-a-fence.md)\n```\n"
        "`[nor this](in-code.md)`\n"
    )
    assert broken_links(page, text) == [
        "page.md: nowhere.md: no file nowhere.md",
        "page.md: other.md#no-such-heading: no heading #no-such-heading in other.md",
        "page.md: #three-words: no heading #three-words in page.md",
    ]


def test_the_test_command_runs_a_control_plane_group_on_one_worker(tmp_path: Path) -> None:
    """`make unit`'s pytest options keep every `xdist_group` on one worker (tests/control_plane.py
    XDIST_GROUP: one plane at a time). pytest 9.2 with pytest-xdist 3.8.0 silently spread them."""
    options = suite_options()
    log = tmp_path / "workers.log"
    for module in ("a", "b"):
        (tmp_path / f"test_{module}.py").write_text(
            "import os, pytest\n"
            "pytestmark = pytest.mark.xdist_group('plane')\n"
            "@pytest.fixture(scope='module', params=['x', 'y'])\n"
            "def plane(request):\n"
            f"    with open({str(log)!r}, 'a') as f:\n"
            "        f.write(os.environ['PYTEST_XDIST_WORKER'] + '\\n')\n"
            "def test_one(plane): pass\n"
            "def test_two(plane): pass\n"
        )
    (tmp_path / "test_free.py").write_text("".join(f"def test_{i}(): pass\n" for i in range(20)))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *options, "-p", "no:cacheprovider", "-c", "pytest.ini", "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    workers = log.read_text().split()
    assert len(workers) == 4 and len(set(workers)) == 1, workers
