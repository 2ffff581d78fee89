"""`python -m plan` and its make targets never damage the checkout: stack names as the Pulumi CLI takes
them, outputs never onto a tracked file, STACK and BASE one argument each, and one line, no traceback,
for every refusal."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from plan import document, engine, stacks
from plan.__main__ import main

ROOT = engine.ROOT
ALLOWED = "alphanumeric, hyphens, underscores, or periods"
BAD_NAMES = ["dev; touch /tmp/x", "dev --out /elsewhere", "../../etc/passwd", "", "dev\nx", "dév", "x" * 101, ".", ".."]
COMMANDS = {"plan": [], "preview": ["--preview"], "diff": ["diff", "--base", "HEAD"], "graph": ["graph"]}


def git_repository(folder: Path) -> Path:
    """A repository with one tracked file, `tracked.json`, and one untracked, `scratch.json`."""
    folder.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    (folder / "tracked.json").write_text("{}\n")
    (folder / "scratch.json").write_text("{}\n")
    for command in (["init", "-q"], ["add", "tracked.json"], ["commit", "-q", "-m", "x"]):
        subprocess.run(["git", "-C", str(folder), *command], env=env, check=True, capture_output=True)
    return folder


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and err.endswith("\n") and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
@pytest.mark.parametrize("command", COMMANDS.values(), ids=COMMANDS.keys())
def test_every_command_refuses_a_stack_name_the_cli_refuses(
    command: list[str], name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*command, f"--stack={name}"]) == 2
    err = one_line(capsys.readouterr().err)
    assert repr(name) in err and "allowed:" in err, err
    if name not in (".", ".."):
        assert ALLOWED in err, err


def test_a_refused_stack_name_prints_no_traceback_from_the_shell() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "plan", "--stack", "dev; touch /tmp/x"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert "stack name 'dev; touch /tmp/x' is not allowed" in one_line(done.stderr)


def test_a_revision_is_never_read_as_an_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", "--stack", "dev", "--base=--output=/tmp/x"]) == 2
    assert "'--output=/tmp/x' is not a revision" in one_line(capsys.readouterr().err)


def _with(found: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stacks, "stack_files", lambda root=ROOT: found)


def test_stacks_names_a_stack_file_whose_stack_name_is_invalid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "Pulumi.dev; touch x.yaml"
    bad.write_text((ROOT / "Pulumi.dev.yaml").read_text())
    _with({**stacks.stack_files(), "dev; touch x": bad}, monkeypatch)
    assert main(["stacks"]) == 1
    out = capsys.readouterr().out
    line = "  INVALID Pulumi.dev; touch x.yaml: stack name 'dev; touch x' is not allowed"
    assert any(row.startswith(line) and ALLOWED in row for row in out.splitlines()), out
    assert main(["stacks", "--json"]) == 2  # the CI matrix never gets the name
    assert "Pulumi.dev; touch x.yaml: stack name 'dev; touch x' is not allowed" in one_line(capsys.readouterr().err)


def test_stacks_reports_each_unreadable_stack_file_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.folder.yaml").mkdir()
    (tmp_path / "Pulumi.latin1.yaml").write_bytes(b"config:\n  zone: caf\xe9\n")
    (tmp_path / "Pulumi.empty.yaml").write_text("")
    (tmp_path / "Pulumi.k8s.yaml").write_text("config:\n  kubernetes:context: kind\n")
    lines, problems = stacks.report(tmp_path)
    assert len(problems) == 4
    invalid = sorted(line for line in lines if line.startswith("  INVALID "))
    assert invalid[0].startswith("  INVALID Pulumi.empty.yaml: gcp:project: is required"), invalid
    assert "tpu-slicing:zone: is required" in invalid[0]
    assert invalid[1].startswith("  INVALID Pulumi.folder.yaml: is not a regular file (a directory)"), invalid
    assert invalid[2].startswith("  INVALID Pulumi.k8s.yaml: config key 'kubernetes:context'"), invalid
    assert invalid[3].startswith("  INVALID Pulumi.latin1.yaml: not UTF-8: byte 0xe9 at offset 19"), invalid


def test_an_empty_stack_file_names_every_missing_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "Pulumi.empty.yaml").write_text("")
    monkeypatch.setattr(engine, "stack_file", lambda name, root=None: tmp_path / f"Pulumi.{name}.yaml")
    assert main(["--stack", "empty", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error in Pulumi.empty.yaml: invalid stack configuration (2 problem(s))"), err
    assert "gcp:project: is required" in err and "tpu-slicing:zone: is required" in err, err


# --- Outputs --------------------------------------------------------------------------------------------


def test_json_onto_the_project_file_is_refused_and_the_file_kept(capsys: pytest.CaptureFixture[str]) -> None:
    project = ROOT / "Pulumi.yaml"
    before = project.read_bytes()
    try:
        assert main(["--stack", "dev", "--json", str(project)]) == 2
    finally:
        if project.read_bytes() != before:  # the bug this guards against: put the file back
            project.write_bytes(before)
            pytest.fail("python -m plan --json Pulumi.yaml overwrote the project file")
    err = one_line(capsys.readouterr().err)
    assert "Pulumi.yaml is a file git tracks" in err and "allowed:" in err


@pytest.mark.parametrize(
    "command",
    [
        ["--stack", "dev", "--json", "{repo}/tracked.json"],
        ["--stack", "dev", "--json", "{link}"],
        ["--stack", "dev", "--out", "{repo}"],
        ["diff", "--stack", "dev", "--base", "HEAD", "--output", "{repo}/tracked.json"],
        ["diff", "--stack", "dev", "--base", "HEAD", "--json", "{repo}/tracked.json"],
        ["graph", "--stack", "dev", "--mermaid", "{repo}/tracked.json"],
        ["graph", "--stack", "dev", "--dot", "{link}"],
        ["graph", "--stack", "dev", "--image", "{repo}/tracked.json"],
        ["graph", "--stack", "dev-b", "--mermaid", str(ROOT / "docs" / "dev-graph.mmd")],
    ],
    ids=" ".join,
)
def test_no_command_writes_onto_a_tracked_file(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = git_repository(tmp_path / "repo")
    link = tmp_path / "link.json"
    link.symlink_to(repo / "tracked.json")
    mermaid = (ROOT / "docs" / "dev-graph.mmd").read_bytes()
    assert main([word.format(repo=repo, link=link) for word in command]) == 2
    err = one_line(capsys.readouterr().err)
    assert "git tracks" in err, err
    assert (repo / "tracked.json").read_text() == "{}\n"
    assert sorted(p.name for p in repo.iterdir()) == [".git", "scratch.json", "tracked.json"]
    assert (ROOT / "docs" / "dev-graph.mmd").read_bytes() == mermaid


@pytest.mark.parametrize(
    ("command", "fragment"),
    [
        (["--json", "{tmp}"], "is a folder"),
        (["--json", "{tmp}/missing/plan.json"], "does not exist"),
        (["--out", "{tmp}/file"], "is not a folder"),
        (["--out", "{tmp}/missing/deeper"], "does not exist"),
        (["--out", "{tmp}/out", "--json", "{tmp}/file/plan.json"], "is not a folder"),
        (["diff", "{tmp}/missing.json", "{tmp}/file"], "cannot read the plan document"),
        (["diff", "{tmp}/file", "{tmp}/file"], "cannot read the plan document"),
        (["diff", "--base", "HEAD", "--output", "{tmp}/same", "--json", "{tmp}/same"], "both write"),
        (["graph", "--image", "{tmp}"], "is a folder"),
        (["graph", "--mermaid", "{tmp}/missing/graph.mmd"], "does not exist"),
    ],
    ids=lambda c: " ".join(c) if isinstance(c, list) else c,
)
def test_a_bad_output_or_input_path_ends_in_one_line(
    command: list[str], fragment: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("not json\n")
    assert main([word.format(tmp=tmp_path) for word in command]) == 2
    assert fragment in one_line(capsys.readouterr().err)
    assert not (tmp_path / "missing").exists()


def test_a_failing_graphviz_ends_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dot = tmp_path / "bin" / "dot"
    dot.parent.mkdir()
    dot.write_text(
        '#!/bin/sh\necho "Error: renderer for nope is unavailable" >&2\necho "Use one of: svg png" >&2\nexit 1\n'
    )
    dot.chmod(0o755)
    monkeypatch.setenv("PATH", f"{dot.parent}:{os.environ['PATH']}")
    assert main(["graph", "--stack", "dev", "--image", str(tmp_path / "graph.nope")]) == 2
    err = one_line(capsys.readouterr().err)
    assert "Graphviz dot failed: Error: renderer for nope is unavailable Use one of: svg png" in err, err


def test_outputs_under_build_get_their_folders(tmp_path: Path) -> None:
    top = ROOT / "build" / f"test-plan-cli-{tmp_path.name}"
    target = top / "deeper" / "plan.json"
    try:
        assert main(["--stack", "dev", "--out", str(tmp_path / "out"), "--json", str(target)]) == 0
        assert target.read_text().startswith("{")
    finally:
        shutil.rmtree(top, ignore_errors=True)


# --- Never over a file the plan did not write; never another revision's code unasked ---------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["--stack", "dev", "--out", "{tmp}/out", "--json", "{file}"],
        ["diff", "{doc}", "{doc}", "--output", "{file}"],
        ["diff", "{doc}", "{doc}", "--json", "{file}"],
        ["graph", "--stack", "dev", "--mermaid", "{file}"],
        ["graph", "--stack", "dev", "--dot", "{file}"],
        ["schema", "--out", "{file}"],
        ["schema", "--reference", "{file}"],
    ],
    ids=" ".join,
)
def test_no_command_overwrites_a_hand_written_file_unless_forced(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "notes.md"
    mine.write_text("my notes\n")
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps(document.empty("dev")))
    argv = [word.format(tmp=tmp_path, file=mine, doc=doc) for word in command]
    assert main(argv) == 2
    err = one_line(capsys.readouterr().err)
    assert f"{mine} exists and the plan did not write it" in err and "--force" in err, err
    assert mine.read_text() == "my notes\n"
    assert main([*argv, "--force"]) == 0
    assert mine.read_text() != "my notes\n"
    capsys.readouterr()
    assert main(argv) == 0  # now the plan's own: rewritten without --force


def test_a_stack_file_is_never_written_even_through_a_json_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack_file = tmp_path / "Pulumi.dev.yaml"  # untracked: a copy, or a stack file kept out of git
    stack_file.write_bytes((ROOT / "Pulumi.dev.yaml").read_bytes())
    (tmp_path / "plan.json").symlink_to(stack_file)
    for target in ("plan.json", "Pulumi.dev.yaml", "Pulumi.dev.json"):
        assert (
            main(["--stack", "dev", "--out", str(tmp_path / "out"), "--json", str(tmp_path / target), "--force"]) == 2
        )
        err = one_line(capsys.readouterr().err)
        assert "is named as a Pulumi project or stack file" in err and "(--force or not)" in err, err
    assert stack_file.read_bytes() == (ROOT / "Pulumi.dev.yaml").read_bytes()
    assert not (tmp_path / "Pulumi.dev.json").exists() and not (tmp_path / "out").exists()


def test_make_schema_and_docs_regenerate_the_committed_files_without_force(
    capsys: pytest.CaptureFixture[str],
) -> None:
    schema, reference = ROOT / "docs" / "stack-file.schema.json", ROOT / "docs" / "configuration-reference.md"
    before = schema.read_bytes(), reference.read_bytes()
    assert main(["schema", "--out", str(schema), "--reference", str(reference)]) == 0
    assert (schema.read_bytes(), reference.read_bytes()) == before  # fresh copies: rewritten identically
    mermaid = ROOT / "docs" / "dev-graph.mmd"
    text = mermaid.read_bytes()
    assert main(["graph", "--stack", "dev", "--mermaid", str(mermaid)]) == 0
    assert mermaid.read_bytes() == text
    capsys.readouterr()


def test_an_out_folder_keeps_a_file_no_plan_wrote_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["--stack", "dev", "--out", str(out)]) == 0
    name = next(p.name for p in out.glob("*.yaml"))
    marker = out / ".tpu-slicing-plan"
    marker.write_text("".join(line + "\n" for line in marker.read_text().splitlines() if line != name))
    (out / name).write_text("edited by hand\n")  # a file of the object's name that no plan wrote
    capsys.readouterr()
    assert main(["--stack", "dev", "--out", str(out)]) == 2
    err = one_line(capsys.readouterr().err)
    assert f"{out / name} exists and no plan wrote it" in err and "--force" in err, err
    assert (out / name).read_text() == "edited by hand\n"
    assert main(["--stack", "dev", "--out", str(out), "--force"]) == 0
    assert (out / name).read_text() != "edited by hand\n"
    (out / "Pulumi.dev.yaml").write_text("config: {}\n")  # listed by a hand edit: still never removed
    marker.write_text(marker.read_text() + "Pulumi.dev.yaml\n")
    assert main(["--stack", "dev", "--out", str(out)]) == 0
    assert (out / "Pulumi.dev.yaml").read_text() == "config: {}\n"


def test_diff_help_says_that_a_revision_s_code_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "RUNNING THAT REVISION'S OWN CODE" in text and "--trust-revision" in text, text


def _git(folder: Path, *command: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_CONFIG_NOSYSTEM": "1"}
    done = subprocess.run(["git", "-C", str(folder), *command], env=env, check=True, capture_output=True, text=True)
    return done.stdout.strip()


@pytest.fixture
def revisions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A throwaway repository as engine.ROOT whose `plan` is a stand-in that leaves a mark when it runs:
    `main` (the local branch checked out), `merged` (origin's default branch, one commit past `main`:
    merged since the last pull), `origin/review` (another branch of origin), `origin/pr/1` (a pull
    request fetched under origin's refs), `pr-1` (one fetched into a local branch), `fork/pr`
    (another remote), `tag-only` (a tag no branch reaches) and `dangling` (a commit left on no ref)."""
    repo = tmp_path / "repo"
    (repo / "plan").mkdir(parents=True)
    ran = tmp_path / "ran"
    ran.mkdir()
    (repo / "plan" / "__init__.py").write_text("")
    (repo / "Pulumi.dev.yaml").write_text("config: {}\n")

    def commit(label: str) -> str:
        # What `python -m plan --stack S --out DIR --json FILE` writes, and a mark that this code ran.
        program = (
            "import json, pathlib, sys\n"
            f"pathlib.Path({str(ran / label.replace('/', '-'))!r}).write_text('')\n"
            f"pathlib.Path(sys.argv[sys.argv.index('--json') + 1]).write_text({json.dumps(document.empty('dev'))!r})\n"
        )
        (repo / "plan" / "__main__.py").write_text(program)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", label)
        return _git(repo, "rev-parse", "HEAD")

    _git(repo, "init", "-q", "-b", "main")
    found = {"main": commit("main")}
    for label in ("merged", "origin/review", "origin/pr/1", "pr-1", "fork/pr", "tag-only", "dangling"):
        _git(repo, "checkout", "-q", "--detach", "main")
        found[label] = commit(label)
    _git(repo, "update-ref", "refs/remotes/origin/main", found["merged"])
    _git(repo, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main")
    _git(repo, "update-ref", "refs/remotes/origin/review", found["origin/review"])
    _git(repo, "update-ref", "refs/remotes/origin/pr/1", found["origin/pr/1"])
    _git(repo, "branch", "pr-1", found["pr-1"])
    _git(repo, "update-ref", "refs/remotes/fork/pr", found["fork/pr"])
    _git(repo, "tag", "tag-only", found["tag-only"])
    _git(repo, "checkout", "-q", "main")
    monkeypatch.setattr(engine, "ROOT", repo)
    return {**found, "ran": str(ran)}


@pytest.mark.parametrize("label", ["pr-1", "origin/pr/1", "origin/review", "fork/pr", "tag-only", "dangling"])
@pytest.mark.parametrize("option", ["--base", "--head"])
def test_diff_refuses_to_run_an_untrusted_revision(
    revisions: dict[str, str], label: str, option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    other = "--head" if option == "--base" else "--base"
    revision = label if label != "dangling" else revisions[label]
    assert main(["diff", "--stack", "dev", "--no-cache", option, revision, other, "main"]) == 2
    err = one_line(capsys.readouterr().err)
    said = f"{option} {revision!r} ({revisions[label][:12]}) is neither in HEAD's history nor in origin/main"
    assert said in err, err
    assert "--trust-revision" in err, err
    assert not any(Path(revisions["ran"]).iterdir()), "a refused revision's code ran"


@pytest.mark.parametrize("label", ["merged", "pr-1", "tag-only", "dangling"])
def test_diff_runs_a_revision_it_trusts_or_is_told_to(
    revisions: dict[str, str], label: str, capsys: pytest.CaptureFixture[str]
) -> None:
    trust = [] if label == "merged" else ["--trust-revision"]
    assert main(["diff", "--stack", "dev", "--no-cache", "--base", "main", "--head", revisions[label], *trust]) == 0
    assert "No changes." in capsys.readouterr().out
    assert sorted(p.name for p in Path(revisions["ran"]).iterdir()) == sorted({"main", label.replace("/", "-")})


# --- make: STACK and BASE are one argument each -----------------------------------------------------------


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the working tree (no .git) and a virtualenv stand-in newer than the requirements,
    so that `make plan` builds nothing and runs this checkout's code with the test's interpreter."""
    copy = tmp_path_factory.mktemp("checkout")
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    )
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            (copy / name).write_bytes(source.read_bytes())
    python = copy / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    (copy / "venv" / ".runtime").touch()
    return copy


def make(checkout: Path, target: str, **variables: str) -> subprocess.CompletedProcess[str]:
    words = [f"{name}={value}" for name, value in variables.items()]
    return subprocess.run(
        ["make", "-s", "-C", str(checkout), target, f"VENV={checkout / 'venv'}", *words],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


INJECTIONS = [
    "dev; touch {marker}",
    "dev && touch {marker}",
    "$(shell touch {marker})",
    "`touch {marker}`",
    "$$(touch {marker})",
    "dev' ; touch {marker} ; '",
    'dev" ; touch {marker} ; "',
]


@pytest.mark.parametrize("value", INJECTIONS)
@pytest.mark.parametrize(("target", "variable"), [("plan", "STACK"), ("graph", "STACK"), ("diff", "BASE")])
def test_make_runs_nothing_a_variable_holds(
    checkout: Path, tmp_path: Path, target: str, variable: str, value: str
) -> None:
    marker = tmp_path / "pwned"
    done = make(checkout, target, **{variable: value.format(marker=marker)})
    assert not marker.exists(), f"make {target} {variable}={value!r} ran a command"
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    refusal = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert len(refusal) == 1, done.stderr


def test_make_never_turns_a_stack_into_more_arguments(checkout: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    done = make(checkout, "plan", STACK=f"dev --out {elsewhere}")
    assert done.returncode != 0 and not elsewhere.exists()
    assert f"stack name 'dev --out {elsewhere}' is not allowed" in done.stderr
    assert not (checkout / "build" / "plan" / "dev").exists()


def test_make_plan_still_plans_the_stack_it_is_given(checkout: Path) -> None:
    done = make(checkout, "plan", STACK="dev-b")
    assert done.returncode == 0, done.stderr
    assert "tpu-slicing plan for stack 'dev-b'" in done.stdout
    assert (checkout / "build" / "plan" / "dev-b").is_dir()
