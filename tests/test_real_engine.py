"""The real Pulumi CLI and engine on every stack file: init, the README's config commands, preview.

Real here: the `pulumi` CLI and its engine (project and stack-config rules, secrets, plan,
policy pack loading), the Python SDK, and the Kubernetes provider, all at their pins, built by
`make engine`. Stand-ins (tests/standins/, each says what it cannot show): the Python language
host, the GCP provider and the Command provider, whose modules the proxy does not serve.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from plan import engine as offline
from tests.engine import PASSPHRASE, ROOT, Engine, Workspace, readme_deploy_commands, readme_stack
from tests.standins import gcp_project, gcp_provider
from tests.standins.gcp_project import Project

STACKS = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in ROOT.glob("Pulumi.*.yaml"))
PROJECT_ID = "my-tpu-project"
TOKEN = "hf_realEngineTestToken0123456789"


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    return Engine.create(tmp_path_factory.mktemp("engine"))


def _initialised(engine: Engine, stack: str, label: str) -> Workspace:
    return readme_stack(engine, stack, label, project=PROJECT_ID, token=TOKEN)


@pytest.fixture(scope="module", params=STACKS)
def previewed(request: pytest.FixtureRequest, engine: Engine) -> Iterator[tuple[str, Workspace, Any, dict, Any]]:
    stack = request.param
    ws = _initialised(engine, stack, "preview")
    # The README's command, verbatim, then the same preview as JSON for the resource list.
    readme = ws.shell(f"pulumi preview --diff --policy-pack policy --stack {stack}-new")
    done, document = ws.preview_steps(f"{stack}-new", "--policy-pack", "policy")
    yield stack, ws, done, document, readme


def test_readme_deploy_copies_the_stack_file_before_stack_init() -> None:
    commands = readme_deploy_commands()
    copy = next(i for i, c in enumerate(commands) if c.startswith("cp Pulumi.dev.yaml"))
    init = next(i for i, c in enumerate(commands) if c.startswith("pulumi stack init"))
    assert copy < init, "stack init must see the copied file, or the secrets provider it writes is lost"
    assert "pulumi preview --diff --policy-pack policy" in commands


def test_preview_of_a_new_stack_completes_under_the_real_engine(previewed: tuple) -> None:
    stack, _ws, done, document, _readme = previewed
    assert done.returncode == 0, f"{stack}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    assert document["steps"], document
    assert all(step["op"] == "create" for step in document["steps"])


def _engine_urns(document: dict, stack: str) -> set[str]:
    urns = set()
    for step in document["steps"]:
        urn = step["urn"]
        if "::pulumi:pulumi:Stack::" in urn or re.search(r"::pulumi:providers:[^:]+::default", urn):
            continue  # created by the engine, not registered by the program
        urns.add(urn.replace(f"urn:pulumi:{stack}-new::", "urn:pulumi:STACK::"))
    return urns


def test_real_preview_registers_exactly_what_the_offline_plan_registers(previewed: tuple) -> None:
    stack, ws, done, document, _readme = previewed
    assert done.returncode == 0
    config, secret_keys = offline.read_stack_config(ws.root / f"Pulumi.{stack}-new.yaml")
    plan = offline.run(config, stack=f"{stack}-new", secret_keys=secret_keys, preview=True)
    planned = {r.urn.replace(f"urn:pulumi:{stack}-new::", "urn:pulumi:STACK::") for r in plan.resources}
    assert _engine_urns(document, stack) == planned


def test_the_policy_pack_ran_under_the_cli(previewed: tuple) -> None:
    stack, _ws, _done, _document, readme = previewed
    assert readme.returncode == 0, f"{stack}:\n{readme.stdout[-4000:]}\n{readme.stderr[-4000:]}"
    # With --diff the CLI ends a preview with the table of the packs it ran.
    assert re.search(
        r"Policy Packs run:\n\s+Name\s+Version\n\s+tpu-slicing-guardrails\|local\|policy\s+0\.1\.0", readme.stdout
    )


def test_no_plaintext_secret_in_any_file_the_cli_wrote(previewed: tuple, engine: Engine) -> None:
    stack, ws, done, _document, _readme = previewed
    assert done.returncode == 0
    written = [ws.root / f"Pulumi.{stack}-new.yaml", *sorted((engine.base / "state").rglob("*"))]
    for path in written:
        if path.is_file():
            assert TOKEN not in path.read_text(errors="replace"), path
            assert PASSPHRASE not in path.read_text(errors="replace"), path
    stack_file = (ws.root / f"Pulumi.{stack}-new.yaml").read_text()
    assert re.search(r"tpu-slicing:hfToken:\n\s+secure: ", stack_file)
    assert "encryptionsalt:" in stack_file


def test_config_get_and_stack_output_behave_as_the_readme_says(previewed: tuple) -> None:
    stack, ws, _done, _document, _readme = previewed
    name = f"{stack}-new"
    assert ws.pulumi("config", "get", "gcp:project", "--stack", name).stdout.strip() == PROJECT_ID
    listed = json.loads(ws.pulumi("config", "--json", "--stack", name).stdout)
    assert listed["tpu-slicing:hfToken"] == {"secret": True}
    assert ws.pulumi("config", "get", "tpu-slicing:hfToken", "--stack", name).stdout.strip() == TOKEN
    # Nothing is deployed by a preview, so the stack has no outputs yet.
    assert json.loads(ws.pulumi("stack", "output", "--json", "--stack", name).stdout) == {}


def test_a_stack_variant_that_breaks_a_policy_is_stopped_by_the_pack_under_the_cli(engine: Engine) -> None:
    ws = _initialised(engine, "dev", "violation")
    ws.pulumi("config", "set", "--path", "tpu-slicing:cluster.deletionProtection", "false", "--stack", "dev-new")
    done = ws.pulumi("preview", "--stack", "dev-new", "--policy-pack", "policy", check=False)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "cluster-deletion-protection" in output
    assert "mandatory" in output.lower()


def test_the_cli_refuses_the_old_project_file(engine: Engine) -> None:
    ws = engine.workspace("old-project")
    old = (
        (ws.root / "Pulumi.yaml")
        .read_text()
        .replace("config:\n", "config:\n  gcp:project:\n    description: Google Cloud project.\n", 1)
    )
    Path(ws.root / "Pulumi.yaml").write_text(old)
    done = ws.pulumi("stack", "init", "dev", check=False)
    assert done.returncode != 0
    assert "'gcp:project' is namespaced and must provide an attribute 'value'" in done.stdout + done.stderr


# The Kubernetes half needs a cluster to apply to (a real API server is the next step); the
# Command stand-in would run the inference-extension install. Everything else is Google Cloud.
NOT_GOOGLE_CLOUD = ("kubernetes:", "pulumi:providers:kubernetes", "command:")
POOL = "gcp:container/nodePool:NodePool"


def _google_cloud_targets(ws: Workspace, stack: str) -> list[str]:
    config, secret_keys = offline.read_stack_config(ws.root / f"Pulumi.{stack}.yaml")
    plan = offline.run(config, stack=stack, secret_keys=secret_keys, preview=True)
    return [arg for r in plan.resources if not r.type.startswith(NOT_GOOGLE_CLOUD) for arg in ("--target", r.urn)]


@pytest.mark.gcp_standin
@pytest.mark.parametrize("stack", ["dev", "saxml-v5e"])
def test_a_preview_after_up_changes_nothing_in_google_cloud(engine: Engine, stack: str) -> None:
    """`pulumi up`, then `pulumi preview`: zero changes, with GKE's reported fields in state."""
    ws = _initialised(engine, stack, "up")
    name = f"{stack}-new"
    targets = _google_cloud_targets(ws, name)
    ws.pulumi("up", "--yes", "--skip-preview", "--stack", name, *targets)
    exported = json.loads(ws.pulumi("stack", "export", "--stack", name).stdout)
    pools = [r for r in exported["deployment"]["resources"] if r["type"] == POOL and r["inputs"].get("nodeConfig")]
    tpu_pools = [p for p in pools if p["inputs"]["nodeConfig"]["machineType"] != "n2-standard-32"]
    assert tpu_pools
    for pool in tpu_pools:
        # What GKE returned (the stand-in's model of it) is what the state holds.
        assert "advancedMachineFeatures" in pool["outputs"]["nodeConfig"]
        if pool["inputs"]["placementPolicy"].get("policyName"):
            assert pool["outputs"]["placementPolicy"]["type"] == ""
    done, document = ws.preview_steps(name, *targets)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    changed = [(s["op"], s["urn"]) for s in document["steps"] if s["op"] != "same"]
    assert changed == []
    assert set(document["changeSummary"]) == {"same"}


