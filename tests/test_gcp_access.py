"""The GCS access judge (tests/standins/gcp_access.py), alone and on the Saxml cell the program plans.

The cell's three components talk to its bucket (the Saxml reference, "Same GCS root for all three
components"): the admin server writes its address under `sax-root/`, the model servers and sax-http
read it (saxml common/platform/cloud.go). Each must be allowed by the IAM members the program
creates on a bare project, and the mutations show the judge refusing each missing grant.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from plan.engine import ROOT, cloud_state
from settings import stack_file
from tests.bare_project import NOT_THE_PROGRAM, Mutation, first_up, mutated, plan_resources
from tests.control_plane import load_stack
from tests.standins import gcp_access as ga
from tests.standins import gcp_project as gp
from tests.standins import gcp_provider
from tests.standins.gcp_access import Workload
from tests.standins.gcp_project import Project

BUCKET = "cell-bucket"
GSA = "cell@example-tpu-project.iam.gserviceaccount.com"
POOL = "example-tpu-project.svc.id.goog"


def project(*, iam_credentials: bool = True) -> Project:
    p = Project.at(None)
    p.declare_bucket(BUCKET)
    if iam_credentials:
        p.enable(gp.IAM_CREDENTIALS)
    return p


def grant(p: Project, token: str, **inputs: Any) -> None:
    p.created(token, inputs, inputs)


def wi_user(p: Project, namespace: str = "sax", ksa: str = "sax-sa") -> None:
    grant(
        p,
        gp.ACCOUNT_IAM_MEMBER,
        serviceAccountId=f"projects/-/serviceAccounts/{GSA}",
        role=ga.WORKLOAD_IDENTITY_USER,
        member=f"serviceAccount:{POOL}[{namespace}/{ksa}]",
    )


def test_a_bound_google_account_reads_with_its_bucket_role() -> None:
    p = project()
    wi_user(p)
    grant(p, gp.BUCKET_IAM_MEMBER, bucket=BUCKET, role="roles/storage.objectViewer", member=f"serviceAccount:{GSA}")
    pod = Workload("sax", "sax-sa", GSA)
    assert ga.refuse_object_access(p, pod, BUCKET, "sax-root/") is None
    refused = ga.refuse_object_access(p, pod, BUCKET, "sax-root/", ga.OBJECT_CREATE)
    assert refused is not None and refused.rule == "object-access-denied"
    assert f"{GSA} does not have storage.objects.create access" in refused.message


def test_without_the_workload_identity_user_binding_no_token() -> None:
    p = project()
    wi_user(p, ksa="another")
    grant(p, gp.BUCKET_IAM_MEMBER, bucket=BUCKET, role="roles/storage.objectAdmin", member=f"serviceAccount:{GSA}")
    refused = ga.refuse_object_access(p, Workload("sax", "sax-sa", GSA), BUCKET, "sax-root/")
    assert refused is not None and refused.rule == "workload-identity-user-missing"
    assert "iam.serviceAccounts.getAccessToken" in refused.message


def test_a_bound_account_needs_the_credentials_api() -> None:
    p = project(iam_credentials=False)
    wi_user(p)
    refused = ga.refuse_object_access(p, Workload("sax", "sax-sa", GSA), BUCKET, "sax-root/")
    assert refused is not None and refused.rule == "token-api-disabled"


def test_an_unannotated_account_is_its_own_principal() -> None:
    p = project(iam_credentials=False)  # a federated token needs no Credentials API
    pod = Workload("sax", "sax-http")
    principal = ga.workload_principal(p, pod)
    assert principal.endswith(f"/workloadIdentityPools/{POOL}/subject/ns/sax/sa/sax-http")
    refused = ga.refuse_object_access(p, pod, BUCKET, "sax-root/")
    assert refused is not None and principal in refused.message
    grant(p, gp.BUCKET_IAM_MEMBER, bucket=BUCKET, role="roles/storage.objectViewer", member=principal)
    assert ga.refuse_object_access(p, pod, BUCKET, "sax-root/") is None
    # A grant on another bucket, or one without the permission, does not count.
    assert ga.refuse_object_access(p, pod, "other", "sax-root/") is not None


@pytest.mark.parametrize(("obj", "allowed"), [("cache/a", True), ("weights/a", False)])
def test_a_prefix_condition_admits_its_prefix_only(obj: str, allowed: bool) -> None:
    p = project()
    pod = Workload("ns", "ksa")
    condition = {
        "title": "only cache/",
        "expression": f'resource.name.startsWith("projects/_/buckets/{BUCKET}/objects/cache/")',
    }
    grant(p, gp.BUCKET_IAM_MEMBER, bucket=BUCKET, role="roles/storage.objectUser",
          member=ga.workload_principal(p, pod), condition=condition)  # fmt: skip
    assert (ga.refuse_object_access(p, pod, BUCKET, obj, ga.OBJECT_CREATE) is None) is allowed


def test_a_condition_it_cannot_read_stops_the_judge() -> None:
    p = project()
    pod = Workload("ns", "ksa")
    condition = {"title": "t", "expression": 'request.time < timestamp("2030-01-01T00:00:00Z")'}
    grant(p, gp.BUCKET_IAM_MEMBER, bucket=BUCKET, role="roles/storage.objectViewer",
          member=ga.workload_principal(p, pod), condition=condition)  # fmt: skip
    with pytest.raises(ga.CannotJudgeError):
        ga.refuse_object_access(p, pod, BUCKET, "x")


def test_a_deleted_member_no_longer_grants() -> None:
    p = project()
    pod = Workload("ns", "ksa")
    member = {"bucket": BUCKET, "role": "roles/storage.objectViewer", "member": ga.workload_principal(p, pod)}
    grant(p, gp.BUCKET_IAM_MEMBER, **member)
    assert ga.refuse_object_access(p, pod, BUCKET, "x") is None
    p.deleted(gp.BUCKET_IAM_MEMBER, member)
    assert ga.refuse_object_access(p, pod, BUCKET, "x") is not None


# --- the Saxml cell of the plan ------------------------------------------------------------------------


def _spec_of(resource: dict[str, Any]) -> dict[str, Any]:
    spec = resource["inputs"]["spec"]
    if resource["type"].endswith(":JobSet"):
        return dict(spec["replicatedJobs"][0]["template"]["spec"]["template"]["spec"])
    return dict(spec["template"]["spec"])


def cell_access(resources: dict[str, dict[str, Any]], p: Project) -> dict[str, gp.GcpError | None]:
    """Each cell component's verdict on what its code path does in the cell's bucket."""
    accounts = {
        r["inputs"]["metadata"]["name"]: r["inputs"]["metadata"].get("annotations")
        for r in resources.values()
        if r["type"] == "kubernetes:core/v1:ServiceAccount"
    }
    needs = {"sax-admin-server": ga.OBJECT_CREATE, "sax-model-server": ga.OBJECT_GET, "sax-http": ga.OBJECT_GET}
    verdicts: dict[str, gp.GcpError | None] = {}
    for resource in resources.values():
        if not resource["type"].endswith((":Deployment", ":JobSet")):
            continue
        spec = _spec_of(resource)
        container = spec["containers"][0]
        if container["name"] not in needs:
            continue
        env = {e["name"]: e.get("value", "") for e in container.get("env") or []}
        # The admin derives its root from the bare bucket name (the reference's env table).
        root = env.get("SAX_ROOT") or f"gs://{env['GSBUCKET']}/sax-root"
        bucket, _, prefix = root.removeprefix("gs://").partition("/")
        account = spec.get("serviceAccountName", "default")
        pod = Workload.of(resource["inputs"]["metadata"]["namespace"], account, accounts.get(account))
        verdicts[container["name"]] = ga.refuse_object_access(p, pod, bucket, prefix + "/", needs[container["name"]])
    return verdicts


def _cell(tree: Path, tmp_path: Path) -> dict[str, gp.GcpError | None]:
    resources = plan_resources(tree, "saxml-v5e", tmp_path / "plan.json")
    p = gcp_provider.prepare(None, load_stack("saxml-v5e"))
    assert first_up(resources, p) == []
    return cell_access(resources, p)


@pytest.mark.gcp_standin
def test_every_cell_component_may_do_what_its_code_path_does(tmp_path: Path) -> None:
    assert _cell(ROOT, tmp_path) == {"sax-admin-server": None, "sax-model-server": None, "sax-http": None}


HTTP_READER = 'role="roles/storage.{}",\n                member=workload_principal_output('
ADMIN_GRANT = 'bucket=self.bucket.name, role="roles/storage.{}", member=account.member'
CELL_MUTATIONS = (
    pytest.param(
        Mutation("workloads/saxml.py", HTTP_READER.format("objectViewer"), HTTP_READER.format("bucketViewer"),
                 "saxml-v5e", "object-access-denied", "sax-http"),
        id="sax-http-without-object-read",
    ),
    pytest.param(
        Mutation("workloads/saxml.py", ADMIN_GRANT.format("objectAdmin"), ADMIN_GRANT.format("objectViewer"),
                 "saxml-v5e", "object-access-denied", "sax-admin-server"),
        id="admin-that-cannot-write-its-address",
    ),
    pytest.param(
        Mutation("workloads/saxml.py", 'role="roles/iam.workloadIdentityUser",', 'role="roles/iam.serviceAccountUser",',
                 "saxml-v5e", "workload-identity-user-missing", "sax-model-server"),
        id="cell-account-without-workload-identity",
    ),
)  # fmt: skip


@pytest.mark.gcp_standin
@pytest.mark.parametrize("mutation", CELL_MUTATIONS)
def test_a_missing_grant_is_refused_naming_it(mutation: Mutation, tmp_path: Path) -> None:
    tree = mutated(tmp_path / "tree", mutation)
    refused = _cell(tree, tmp_path)[mutation.token]
    assert refused is not None, f"the judge agreed with the mistake in {mutation.path}"
    assert refused.rule == mutation.rule, refused


# --- two vLLM stacks of one project --------------------------------------------------------------------

BENCHMARKED = {"enabled": True, "rates": [1], "stageSeconds": 60}


def _two_stacks(tmp_path: Path) -> Path:
    """This checkout with dev and dev-b both serving vLLM from dev's weights bucket (one model, two
    stacks of a project) and both benchmarking: dev-b keeps its own namePrefix, block and namespace
    default, as a second team's stack would."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT, tree, ignore=NOT_THE_PROGRAM)
    dev = stack_file.read(ROOT / "Pulumi.dev.yaml")
    serving = {**dev["tpu-slicing:serving"], "benchmark": BENCHMARKED}
    for name in ("dev", "dev-b"):
        config = stack_file.read(ROOT / f"Pulumi.{name}.yaml")
        config["tpu-slicing:serving"] = {k: v for k, v in serving.items() if k != "namespace"}
        (tree / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    return tree


def _accounts(resources: dict[str, dict[str, Any]]) -> dict[str, Workload]:
    return {
        r["inputs"]["metadata"]["name"]: Workload.of(
            r["inputs"]["metadata"]["namespace"],
            r["inputs"]["metadata"]["name"],
            r["inputs"]["metadata"].get("annotations"),
        )
        for r in resources.values()
        if r["type"] == "kubernetes:core/v1:ServiceAccount"
    }


@pytest.mark.gcp_standin
def test_two_vllm_stacks_of_a_project_hold_apart_and_one_destroy_leaves_the_others_grants(tmp_path: Path) -> None:
    """Both stacks up on one bare project: each benchmark identity writes only its own stack's
    reports, and destroying dev-b's grants leaves dev's model servers reading the weights. Before
    namePrefix named the accounts, both stacks granted one principal (one namespace, one name): each
    wrote the other's reports, and dev-b's destroy revoked the member dev served with."""
    tree = _two_stacks(tmp_path)
    plans = {name: plan_resources(tree, name, tmp_path / f"{name}.json") for name in ("dev", "dev-b")}
    p = gcp_provider.prepare(None, load_stack("dev"))
    for resources in plans.values():
        assert first_up(resources, p) == []
    dev, dev_b = _accounts(plans["dev"]), _accounts(plans["dev-b"])
    bucket = load_stack("dev").serving.model.weights_bucket
    assert bucket is not None
    write = ga.OBJECT_CREATE
    assert (
        ga.refuse_object_access(p, dev["dev-serving-benchmark"], bucket, "benchmarks/dev/r/result.json", write) is None
    )
    refused = ga.refuse_object_access(
        p, dev_b["dev-b-serving-benchmark"], bucket, "benchmarks/dev/r/result.json", write
    )
    assert refused is not None and refused.rule == "object-access-denied", refused
    assert ga.refuse_object_access(p, dev_b["dev-b-vllm-model-server"], bucket, "config.json") is None

    for resource in plans["dev-b"].values():  # dev-b's `pulumi destroy`, as far as IAM goes
        if resource["type"] == gp.BUCKET_IAM_MEMBER:
            p.deleted(gp.BUCKET_IAM_MEMBER, cloud_state(resource["type"], resource["name"], resource["inputs"])[1])
    assert ga.refuse_object_access(p, dev["dev-vllm-model-server"], bucket, "config.json") is None
    assert ga.refuse_object_access(p, dev_b["dev-b-vllm-model-server"], bucket, "config.json") is not None
