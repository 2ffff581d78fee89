"""The nightly audit's report (plan/drift.py, .github/workflows/drift.yml): the preview digest and the
policy events turned into one summary, and the real `pulumi policy analyze` with the project's pack
finding a violation planted in a stack's exported state.

The preview digests here are shaped as pulumi v3.274.0 writes them (pkg/backend/display/json.go
`previewDigest` and `previewStep`); the policy events are the real CLI's, from a state file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from plan import drift
from plan.engine import ROOT
from tests.engine import Engine, EngineMissingError

URN = "urn:pulumi:dev::tpu-slicing::tpu-slicing:infra:Network$gcp:compute/network:Network::network"
DRIFTED_PREVIEW = {
    "config": {},
    "steps": [
        {"op": "same", "urn": "urn:pulumi:dev::tpu-slicing::pulumi:pulumi:Stack::tpu-slicing-dev"},
        {"op": "refresh", "urn": "urn:pulumi:dev::tpu-slicing::kubernetes:core/v1:Namespace::ns"},
        {
            "op": "update",
            "urn": URN,
            "diffReasons": ["mtu"],
            "detailedDiff": {"mtu": {"kind": "update", "inputDiff": False}},
        },
        {
            "op": "replace",
            "urn": "urn:pulumi:dev::tpu-slicing::kubernetes:batch/v1:Job::job",
            "replaceReasons": ["spec"],
        },
        {"op": "create", "urn": "urn:pulumi:dev::tpu-slicing::kubernetes:core/v1:ConfigMap::script"},
    ],
    "changeSummary": {"same": 1, "update": 1, "replace": 1, "create": 1},
}


def _state(image: str) -> dict[str, Any]:
    """A stack export (apitype.UntypedDeployment, version 3) holding one Deployment."""
    provider = "urn:pulumi:dev::tpu-slicing::pulumi:providers:kubernetes::cluster"
    body = {
        "metadata": {"name": "web", "namespace": "serving"},
        "spec": {"template": {"spec": {"containers": [{"name": "web", "image": image}]}}},
    }
    return {
        "version": 3,
        "deployment": {
            "manifest": {"time": "2026-12-06T00:00:00Z", "magic": "", "version": "v3.274.0"},
            "resources": [
                {
                    "urn": "urn:pulumi:dev::tpu-slicing::pulumi:pulumi:Stack::tpu-slicing-dev",
                    "custom": False,
                    "type": "pulumi:pulumi:Stack",
                },
                {"urn": provider, "custom": True, "id": "p", "type": "pulumi:providers:kubernetes"},
                {
                    "urn": "urn:pulumi:dev::tpu-slicing::kubernetes:apps/v1:Deployment::web",
                    "custom": True,
                    "id": "serving/web",
                    "type": "kubernetes:apps/v1:Deployment",
                    "provider": f"{provider}::p",
                    "inputs": body,
                    "outputs": body,
                },
            ],
        },
    }


def test_steps_that_change_something_are_drift_and_name_their_fields() -> None:
    found = drift.drifted(DRIFTED_PREVIEW)
    assert [(d.op, d.type, d.name, d.fields) for d in found] == [
        ("update", "gcp:compute/network:Network", "network", ("mtu",)),
        ("replace", "kubernetes:batch/v1:Job", "job", ("spec",)),
        ("create", "kubernetes:core/v1:ConfigMap", "script", ()),
    ]
    text = drift.markdown("dev", found, [])
    assert text.startswith("## Stack `dev`: 3 resource(s) drifted, 0 policy violation(s)")
    assert "| update | `gcp:compute/network:Network` | `network` | `mtu` |" in text


def test_a_clean_night_reports_nothing(tmp_path: Path) -> None:
    clean = {"steps": [{"op": "same", "urn": URN}], "changeSummary": {"same": 1}}
    preview, policy, issue = tmp_path / "p.json", tmp_path / "a.ndjson", tmp_path / "i.json"
    preview.write_text(json.dumps(clean))
    policy.write_text('{"sequence":0,"summaryEvent":{"result":"succeeded"}}\n')
    done = _report(preview, policy, issue)
    assert done.returncode == 0 and "No drift, no violation." in done.stdout
    assert json.loads(issue.read_text()) == {
        "title": "Drift: stack dev",
        "label": "drift",
        "body": done.stdout,
        "report": False,
        "failed": False,
    }


CLEAN_POLICY = '{"sequence":0,"summaryEvent":{"result":"succeeded"}}\n'
# A refresh refused by Google, as pulumi v3.274.0 writes it: the digest keeps every non-ephemeral
# diagnostic (pkg/backend/display/json.go `ShowPreviewDigest`), its severity "error" (sdk diag.Error).
REFUSED_REFRESH = {
    "steps": [{"op": "same", "urn": URN}],
    "diagnostics": [
        {"message": "Previewing update (dev):", "severity": "info"},
        {
            "urn": URN,
            "prefix": "error: ",
            "message": "error: refreshing urn:...::network: googleapi: Error 403: Required 'compute.networks.get' "
            "permission for 'projects/p/global/networks/dev-net', forbidden",
            "severity": "error",
        },
    ],
}


@pytest.mark.parametrize(
    "case",
    [
        # A refresh refused mid-way: the digest is written, with the error among its diagnostics.
        (json.dumps(REFUSED_REFRESH), 255, CLEAN_POLICY, 0, "Error 403: Required 'compute.networks.get'"),
        # An expired token or a missing stack: the CLI stops before the engine and writes nothing.
        ("", 255, CLEAN_POLICY, 0, "wrote no preview JSON"),
        # A non-zero exit that no change explains.
        (json.dumps({"steps": [{"op": "same", "urn": URN}]}), 1, CLEAN_POLICY, 0, "with no change and no error"),
        # The pack did not load: policy analyze returns before it writes any event.
        (json.dumps({"steps": [{"op": "same", "urn": URN}]}), 0, "", 255, "wrote no summary"),
        # The analysis failed without a mandatory violation.
        (json.dumps({"steps": [{"op": "same", "urn": URN}]}), 0, '{"summaryEvent":{"result":"failed"}}\n', 255,
         "no mandatory violation to explain it"),
    ],
)  # fmt: skip
def test_an_audit_that_could_not_see_the_stack_fails_and_never_reads_as_clean(
    case: tuple[str, int, str, int, str], tmp_path: Path
) -> None:
    preview, preview_exit, policy, policy_exit, said = case
    files = tmp_path / "p.json", tmp_path / "a.ndjson", tmp_path / "i.json"
    files[0].write_text(preview)
    files[1].write_text(policy)
    done = _report(*files, preview_exit=preview_exit, policy_exit=policy_exit)
    assert done.returncode == 1, done.stderr
    assert "audit failed" in done.stdout and said in done.stdout
    assert "No drift" not in done.stdout
    issue = json.loads(files[2].read_text())
    assert issue["failed"] is True and issue["report"] is True


def test_drift_that_fails_expect_no_changes_is_a_finding_not_a_failed_audit(tmp_path: Path) -> None:
    """`--expect-no-changes` exits non-zero exactly when there are changes (pulumi v3.274.0
    pkg/backend/backenderr/backenderr.go NoChangesExpectedError): that is the drift, reported."""
    files = tmp_path / "p.json", tmp_path / "a.ndjson", tmp_path / "i.json"
    files[0].write_text(json.dumps(DRIFTED_PREVIEW))
    files[1].write_text(CLEAN_POLICY)
    done = _report(*files, preview_exit=255)
    assert done.returncode == 0 and "audit failed" not in done.stdout
    assert json.loads(files[2].read_text())["report"] is True


def test_excepted_policy_events_are_shown_apart_and_count_as_none(tmp_path: Path) -> None:
    event = {
        "policyEvent": {
            "resourceUrn": URN,
            "policyName": "pinned-images",
            "enforcementLevel": "mandatory",
            "message": "moving tag",
            # apitype/events.go PolicyEvent.Exceptions: "an excepted violation doesn't fail the operation".
            "exceptions": [{"id": "EXC-1", "reason": "vendor image, pinned upstream"}],
        }
    }
    files = tmp_path / "p.json", tmp_path / "a.ndjson", tmp_path / "i.json"
    files[0].write_text(json.dumps({"steps": [{"op": "same", "urn": URN}]}))
    files[1].write_text(json.dumps(event) + "\n" + CLEAN_POLICY)
    done = _report(*files)
    assert done.returncode == 0, done.stdout
    assert "0 policy violation(s)" in done.stdout and "EXC-1: vendor image, pinned upstream" in done.stdout
    assert json.loads(files[2].read_text())["report"] is False


def test_the_issue_file_is_never_overwritten(tmp_path: Path) -> None:
    files = tmp_path / "p.json", tmp_path / "a.ndjson", tmp_path / "Pulumi.dev.yaml"
    files[0].write_text(json.dumps({"steps": [{"op": "same", "urn": URN}]}))
    files[1].write_text(CLEAN_POLICY)
    files[2].write_text("config: {}\n")
    done = _report(*files)
    assert done.returncode != 0 and "exists" in done.stderr
    assert files[2].read_text() == "config: {}\n"


@pytest.mark.parametrize(("text", "said"), [("{", "not JSON"), ('{"config": {}}', "no steps")])
def test_what_is_not_a_preview_digest_is_refused_in_one_line(text: str, said: str, tmp_path: Path) -> None:
    preview, policy = tmp_path / "p.json", tmp_path / "a.ndjson"
    preview.write_text(text)
    policy.write_text(CLEAN_POLICY)
    done = _report(preview, policy, tmp_path / "i.json")
    assert done.returncode == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1


def _report(
    preview: Path, policy: Path, issue: Path, preview_exit: int = 0, policy_exit: int = 0
) -> subprocess.CompletedProcess[str]:
    files = ["--preview", str(preview), "--policy", str(policy), "--issue", str(issue)]
    files += ["--preview-exit", str(preview_exit), "--policy-exit", str(policy_exit)]
    return subprocess.run(
        [sys.executable, "-m", "plan", "drift", "--stack", "dev", *files],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    try:
        return Engine.create(tmp_path_factory.mktemp("engine"))
    except EngineMissingError as err:
        pytest.skip(str(err))


@pytest.mark.parametrize(("image", "violated"), [("nginx:latest", True), ("nginx:1.27.3", False)])
def test_the_real_cli_audits_an_exported_state_with_the_pack(
    engine: Engine, image: str, violated: bool, tmp_path: Path
) -> None:
    workspace = engine.workspace(f"audit-{violated}")
    state = tmp_path / "state.json"
    state.write_text(json.dumps(_state(image)))
    done = workspace.pulumi("policy", "analyze", "--file", str(state), "--policy-pack", "policy", "--json", check=False)
    assert done.returncode == (1 if violated else 0), done.stderr
    found, result = drift.violations(done.stdout.splitlines())
    assert result == ("failed" if violated else "succeeded")
    assert [(v.policy, v.level) for v in found] == ([("pinned-images", "mandatory")] if violated else [])
    assert drift.policy_failures(result, done.returncode, found) == []
    text = drift.markdown("dev", [], found)
    if violated:
        assert "| `pinned-images` | mandatory | `kubernetes:apps/v1:Deployment` `web` |" in text
        assert "'nginx:latest' has the moving tag 'latest'" in text


def test_the_real_cli_failing_to_reach_a_stack_or_load_a_pack_is_a_failed_audit(engine: Engine, tmp_path: Path) -> None:
    """The real CLI's output when it cannot see the truth: a preview of a stack the backend does not
    hold (as an expired token or a deleted stack leaves it), and a policy pack that does not load."""
    workspace = engine.workspace("audit-failures")
    preview = workspace.pulumi("preview", "--stack", "gone", "--refresh", "--expect-no-changes", "--json", check=False)
    state = tmp_path / "state.json"
    state.write_text(json.dumps(_state("nginx:1.27.3")))
    policy = workspace.pulumi(
        "policy", "analyze", "--file", str(state), "--policy-pack", str(tmp_path / "no-pack"), "--json", check=False
    )
    assert preview.returncode != 0 and policy.returncode != 0, (preview.stderr, policy.stderr)
    files = tmp_path / "p.json", tmp_path / "a.ndjson", tmp_path / "i.json"
    files[0].write_text(preview.stdout)
    files[1].write_text(policy.stdout)
    done = _report(*files, preview_exit=preview.returncode, policy_exit=policy.returncode)
    assert done.returncode == 1, done.stderr
    assert "audit failed" in done.stdout and "No drift" not in done.stdout
    assert json.loads(files[2].read_text())["failed"] is True


def _audit_step() -> str:
    jobs = yaml.safe_load((ROOT / ".github" / "workflows" / "drift.yml").read_text())["jobs"]
    (step,) = [step for step in jobs["audit"]["steps"] if step.get("name") == "drift and policy audit"]
    return str(step["run"])


def _run_audit(tmp_path: Path, preview_out: str, preview_exit: int) -> subprocess.CompletedProcess[str]:
    """The workflow's audit step as GitHub runs it (`bash -e`), with a CLI that answers `preview` as
    given, and exports and analyzes a clean state."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (tmp_path / "preview.out").write_text(preview_out)
    cli = bindir / "pulumi"
    cli.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        f'  preview) cat {tmp_path}/preview.out; echo "error: the stack could not be read" >&2; exit {preview_exit};;\n'
        '  stack) while [ "$1" != "--file" ]; do shift; done; echo "{}" > "$2"; exit 0;;\n'
        f"  policy) printf '%s' '{CLEAN_POLICY.strip()}'; echo; exit 0;;\n"
        "esac\nexit 3\n"
    )
    cli.chmod(0o755)
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    summary = tmp_path / "summary.md"
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "STACK": "dev",
           "GITHUB_STEP_SUMMARY": str(summary), "PYTHONPATH": str(ROOT)}  # fmt: skip
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", _audit_step()],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip


def test_the_workflow_turns_red_on_a_failed_audit_and_its_issue_says_so(tmp_path: Path) -> None:
    """Before, `|| true` hid the preview's exit and an expired token read "No drift"."""
    done = _run_audit(tmp_path, "", 255)
    assert done.returncode != 0, done.stdout
    issue = json.loads((tmp_path / "drift" / "dev.json").read_text())
    assert issue["failed"] is True and "audit failed" in issue["body"]
    assert "audit failed" in (tmp_path / "summary.md").read_text()


def test_the_workflow_reports_drift_as_a_finding(tmp_path: Path) -> None:
    done = _run_audit(tmp_path, json.dumps(DRIFTED_PREVIEW), 255)
    assert done.returncode == 0, done.stderr + done.stdout
    issue = json.loads((tmp_path / "drift" / "dev.json").read_text())
    assert issue["failed"] is False and issue["report"] is True