@pytest.mark.gcp_standin
def test_a_mistaken_destroy_deletes_nothing_until_protection_is_released(engine: Engine) -> None:
    """`pulumi destroy` of a protected stack stops before its first delete; the README's teardown works.

    The stop is the destroy's preview: with `--skip-preview` the real engine first deletes what is
    not protected and only then refuses (seen while writing this test), hence the README's warning.
    """
    ws = _initialised(engine, "dev", "destroy")
    name = "dev-new"
    targets = _google_cloud_targets(ws, name)
    ws.pulumi("up", "--yes", "--skip-preview", "--stack", name, *targets)

    def resources() -> list[str]:
        exported = json.loads(ws.pulumi("stack", "export", "--stack", name).stdout)
        return sorted(r["urn"] for r in exported["deployment"].get("resources") or [])

    before = resources()
    protected = [u for u in before if "gcp:container/" in u]
    assert protected  # the cluster and its pools
    done = ws.pulumi("destroy", "--yes", "--stack", name, check=False)
    assert done.returncode != 0
    assert "protected" in done.stdout + done.stderr
    assert resources() == before  # nothing deleted, not even what depends on nothing protected

    ws.pulumi("config", "set", "--path", "tpu-slicing:cluster.protect", "false", "--stack", name)
    ws.pulumi("up", "--yes", "--skip-preview", "--stack", name, *targets)
    ws.pulumi("destroy", "--yes", "--skip-preview", "--stack", name)
    assert not [u for u in resources() if "gcp:" in u]


