"""The nightly audit's report (plan/drift.py, .github/workflows/drift.yml): the preview digest and the
policy events turned into one summary, and the real `pulumi policy analyze` with the project's pack
finding a violation planted in a stack's exported state.

The preview digests here are shaped as pulumi v3.274.0 writes them (pkg/backend/display/json.go
`previewDigest` and `previewStep`); the policy events are the real CLI's, from a state file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from plan import drift
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
    }


@pytest.mark.parametrize(("text", "said"), [("{", "not JSON"), ('{"config": {}}', "no steps")])
def test_what_is_not_a_preview_digest_is_refused_in_one_line(text: str, said: str, tmp_path: Path) -> None:
    preview, policy = tmp_path / "p.json", tmp_path / "a.ndjson"
    preview.write_text(text)
    policy.write_text("")
    done = _report(preview, policy, tmp_path / "i.json")
    assert done.returncode == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1


def _report(preview: Path, policy: Path, issue: Path) -> subprocess.CompletedProcess[str]:
    files = ["--preview", str(preview), "--policy", str(policy), "--issue", str(issue)]
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
    text = drift.markdown("dev", [], found)
    if violated:
        assert "| `pinned-images` | mandatory | `kubernetes:apps/v1:Deployment` `web` |" in text
        assert "'nginx:latest' has the moving tag 'latest'" in text
