"""Where the plan may write (plan/outputs.py): never onto a tracked file or a Pulumi file, never over a file it did
not write unless --force, never outside the folder given."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from plan import outputs
from plan.engine import ROOT
from plan.outputs import GENERATED, Generator, OutputError
from tests.test_plan_cli import git_repository


def refused(call: Callable[..., object], *args: object, **kwargs: object) -> str:
    with pytest.raises(OutputError) as caught:
        call(*args, **kwargs)
    message = str(caught.value)
    assert "\n" not in message and "allowed:" in message, message
    return message


def test_a_tracked_file_is_refused_and_an_untracked_one_allowed(tmp_path: Path) -> None:
    repo = git_repository(tmp_path / "repo")
    assert "is a file git tracks" in refused(outputs.file, repo / "tracked.json", "--json")
    assert "scratch.json exists and the plan did not write it" in refused(outputs.file, repo / "scratch.json", "--json")
    assert outputs.file(repo / "scratch.json", "--json", force=True) == repo / "scratch.json"
    assert "is a file git tracks" in refused(outputs.file, repo / "tracked.json", "--json", force=True)
    assert outputs.file(repo / "new.json", "--json") == repo / "new.json"
    assert "is a file git tracks" in refused(outputs.file, ROOT / "Pulumi.yaml", "--json")


def test_a_path_is_judged_where_it_resolves(tmp_path: Path) -> None:
    repo = git_repository(tmp_path / "repo")
    link = tmp_path / "link.json"
    link.symlink_to(repo / "tracked.json")
    assert "tracked.json is a file git tracks" in refused(outputs.file, link, "--json")
    assert "tracked.json is a file git tracks" in refused(outputs.file, repo / "sub" / ".." / "tracked.json", "--json")
    folder_link = tmp_path / "out-link"
    folder_link.symlink_to(repo)
    assert "holds files git tracks" in refused(outputs.folder, folder_link)


def test_pathspec_characters_are_file_names_not_patterns(tmp_path: Path) -> None:
    repo = git_repository(tmp_path / "repo")
    assert outputs.file(repo / "*.json", "--json") == repo / "*.json"
    assert outputs.file(repo / ":(glob)*", "--json") == repo / ":(glob)*"


def test_a_folder_a_fifo_and_git_metadata_are_refused(tmp_path: Path) -> None:
    repo = git_repository(tmp_path / "repo")
    assert "is a folder" in refused(outputs.file, tmp_path, "--json")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert "not a regular file" in refused(outputs.file, fifo, "--json")
    assert ".git folder" in refused(outputs.file, repo / ".git" / "config", "--json")
    assert ".git folder" in refused(outputs.folder, repo / ".git" / "objects")


def test_a_missing_folder_is_refused_except_under_build(tmp_path: Path) -> None:
    assert "does not exist" in refused(outputs.file, tmp_path / "missing" / "x.json", "--json")
    assert "does not exist" in refused(outputs.folder, tmp_path / "missing" / "deeper")
    (tmp_path / "plain").write_text("")
    assert "is not a folder" in refused(outputs.file, tmp_path / "plain" / "x.json", "--json")
    assert "is not a folder" in refused(outputs.folder, tmp_path / "plain")
    under_build = ROOT / "build" / "never-made" / "deeper" / "x.json"
    assert outputs.file(under_build, "--json") == under_build.resolve()
    assert not under_build.parent.exists()  # checking writes nothing


def test_an_out_folder_is_never_the_checkout_or_above_it(tmp_path: Path) -> None:
    assert "holds the checkout" in refused(outputs.folder, ROOT)
    assert "holds the checkout" in refused(outputs.folder, ROOT.parent)
    assert outputs.folder(tmp_path / "new") == tmp_path / "new"


def test_the_generated_files_are_written_only_by_their_generator() -> None:
    mermaid = ROOT / "docs" / "dev-graph.mmd"
    assert outputs.file(mermaid, "--mermaid", generator=Generator("graph", "dev", "--mermaid")) == mermaid
    message = refused(outputs.file, mermaid, "--mermaid", generator=Generator("graph", "dev-b", "--mermaid"))
    assert "regenerated only by `python -m plan graph --stack dev --mermaid" in message
    refused(outputs.file, mermaid, "--dot", generator=Generator("graph", "dev", "--dot"))
    refused(outputs.file, mermaid, "--json")


def test_make_docs_writes_exactly_the_generated_files() -> None:
    """`make docs` and `make schema` write every generated tracked file, each by its own generator."""
    makefile = (ROOT / "Makefile").read_text()
    written = set()
    for target in ("docs", "schema"):
        recipe = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", makefile, flags=re.M)
        assert recipe is not None, target
        for line in recipe.group(1).splitlines():
            words = shlex.split(line.strip().lstrip("-"))
            command = words[words.index("plan") + 1]
            stack = words[words.index("--stack") + 1] if "--stack" in words else None
            for option in ("--mermaid", "--dot", "--image", "--out", "--reference"):
                if option in words:
                    path = words[words.index(option) + 1]
                    written.add((path, Generator(command, stack, option, target=target)))
    generated = {(path, generator) for path, generator in written if not path.startswith("build/")}
    assert generated == set(GENERATED.items())
    tracked = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", *GENERATED], capture_output=True, text=True, check=True
    )
    assert sorted(tracked.stdout.split()) == sorted(GENERATED)


def test_object_files_stay_in_their_folder(tmp_path: Path) -> None:
    assert outputs.inside(tmp_path, "ns--pod--a.yaml") == tmp_path / "ns--pod--a.yaml"
    for name in ("../a.yaml", "a/b.yaml", "..", ".", "", "a\0b"):
        with pytest.raises(OutputError):
            outputs.inside(tmp_path, name)


def test_two_outputs_of_one_command_never_share_a_file(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="--output and --json both write"):
        outputs.distinct({"--output": tmp_path / "a", "--json": tmp_path / "a"})
    outputs.distinct({"--output": tmp_path / "a", "--json": tmp_path / "b"})


# --- Never over a file the plan did not write ----------------------------------------------------------


def test_a_hand_written_file_is_kept_unless_forced(tmp_path: Path) -> None:
    notes = tmp_path / "notes.json"
    notes.write_text("my review notes\n")
    message = refused(outputs.file, notes, "--json")
    assert f"{notes} exists and the plan did not write it" in message and "--force" in message, message
    assert outputs.file(notes, "--json", force=True) == notes
    assert notes.read_text() == "my review notes\n"  # judging writes nothing


def test_a_file_the_plan_wrote_is_rewritten_until_someone_edits_it(tmp_path: Path) -> None:
    target = tmp_path / "plan.json"
    assert outputs.file(target, "--json") == target
    outputs.write_text(target, "{}\n")
    assert outputs.file(target, "--json") == target  # the plan's own: rewritten without --force
    target.write_text("{}\nedited by hand\n")
    assert "was changed since the plan wrote it" in refused(outputs.file, target, "--json")
    assert outputs.file(target, "--json", force=True) == target


@pytest.mark.parametrize(
    "name", ["Pulumi.yaml", "Pulumi.dev.yaml", "Pulumi.dev.json", "Pulumi.json", "Pulumi.x.yml", "PulumiPolicy.yaml"]
)
def test_a_pulumi_project_or_stack_file_is_never_written(name: str, tmp_path: Path) -> None:
    """Untracked too, new too, --force too: Pulumi reads `Pulumi[.<stack>].{json,yaml,yml}` as configuration."""
    assert "named as a Pulumi project or stack file" in refused(outputs.file, tmp_path / name, "--json", force=True)
    (tmp_path / name).write_text("config: {}\n")
    assert "(--force or not)" in refused(outputs.file, tmp_path / name, "--json", force=True)
    assert outputs.file(tmp_path / f"{name}.txt", "--json") == tmp_path / f"{name}.txt"


def test_a_json_name_that_leads_to_a_stack_file_is_refused(tmp_path: Path) -> None:
    stack_file = tmp_path / "Pulumi.dev.yaml"
    stack_file.write_text("config: {}\n")
    link = tmp_path / "plan.json"
    link.symlink_to(stack_file)
    assert "Pulumi.dev.yaml is named as a Pulumi" in refused(outputs.file, link, "--json", force=True)


def test_a_generated_file_is_rewritten_by_its_generator_without_force() -> None:
    for relative, generator in GENERATED.items():
        assert outputs.file(ROOT / relative, generator.option, generator=generator) == ROOT / relative