@pytest.mark.gcp_standin
def test_up_reads_the_weights_bucket_and_stops_before_any_grant_without_uniform_access(engine: Engine) -> None:
    """The conditional write grant needs uniform bucket-level access (the stand-in refuses it otherwise,
    rule condition-needs-uniform-access): `up` reads the bucket first and stops, naming it and the fix,
    with no grant on it and no traceback. Turned on, the same `up` completes."""
    ws = _initialised(engine, "dev", "ubla")
    name = "dev-new"
    project = Project.at(Path(ws.env[gcp_provider.PROJECT_ENV]))
    config, _ = offline.read_stack_config(ws.root / f"Pulumi.{name}.yaml")
    bucket = json.loads(config["tpu-slicing:serving"])["model"]["weightsBucket"]
    project.declare_bucket(bucket, uniform_access=False)
    targets = _google_cloud_targets(ws, name)
    done = ws.pulumi("up", "--yes", "--skip-preview", "--stack", name, *targets, check=False)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert f"serving.model.weightsBucket '{bucket}': uniform bucket-level access is off" in output, output[-3000:]
    assert f"gcloud storage buckets update gs://{bucket} --uniform-bucket-level-access" in output
    assert "Traceback" not in output
    assert _members(ws, name) == []  # the state: the stand-in keeps no IAM bindings
    assert [r["rule"] for r in project.refusals] == []  # nothing was even tried

    project.declare_bucket(bucket, uniform_access=True)
    ws.pulumi("up", "--yes", "--skip-preview", "--stack", name, *targets)
    assert len(_members(ws, name)) == 3  # bucketViewer, objectViewer, objectUser on xla_cache/


def _members(ws: Workspace, name: str) -> list[str]:
    exported = json.loads(ws.pulumi("stack", "export", "--stack", name).stdout)
    return [
        r["urn"] for r in exported["deployment"].get("resources") or [] if r["type"] == gcp_project.BUCKET_IAM_MEMBER
    ]


def _steps(ws: Workspace, name: str, targets: list[str]) -> list[tuple[str, str]]:
    done, document = ws.preview_steps(name, *targets)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [(s["op"], s["urn"].rsplit("::", 1)[1]) for s in document["steps"] if s["op"] not in ("same", "read")]


