"""CI workflows: lint clean, every action pinned, and their offline commands work."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi_policy import PolicyCustomTimeouts, PolicyResourceOptions, ResourceValidationArgs

from policy import guardrails

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
# `owner/repo[/path]@<full commit> # vX.Y.Z`: the text after `uses:`, its comment included.
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40} # v\d+\.\d+\.\d+$")
# The commit each release tag points at, read from the action's repository (`git rev-parse
# '<tag>^{commit}'`). A new version is a new line here, checked the same way.
RELEASES = {
    ("actions/checkout", "v4.2.2"): "11bd71901bbe5b1630ceea73d27597364c9af683",
    ("actions/setup-python", "v5.6.0"): "a26af69be951a213d495a4c3e4e4022e16d87065",
    ("actions/upload-artifact", "v4.6.2"): "ea165f8d65b6e75b540449e92b4886f43607fa02",
    ("actions/download-artifact", "v4.3.0"): "d3f86a106a0bac45b974a628896c90dbdf5c8093",
    ("actions/github-script", "v7.0.1"): "60a0d83039c74a4aee543508d2ffcb1c3799cdea",
    ("google-github-actions/auth", "v2.1.10"): "ba79af03959ebeac9769e648f473a284504d9193",
    ("google-github-actions/setup-gcloud", "v2.1.4"): "77e7a554d41e2ee56fc945c52dfd3f33d12def9a",
    ("pulumi/actions", "v6.6.1"): "8582a9e8cc630786854029b4e09281acd6794b58",
}
PLACEHOLDER_PROJECT = "example-tpu-project"


def _actionlint() -> str:
    found = shutil.which("actionlint") or str(Path(sys.executable).parent / "actionlint")
    if not Path(found).exists():
        pytest.fail("actionlint is not installed: it comes with requirements-dev.txt")
    return found


def _load(name: str) -> dict[Any, Any]:
    document = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())
    assert isinstance(document, dict)
    return document


def _triggers(document: dict[Any, Any]) -> Any:
    return document[True] if True in document else document["on"]  # YAML reads `on` as True


def _steps(document: dict[Any, Any]) -> list[dict[str, Any]]:
    return [step for job in document["jobs"].values() for step in job.get("steps", [])]


def _pulumi_steps(document: dict[Any, Any]) -> list[dict[str, Any]]:
    return [step for step in _steps(document) if step.get("uses", "").startswith("pulumi/actions@")]


def _step(document: dict[Any, Any], job: str, step_id: str) -> dict[str, Any]:
    return next(step for step in document["jobs"][job]["steps"] if step.get("id") == step_id)


def test_workflows_exist() -> None:
    names = {"ci.yml", "preview.yml", "preview-comment.yml", "deploy.yml", "destroy.yml", "drift.yml"}
    assert {p.name for p in WORKFLOWS} == names


def test_actionlint_is_clean() -> None:
    done = subprocess.run([_actionlint(), *map(str, WORKFLOWS)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  x:\n    runs-on: ubuntu-24.04\n    steps:\n      - run: echo ${{ matrix.nope }}\n"
    )
    done = subprocess.run([_actionlint(), str(broken)], capture_output=True, text=True, check=False)
    assert done.returncode != 0 and "matrix" in done.stdout


def _uses(document: object) -> list[str]:
    if isinstance(document, dict):
        return [v for k, v in document.items() if k == "uses" and isinstance(v, str)] + [
            u for v in document.values() for u in _uses(v)
        ]
    if isinstance(document, list):
        return [u for v in document for u in _uses(v)]
    return []


def _uses_lines(text: str) -> list[str]:
    """What follows `uses:` on each line, with its trailing comment (YAML parsing drops comments)."""
    return [m.group(1).strip() for m in re.finditer(r"^\s*(?:-\s+)?uses:\s*(.*)$", text, re.MULTILINE)]


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned(workflow: Path) -> None:
    text = workflow.read_text()
    lines = _uses_lines(text)
    assert lines, "a workflow without actions?"
    assert len(lines) == len(_uses(yaml.safe_load(text))), "one `uses:` per line, in block style"
    for action in lines:
        assert PINNED.match(action), f"{workflow.name}: {action} is not pinned to a full commit with its # vX.Y.Z"


@pytest.mark.parametrize(
    "action",
    [
        "actions/checkout@v4.2.2",
        "actions/checkout@v4",
        "actions/checkout@main",
        "actions/checkout@v4.2.2 # v4.2.2",
        "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683",
        "actions/checkout@11bd719 # v4.2.2",
        "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683 # v4",
        "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683 # main",
    ],
)
def test_a_tag_only_or_partial_pin_is_refused(action: str) -> None:
    assert not PINNED.match(action)


def test_a_full_commit_with_its_tag_passes() -> None:
    assert PINNED.match("actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683 # v4.2.2")
    assert PINNED.match("github/codeql-action/init@" + "0" * 40 + " # v3.1.0")


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_each_pin_is_the_verified_commit_of_its_tag(workflow: Path) -> None:
    for action in _uses_lines(workflow.read_text()):
        name_sha, tag = action.split(" # ")
        name, sha = name_sha.split("@")
        assert RELEASES.get((name, tag)) == sha, f"{workflow.name}: {action} is not a verified release commit"


def _engine_pulumi_version() -> str:
    go_mod = (ROOT / "tools" / "engine" / "pulumi" / "go.mod").read_text()
    found = re.search(r"^\s*github\.com/pulumi/pulumi/pkg/v3 v(\d+\.\d+\.\d+)\b", go_mod, re.MULTILINE)
    assert found, "tools/engine/pulumi/go.mod requires no github.com/pulumi/pulumi/pkg/v3"
    return found.group(1)


def test_every_pulumi_step_pins_the_engine_cli_version() -> None:
    version = _engine_pulumi_version()
    steps = [step for workflow in WORKFLOWS for step in _pulumi_steps(_load(workflow.name))]
    assert len(steps) == 4, "preview, deploy, destroy and drift each run pulumi/actions once"
    for step in steps:
        assert str(step.get("with", {}).get("pulumi-version")) == version, step


def test_pulumi_commands_create_or_select_their_stack() -> None:
    for name in ("preview.yml", "deploy.yml"):
        for step in _pulumi_steps(_load(name)):
            assert step["with"]["upsert"] is True, name
    # destroy.yml and drift.yml install the CLI only and select the stack without creating it.
    for name in ("destroy.yml", "drift.yml"):
        (install,) = _pulumi_steps(_load(name))
        assert "command" not in install["with"], name


def test_policy_venv_is_built_before_a_policy_pack_runs() -> None:
    for workflow in WORKFLOWS:
        for job in _load(workflow.name)["jobs"].values():
            ran = ""
            for step in job.get("steps", []):
                ran += step.get("run", "") + "\n"
                policy = step.get("with", {}).get("policyPacks") == "policy" or "--policy-pack policy" in step.get(
                    "run", ""
                )
                if policy:
                    before = ran if "run" not in step else ran.split(step["run"])[0]
                    assert "make policy-venv" in before, workflow.name
                    assert "make .venv/.runtime" in before, workflow.name


def test_write_access_is_limited() -> None:
    for workflow in WORKFLOWS:
        document = yaml.safe_load(workflow.read_text())
        assert document["permissions"] == {"contents": "read"} or workflow.name == "preview-comment.yml", workflow.name
        if "pull_request" in _triggers(document):
            # Jobs that run pull-request code get no write token; the cloud preview only an OIDC token.
            for name, job in document["jobs"].items():
                perms = job.get("permissions", {})
                assert {k for k, v in perms.items() if v == "write"} <= {"id-token"}, (workflow.name, name)


def _expressions(job: dict[str, Any]) -> list[str]:
    text = yaml.safe_dump(job)
    found = re.findall(r"\$\{\{(.*?)\}\}", text, re.DOTALL)
    conditions = [job.get("if", "")] + [step.get("if", "") for step in job.get("steps", [])]
    return found + [str(c) for c in conditions if c]


def test_no_pull_request_job_gets_a_secret() -> None:
    for workflow in WORKFLOWS:
        document = _load(workflow.name)
        if "pull_request" not in _triggers(document) and "pull_request_target" not in _triggers(document):
            continue
        for name, job in document["jobs"].items():
            for expression in _expressions(job):
                rest = re.sub(r"\bsecrets\.GITHUB_TOKEN\b", "", expression)
                assert not re.search(r"\bsecrets\b", rest), f"{workflow.name} job {name}: {expression.strip()}"


def test_the_secret_check_sees_a_secret() -> None:
    job = {"steps": [{"run": "x", "env": {"P": "${{ secrets.PULUMI_CONFIG_PASSPHRASE }}"}}]}
    assert any(re.search(r"\bsecrets\b", e) for e in _expressions(job))


def test_offline_diff_runs_for_every_stack_and_uploads_only_the_diff() -> None:
    document = _load("preview.yml")
    job = document["jobs"]["offline-diff"]
    assert job["strategy"]["matrix"]["stack"] == "${{ fromJSON(needs.stacks.outputs.stacks) }}"
    assert "if" not in job
    text = yaml.safe_dump(job)
    assert "number" not in text, "the pull-request number comes from preview-comment.yml's event"
    (upload,) = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["with"]["path"] == "pr-comment/${{ matrix.stack }}.md"


@pytest.mark.parametrize(("workflow", "job"), [("preview.yml", "cloud-preview"), ("deploy.yml", "up")])
def test_only_deployable_stacks_go_to_the_cloud(workflow: str, job: str) -> None:
    document = _load(workflow)
    assert document["jobs"]["stacks"]["outputs"]["deployable"] == "${{ steps.list.outputs.deployable }}"
    cloud = document["jobs"][job]
    assert cloud["strategy"]["matrix"]["stack"] == "${{ fromJSON(needs.stacks.outputs.deployable) }}"
    assert "needs.stacks.outputs.deployable != '[]'" in cloud["if"]


def _deployable_script(workflow: str) -> str:
    script = _step(_load(workflow), "stacks", "list")["env"]["DEPLOYABLE"]
    assert isinstance(script, str)
    return script


def test_preview_deploy_and_drift_agree_on_what_is_deployable() -> None:
    assert _deployable_script("preview.yml") == _deployable_script("deploy.yml") == _deployable_script("drift.yml")


def test_deployable_stacks_are_those_with_a_real_project(tmp_path: Path) -> None:
    projects: dict[str, object] = {
        "placeholder": PLACEHOLDER_PROJECT,
        "real": "my-tpu-project",
        "empty": "",
        "secret": {"secure": "v1:abc"},
    }
    for stack, project in projects.items():
        (tmp_path / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": {"gcp:project": project}}))
    (tmp_path / "Pulumi.unset.yaml").write_text("config:\n  tpu-slicing:zone: us-central1-ai1a\n")
    (tmp_path / "Pulumi.bare.yaml").write_text("")
    stacks = [*projects, "unset", "bare"]
    done = subprocess.run(
        [sys.executable, "-c", _deployable_script("deploy.yml"), json.dumps(stacks)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout) == ["real"]


def test_placeholder_stack_files_are_not_deployable() -> None:
    stacks = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in ROOT.glob("Pulumi.*.yaml"))
    done = subprocess.run(
        [sys.executable, "-c", _deployable_script("preview.yml"), json.dumps(stacks)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    placeholders = {
        s
        for s in stacks
        if yaml.safe_load((ROOT / f"Pulumi.{s}.yaml").read_text())["config"].get("gcp:project") == PLACEHOLDER_PROJECT
    }
    assert not placeholders & set(json.loads(done.stdout))


def test_destroy_is_manual_and_confirmed() -> None:
    document = _load("destroy.yml")
    triggers = document[True]
    assert list(triggers) == ["workflow_dispatch"]
    job = document["jobs"]["destroy"]
    assert job["if"] == "${{ inputs.stack == inputs.confirm }}"
    assert job["environment"] == "${{ inputs.stack }}"


def test_destroy_lifts_deletion_protection_through_the_policy_pack_first() -> None:
    job = _load("destroy.yml")["jobs"]["destroy"]
    script = "\n".join(step.get("run", "") for step in job["steps"])
    commands = [line.strip() for line in script.splitlines() if line.strip().startswith("pulumi ")]
    assert commands == [
        'pulumi stack select "$STACK"',
        "pulumi config set --stack \"$STACK\" --path 'tpu-slicing:cluster.deletionProtection' false",
        "pulumi config set --stack \"$STACK\" --path 'tpu-slicing:cluster.protect' false",
        'pulumi up --stack "$STACK" --yes --policy-pack policy --policy-pack-config policy/teardown-config.json',
        'pulumi destroy --stack "$STACK" --yes',
    ]
    assert "--create" not in script


def test_teardown_config_waives_cluster_deletion_protection() -> None:
    config = json.loads((ROOT / "policy" / "teardown-config.json").read_text())
    assert config == {"cluster-deletion-protection": {"allowClusterDeletion": True}}
    policies = {policy.name: policy for policy in guardrails.POLICIES}
    (name,) = config
    assert name == guardrails.cluster_deletion_protection.name and name in policies
    schema = guardrails.cluster_deletion_protection.config_schema
    assert schema is not None and schema.properties["allowClusterDeletion"]["type"] == "boolean"
    # With the file's config an unprotected cluster passes; without it, it does not.
    violations: list[str] = []
    opts = PolicyResourceOptions(False, [], False, [], PolicyCustomTimeouts(0, 0, 0), [], None)
    for policy_config in (config[name], None):
        args = ResourceValidationArgs(
            guardrails.CLUSTER,
            {"deletionProtection": False},
            "urn:pulumi:dev::tpu-slicing::gcp:container/cluster:Cluster::cluster",
            "cluster",
            opts,
            None,
            policy_config,
        )
        guardrails.validate_cluster_deletion_protection(args, lambda message, urn: violations.append(message))
        assert bool(violations) == (policy_config is None)


def test_deploy_runs_each_stack_behind_its_environment() -> None:
    job = _load("deploy.yml")["jobs"]["up"]
    assert job["environment"] == "${{ matrix.stack }}"
    (pulumi,) = [step for step in job["steps"] if step.get("uses", "").startswith("pulumi/actions@")]
    assert pulumi["with"]["command"] == "up" and pulumi["with"]["policyPacks"] == "policy"


def _comment_script() -> str:
    steps = _load("preview-comment.yml")["jobs"]["comment"]["steps"]
    (script,) = [s["with"]["script"] for s in steps if s.get("uses", "").startswith("actions/github-script@")]
    assert isinstance(script, str)
    return script


def test_preview_comment_runs_no_pull_request_code() -> None:
    document = _load("preview-comment.yml")
    assert list(_triggers(document)) == ["workflow_run"]
    steps = _steps(document)
    assert not any("run" in step for step in steps)
    for step in steps:
        if "checkout" in step.get("uses", ""):
            # The workflow_run default: the default branch, never the pull request's head.
            assert "ref" not in step["with"] and "repository" not in step["with"]
            assert step["with"]["persist-credentials"] is False


def test_preview_comment_takes_the_pull_request_from_the_event() -> None:
    text = (ROOT / ".github" / "workflows" / "preview-comment.yml").read_text()
    script = _comment_script()
    assert not re.search(r"""["'`/]number["'`]""", script), "reads a `number` file"
    assert "github.event.workflow_run.pull_requests[0].number" in text
    assert "github.event.workflow_run.head_sha" in text
    assert "eval(" not in script and "Function(" not in script and "child_process" not in script


def test_preview_comment_validates_stack_names_against_the_checkout() -> None:
    steps = _load("preview-comment.yml")["jobs"]["comment"]["steps"]
    (checkout,) = [s for s in steps if s.get("uses", "").startswith("actions/checkout@")]
    assert checkout["with"]["path"] == "base"
    assert 'readdirSync("base")' in _comment_script()


# Runs the github-script step's script under node with stand-ins for `github`, `context` and `core`.
HARNESS = """
const fs = require("fs");
const fixtures = JSON.parse(process.env.FIXTURES);
const calls = [];
const github = {
  paginate: async (method, args) => { calls.push({ kind: "paginate", method, args }); return fixtures[method] || []; },
  rest: {
    pulls: { list: "pulls.list" },
    issues: {
      listComments: "issues.listComments",
      createComment: async (args) => { calls.push({ kind: "create", args }); },
      updateComment: async (args) => { calls.push({ kind: "update", args }); },
    },
  },
};
const context = { repo: { owner: "owner", repo: "tpu-slicing" } };
const core = { warning: (message) => calls.push({ kind: "warning", message }) };
const AsyncFunction = Object.getPrototypeOf(async function () {}).constructor;
new AsyncFunction("require", "github", "context", "core", fs.readFileSync(process.argv[2], "utf8"))(
  require, github, context, core,
).then(() => console.log(JSON.stringify(calls)), (err) => { console.error(err); process.exit(1); });
"""


def _run_comment_script(tmp_path: Path, env: dict[str, str], fixtures: dict[str, Any]) -> list[dict[str, Any]]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the github-script step cannot be run here")
    (tmp_path / "script.js").write_text(_comment_script())
    (tmp_path / "harness.js").write_text(HARNESS)
    done = subprocess.run(
        [node, str(tmp_path / "harness.js"), str(tmp_path / "script.js")],
        cwd=tmp_path / "work",
        env={**os.environ, "FIXTURES": json.dumps(fixtures), "RUN_URL": "https://run", **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    calls = json.loads(done.stdout)
    assert isinstance(calls, list)
    return calls


def _workspace(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    (work / "base").mkdir(parents=True)
    for name in ("Pulumi.yaml", "Pulumi.dev.yaml", "Pulumi.big.yaml", "Pulumi.link.yaml"):
        (work / "base" / name).write_text("config: {}\n")
    for stack, text in {"dev": "dev diff", "evil": "evil diff", "big": "x" * 70000}.items():
        (work / "diffs" / f"plan-diff-{stack}").mkdir(parents=True)
        (work / "diffs" / f"plan-diff-{stack}" / f"{stack}.md").write_text(text)
    (work / "diffs" / "plan-diff-dev" / "number").write_text("999\n")
    (work / "diffs" / "plan-diff-link").mkdir()
    (work / "diffs" / "plan-diff-link" / "link.md").symlink_to(work / "base" / "Pulumi.yaml")
    return work


def _of(calls: list[dict[str, Any]], kind: str, method: str | None = None) -> list[Any]:
    return [c.get("args", c.get("message")) for c in calls if c["kind"] == kind and c.get("method") == method]


def test_preview_comment_posts_only_checked_out_stacks_to_the_event_pull_request(tmp_path: Path) -> None:
    _workspace(tmp_path)
    comments = [{"id": 5, "user": {"login": "someone"}, "body": "<!-- tpu-slicing-plan-diff:dev -->\nspoof"}]
    calls = _run_comment_script(
        tmp_path,
        {"PR_NUMBER": "7", "HEAD_SHA": "a" * 40, "HEAD_OWNER": "owner", "HEAD_BRANCH": "topic"},
        {"issues.listComments": comments},
    )
    posted = {args["body"].split("\n", 1)[0]: args for args in _of(calls, "create")}
    assert set(posted) == {"<!-- tpu-slicing-plan-diff:big -->", "<!-- tpu-slicing-plan-diff:dev -->"}
    assert all(args["issue_number"] == 7 for args in posted.values())
    assert posted["<!-- tpu-slicing-plan-diff:dev -->"]["body"].endswith("\ndev diff")
    assert "too long for a comment" in posted["<!-- tpu-slicing-plan-diff:big -->"]["body"]
    assert not _of(calls, "update"), "another user's comment is never edited"
    assert not _of(calls, "paginate", "pulls.list")
    assert _of(calls, "warning") == ["2 plan diff(s) not posted: no such stack file on the default branch"]


def test_preview_comment_finds_a_fork_pull_request_by_head_sha(tmp_path: Path) -> None:
    _workspace(tmp_path)
    sha = "b" * 40
    pulls = [{"number": 3, "head": {"sha": "c" * 40}}, {"number": 4, "head": {"sha": sha}}]
    comments = [{"id": 9, "user": {"login": "github-actions[bot]"}, "body": "<!-- tpu-slicing-plan-diff:dev -->\nold"}]
    calls = _run_comment_script(
        tmp_path,
        {"PR_NUMBER": "", "HEAD_SHA": sha, "HEAD_OWNER": "forker", "HEAD_BRANCH": "main"},
        {"pulls.list": pulls, "issues.listComments": comments},
    )
    (lookup,) = _of(calls, "paginate", "pulls.list")
    assert lookup["head"] == "forker:main" and lookup["state"] == "open"
    updates = _of(calls, "update")
    assert [(u["comment_id"], u["body"]) for u in updates] == [(9, "<!-- tpu-slicing-plan-diff:dev -->\ndev diff")]
    assert {c["issue_number"] for c in _of(calls, "create")} == {4}


def test_preview_comment_posts_nothing_without_a_single_matching_pull_request(tmp_path: Path) -> None:
    _workspace(tmp_path)
    calls = _run_comment_script(
        tmp_path,
        {"PR_NUMBER": "", "HEAD_SHA": "d" * 40, "HEAD_OWNER": "forker", "HEAD_BRANCH": "main"},
        {"pulls.list": [{"number": 3, "head": {"sha": "c" * 40}}]},
    )
    assert not _of(calls, "create") and not _of(calls, "update")
    assert len(_of(calls, "warning")) == 1


def test_the_stack_matrix_command_lists_every_stack_file() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "plan", "stacks", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    names = json.loads(done.stdout)
    assert names == sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in ROOT.glob("Pulumi.*.yaml"))
    assert "dev" in names


def test_each_stack_is_audited_under_an_environment_of_its_own() -> None:
    """The audit's secrets come from `drift-<stack>`, never from the repository (docs/review.md)."""
    job = _load("drift.yml")["jobs"]["audit"]
    assert job["environment"] == "drift-${{ matrix.stack }}"


def test_the_cloud_preview_runs_pull_request_code_behind_the_preview_environment() -> None:
    """Its OIDC subject is the `preview` environment, whose required reviewers approve each run of a
    pull request's code before the service account that can decrypt the stacks' secrets is reached."""
    job = _load("preview.yml")["jobs"]["cloud-preview"]
    assert job["environment"] == "preview"
    assert "secrets." not in json.dumps(job)
