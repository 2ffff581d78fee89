"""What a GKE pod may do to a Cloud Storage object, judged from the IAM members a project holds.

The bare-project stand-in (gcp_project.Project) remembers every IAM member a stack creates. This
judge answers one question with them: may a pod of Kubernetes ServiceAccount `ns/ksa`, running on a
cluster with Workload Identity Federation for GKE, call `permission` on an object of `bucket`?
It refuses with the error the pod's client would see:

1. A KSA annotated `iam.gke.io/gcp-service-account: G` acts as G: the GKE metadata server mints G's
   token through the IAM Service Account Credentials API (refused while it is off: the project's
   rule token-api-disabled), and only when G's policy holds `roles/iam.workloadIdentityUser` for
   `serviceAccount:<project>.svc.id.goog[ns/ksa]` (GKE "Authenticate to Google Cloud APIs from GKE
   workloads", "Alternative: link Kubernetes ServiceAccounts to IAM"). Without it the metadata
   server answers "Unable to generate access token; IAM returned 403 Forbidden: Permission
   'iam.serviceAccounts.getAccessToken' denied on resource (or it may not exist)." with a line
   naming the missing binding (the text a GKE pod logged in camunda/camunda#31106).
2. A KSA without the annotation is itself the principal, `principal://iam.googleapis.com/projects/
   <number>/locations/global/workloadIdentityPools/<project>.svc.id.goog/subject/ns/<ns>/sa/<ksa>`
   (the same GKE page, "Configure authorization and principals").
3. The principal needs a role holding `permission` on the bucket, or on the project, whose
   condition (if any) admits the object: Cloud Storage "IAM roles for Cloud Storage" lists the
   permissions of each predefined role (ROLE_PERMISSIONS); the only condition judged is the
   `resource.name.startsWith("projects/_/buckets/<b>/objects/<prefix>")` form GCS documents for
   object-name prefixes ("Use IAM Conditions", resource.name) — any other expression stops the
   judge (it cannot say) rather than guess.
   Without one, the JSON API's 403: "<principal> does not have storage.objects.get access to the
   Google Cloud Storage object. Permission 'storage.objects.get' denied on resource (or it may not
   exist)." (GoogleCloudPlatform/ai-on-gke#893, spaceml-org/STARCOP#6), as the Go client wraps it
   (`googleapi: Error 403: <that>, forbidden`).

What it cannot show: IAM's propagation delay (a grant can take minutes to take effect), deny
policies, org policies, VPC Service Controls, custom roles, a principal's membership in a group or
principalSet, and who owns the bucket (a legacy ACL's owners).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tests.standins.gcp_project import (
    ACCOUNT_IAM_MEMBER,
    BUCKET_IAM_MEMBER,
    PROJECT_IAM_MEMBER,
    GcpError,
    Project,
    googleapi,
)

GOOGLE_ACCOUNT_ANNOTATION = "iam.gke.io/gcp-service-account"
WORKLOAD_IDENTITY_USER = "roles/iam.workloadIdentityUser"
OBJECT_GET = "storage.objects.get"
OBJECT_CREATE = "storage.objects.create"
OBJECT_LIST = "storage.objects.list"

# Cloud Storage "IAM roles for Cloud Storage" (cloud.google.com/storage/docs/access-control/iam-roles):
# the object permissions of the predefined roles this judge knows. A role not listed grants nothing here.
_VIEW = frozenset({OBJECT_GET, OBJECT_LIST})
_WRITE = _VIEW | {OBJECT_CREATE, "storage.objects.delete", "storage.objects.update"}
ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    "roles/storage.objectViewer": _VIEW,
    "roles/storage.objectCreator": frozenset({OBJECT_CREATE}),
    "roles/storage.objectUser": _WRITE,
    "roles/storage.objectAdmin": _WRITE,
    "roles/storage.admin": _WRITE,
    "roles/storage.legacyObjectReader": frozenset({OBJECT_GET}),
    "roles/storage.legacyBucketReader": frozenset({OBJECT_LIST}),
    "roles/storage.legacyBucketWriter": frozenset({OBJECT_LIST, OBJECT_CREATE, "storage.objects.delete"}),
    "roles/storage.bucketViewer": frozenset(),  # buckets.get/list only
}
_PREFIX = re.compile(
    r'^resource\.name\.startsWith\("projects/_/buckets/(?P<bucket>[^/"]+)/objects/(?P<prefix>[^"]*)"\)$'
)

RULES: dict[str, str] = {
    "workload-identity-user-missing": "GKE 'Authenticate to Google Cloud APIs from GKE workloads' (a KSA may act "
    "as the Google account it names only with roles/iam.workloadIdentityUser on that account); the metadata "
    "server's 403 text from camunda/camunda#31106",
    "object-access-denied": "Cloud Storage 'IAM roles for Cloud Storage' (each role's permissions) and 'Use IAM "
    "Conditions' (resource.name prefixes); the 403 text from GoogleCloudPlatform/ai-on-gke#893 and "
    "spaceml-org/STARCOP#6",
}


class CannotJudgeError(Exception):
    """A grant this judge cannot evaluate (a condition it does not know): the test must say so."""


@dataclass(frozen=True)
class Workload:
    """A pod's identity: its namespace, its Kubernetes ServiceAccount and that account's annotation."""

    namespace: str
    service_account: str
    google_account: str | None = None

    @staticmethod
    def of(namespace: str, service_account: str, annotations: Mapping[str, str] | None) -> Workload:
        return Workload(namespace, service_account, (annotations or {}).get(GOOGLE_ACCOUNT_ANNOTATION))


def workload_principal(project: Project, workload: Workload) -> str:
    return (
        f"principal://iam.googleapis.com/projects/{project.number}/locations/global/workloadIdentityPools/"
        f"{project.project_id}.svc.id.goog/subject/ns/{workload.namespace}/sa/{workload.service_account}"
    )


def _members(project: Project, token: str) -> list[dict[str, Any]]:
    return [r["state"] for r in project.resources.values() if r["token"] == token]


def _admits(condition: Mapping[str, Any] | None, bucket: str, obj: str) -> bool:
    if not condition:
        return True
    expression = str(condition.get("expression") or "").strip()
    found = _PREFIX.match(expression)
    if found is None:
        raise CannotJudgeError(f"an IAM condition this judge cannot evaluate: {expression!r}")
    return found.group("bucket") == bucket and obj.startswith(found.group("prefix"))


def refuse_object_access(
    project: Project, workload: Workload, bucket: str, obj: str, permission: str = OBJECT_GET
) -> GcpError | None:
    """None when `workload` may call `permission` on gs://`bucket`/`obj`, else the error its client sees."""
    if workload.google_account is not None:
        refused = project.refuse_token_exchange(workload.google_account)
        if refused is not None:
            return refused
        wi_member = f"serviceAccount:{project.project_id}.svc.id.goog[{workload.namespace}/{workload.service_account}]"
        bound = any(
            str(m.get("serviceAccountId", "")).endswith(f"/serviceAccounts/{workload.google_account}")
            and m.get("role") == WORKLOAD_IDENTITY_USER
            and m.get("member") == wi_member
            for m in _members(project, ACCOUNT_IAM_MEMBER)
        )
        if not bound:
            message = (
                "Unable to generate access token; IAM returned 403 Forbidden: Permission "
                "'iam.serviceAccounts.getAccessToken' denied on resource (or it may not exist).\nThis error could be "
                "caused by a missing IAM policy binding on the target IAM service account."
            )
            return GcpError(403, "PERMISSION_DENIED", "forbidden", message, "workload-identity-user-missing")
        member, who = f"serviceAccount:{workload.google_account}", workload.google_account
    else:
        member = who = workload_principal(project, workload)
    grants = [m for m in _members(project, BUCKET_IAM_MEMBER) if str(m.get("bucket", "")).rsplit("/", 1)[-1] == bucket]
    grants += _members(project, PROJECT_IAM_MEMBER)
    for grant in grants:
        if grant.get("member") != member or permission not in ROLE_PERMISSIONS.get(str(grant.get("role")), ()):
            continue
        if _admits(grant.get("condition"), bucket, obj):
            return None
    detail = (
        f"{who} does not have {permission} access to the Google Cloud Storage object. Permission "
        f"'{permission}' denied on resource (or it may not exist)."
    )
    return GcpError(403, "PERMISSION_DENIED", "forbidden", googleapi(403, detail, "forbidden"), "object-access-denied")