@pytest.mark.gcp_standin
def test_day_two_changes_to_pools_and_versions_on_a_stack_that_is_up(engine: Engine) -> None:
    """Retiring one sub-block deletes that pool and nothing else; a forced replacement of a pool
    with a fixed name succeeds (the old one goes first, else GCP answers 409); a version prefix the
    channel no longer offers changes nothing on a cluster that exists."""
    ws = _initialised(engine, "dev", "day-two")
    name = "dev-new"
    targets = _google_cloud_targets(ws, name)
    ws.pulumi("config", "set", "--path", "tpu-slicing:cluster.protect", "false", "--stack", name)
    ws.pulumi("up", "--yes", "--skip-preview", "--stack", name, *targets)

    # A refresh reads back what GKE reports (no placement type, the policy's topology on the
    # pools): it changes the state's outputs, and the preview after it still plans nothing.
    ws.pulumi("refresh", "--yes", "--skip-preview", "--stack", name, *targets)
    assert _steps(ws, name, targets) == []

    pool = next(t for t in targets if t.endswith("::cube-sub-block-1"))
    # The pool fills its sub-block (16 of 16 in use): the preview judges its replacement net of the
    # stack's own pool there (infra/reservation.py, read through gcp.container.get_cluster).
    previewed = ws.pulumi("preview", "--stack", name, "--replace", pool, "--target", pool, check=False)
    assert previewed.returncode == 0, previewed.stdout[-3000:] + previewed.stderr[-3000:]
    replaced = ws.pulumi("up", "--yes", "--skip-preview", "--stack", name, "--replace", pool, "--target", pool)
    assert "replaced" in replaced.stdout, replaced.stdout[-2000:]

    ws.pulumi("config", "set", "--path", "tpu-slicing:cluster.versionPrefix", "1.38.", "--stack", name)
    done = ws.pulumi("preview", "--stack", name, "--diff", *targets, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "offers no GKE version starting with '1.38.'" in done.stdout + done.stderr  # a warning, no error
    assert _steps(ws, name, targets) == []
    ws.pulumi("config", "rm", "--path", "tpu-slicing:cluster.versionPrefix", "--stack", name)

    ws.pulumi("config", "set", "--path", "tpu-slicing:reservation.subBlocks[0]", "sub-block-1", "--stack", name)
    ws.pulumi("config", "rm", "--path", "tpu-slicing:reservation.subBlocks[1]", "--stack", name)
    ws.pulumi("config", "set", "--path", "tpu-slicing:tpu.cubes", "1", "--stack", name)
    pools = [(op, urn) for op, urn in _steps(ws, name, targets) if urn.startswith("cube-")]
    assert pools == [("delete", "cube-sub-block-0")]


@pytest.mark.gcp_standin
def test_a_new_cluster_is_refused_a_version_the_channel_no_longer_offers(engine: Engine) -> None:
    ws = _initialised(engine, "dev", "prefix")
    name = "dev-new"
    ws.pulumi("config", "set", "--path", "tpu-slicing:cluster.versionPrefix", "1.38.", "--stack", name)
    done = ws.pulumi("up", "--yes", "--skip-preview", "--stack", name, *_google_cloud_targets(ws, name), check=False)
    assert done.returncode != 0
    output = done.stdout + done.stderr
    # The engine's own line names the hook, the cluster, the prefix and what to set. (The
    # program's stderr then shows the SDK being interrupted after the failed registration.)
    (line,) = [x for x in output.splitlines() if x.strip().startswith('error: before hook "refuse-unoffered')]
    assert "cluster dev-new-gke: the RAPID channel offers no GKE version starting with '1.38.'" in line
    assert "set tpu-slicing:cluster.version" in line and "cluster.versionPrefix" in line
    exported = json.loads(ws.pulumi("stack", "export", "--stack", name).stdout)
    assert not [
        r for r in exported["deployment"].get("resources") or [] if r["type"] == "gcp:container/cluster:Cluster"
    ]


# Keys as platform engineers get them wrong, each a mistake of its own kind; every one is a setting
# the CLI passes on silently, so only the program can refuse it. The credentials are put together at
# run time (a Hugging Face token in namePrefix, a Google API key in region, both of their vendors'
# published shapes, settings/credentials.py RULES), so no scanner takes this file for a leak.
HF_PASTED = "hf_" + "Zq81Mxnv0a9sKd7T" * 2
API_KEY_PASTED = "AIza" + "Sy" + "Zq81Mxnv0a9sKd7T" * 2 + "x"
MISTAKEN_KEYS = (
    "  tpu-slіcing:zone: us-central1-ai1a\n"  # a Cyrillic і (U+0456)
    "  TPU-Slicing:namePrefix: other\n"
    "  tpu-slicng:serving: {}\n"
    "  kubernetes:kubeconfig: |\n"
    "    apiVersion: v1\n"
    "    clusters:\n"
    "    - cluster: {server: 'https://10.9.8.7'}\n"
    "      name: gke\n"
    f"  tpu-slicing:namePrefix: {HF_PASTED}\n"
    f"  tpu-slicing:region: {API_KEY_PASTED}\n"
    '  gcp:credentials: \'{"type": "authorized_user", "refresh_token": "1//0gZq81Mxnv0a9sKd7T"}\'\n'
    "  pulumi:disable-default-providers: [gcp]\n"
    "  tpu-slicing:network: {mtu: 9000}\n"
)


def _problem_lines(text: str) -> list[str]:
    """The `- ...` lines of an `invalid stack configuration` message, however the printer indents them."""
    _, found, rest = text.partition("invalid stack configuration")
    assert found, text
    return [match.group(1) for match in re.finditer(r"^\s*- (.+)$", rest, flags=re.MULTILINE)]


def test_pulumi_preview_refuses_the_keys_make_plan_refuses_with_the_same_lines(engine: Engine) -> None:
    """One validation path: the keys `pulumi up` hands the program (every namespace) are judged by the
    loader that judges `make plan`'s, before any resource is registered, with no traceback: namespaces,
    look-alikes, plaintext credentials (in ordinary keys and gcp:credentials) and provider keys."""
    ws = _initialised(engine, "dev", "mistaken-keys")
    path = ws.root / "Pulumi.dev-new.yaml"
    # At the top of the `config:` mapping: the CLI writes `encryptionsalt:` after it.
    path.write_text(path.read_text().replace("\nconfig:\n", "\nconfig:\n" + MISTAKEN_KEYS, 1))
    planned = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "-m", "plan", "--stack", "dev-new", "--out", str(ws.root / "out")],
        cwd=ws.root,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert planned.returncode == 2, planned.stdout + planned.stderr
    done, document = ws.preview_steps("dev-new")
    assert done.returncode != 0, done.stdout
    errors = [d["message"] for d in document.get("diagnostics", []) if d.get("severity") == "error"]
    assert not any("Traceback" in error for error in errors), errors
    # The refusal, and the engine's own line for the program's exit code 1 (the real exec script
    # leaves exit_code at 1 after `except pulumi.RunError`).
    (refusal,) = [error for error in errors if "invalid stack configuration" in error]
    assert _problem_lines(refusal) == _problem_lines(planned.stderr), (refusal, planned.stderr)
    lines = _problem_lines(planned.stderr)
    assert [line.split(": ", 1)[0] for line in lines] == [
        "config key 'TPU-Slicing:namePrefix'",
        "config key 'kubernetes:kubeconfig'",
        "config key 'tpu-slicng:serving'",
        "config key 'tpu-slіcing:zone'",
        "gcp:credentials",
        "tpu-slicing:namePrefix",
        "tpu-slicing:region",
        "pulumi:disable-default-providers",
    ], lines
    assert "is stored in plain text" in lines[4] and "a Hugging Face token in plain text" in lines[5], lines
    assert "a Google API key in plain text" in lines[6] and "default gcp provider" in lines[7], lines
    # A leaked credential holds back the model's own rules (network.mtu), which may show a value; the
    # refusals never show a value (the CLI's own JSON document echoes the stack's config).
    for value in ("10.9.8.7", HF_PASTED, API_KEY_PASTED, "Zq81Mxnv0a9sKd7T"):
        assert not any(value in error for error in errors) and value not in planned.stderr, value
    registered = [step["urn"] for step in document.get("steps", [])]
    assert all("::pulumi:pulumi:Stack::" in urn for urn in registered), registered


AUTOSCALED = """    prefill:
      autoscaling: {min: 2, max: 6, metric: "vllm:prompt_tokens_total", target: 4000}
    decode:
      autoscaling: {min: 2, max: 6, metric: "vllm:kv_cache_usage_perc", target: 0.8}
    benchmark: {enabled: true, runId: preview, gate: {ttftP90Seconds: 2}}
"""


def test_an_autoscaled_and_benchmarked_stack_previews_under_the_real_engine_as_the_plan_does(engine: Engine) -> None:
    """Both roles autoscaled and the benchmark on: the CLI, the real Kubernetes provider and the policy
    pack accept the HPAs, the metrics adapter's objects and its IAM grant, the benchmark Job and its
    conditional bucket grant, and register what the offline plan does."""
    ws = _initialised(engine, "dev", "autoscaled")
    path = ws.root / "Pulumi.dev-new.yaml"
    text = path.read_text()
    assert text.count("    backend: vllm-pd\n") == 1, text
    path.write_text(text.replace("    backend: vllm-pd\n", "    backend: vllm-pd\n" + AUTOSCALED, 1))
    done, document = ws.preview_steps("dev-new", "--policy-pack", "policy")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    config, secret_keys = offline.read_stack_config(path)
    plan = offline.run(config, stack="dev-new", secret_keys=secret_keys, preview=True)
    planned = {r.urn.replace("urn:pulumi:dev-new::", "urn:pulumi:STACK::") for r in plan.resources}
    assert _engine_urns(document, "dev") == planned
    types = {step["urn"].split("::")[2].rsplit("$", 1)[-1] for step in document["steps"]}
    assert {
        "kubernetes:autoscaling/v2:HorizontalPodAutoscaler",
        "kubernetes:apiregistration.k8s.io/v1:APIService",
        "tpu-slicing:k8s:MetricsAdapter",
        "tpu-slicing:workloads:BenchmarkJob",
        "tpu-slicing:workloads:BenchmarkAccess",
    } <= types
