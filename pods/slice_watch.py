"""Whether a TPU slice of the serving LeaderWorkerSets failed to come up while the smoke test runs,
so the test fails at once, naming the Workload and what the slice controller said, instead of
retrying the gateway until its deadline.

Shipped beside smoke_request.py in the smoke test's ConfigMap (workloads/smoke_job.py) and run on
the same stock image: standard library only. smoke_request.py loads it from its own directory when
SMOKE_SLICE_CHECK is set, and asks it between two attempts (every WATCH_SECONDS of smoke_request.py
while it waits).

Why: GKE's slice controller gives a slice `--activation-timeout` to become ACTIVE
(k8s/slice_controller.py passes the 60 minutes of GKE's dynamic-slicing guide, with the
UseRetryMechanismForSliceCreation gate on). A slice that does not come up answers the Workload's
admission check Retry (or Rejected), and Kueue then evicts the Workload and queues it again, or,
for Rejected, deactivates it (kueue v0.19.2 pkg/controller/core/workload_controller.go
`reconcileCheckBasedEviction`, reason AdmissionCheck). The group then starts over with a new
activation ahead of it, while the smoke test's deadline (domain/serving_budget.py) counts only one:
the test would retry for hours and then blame the gateway.

A failed activation, for a Workload that one of the named LeaderWorkerSets owns (Kueue's LWS
integration owns each group's Workload by its LeaderWorkerSet: kueue v0.19.2
pkg/controller/jobs/leaderworkerset/leaderworkerset_reconciler.go) and the named admission check:

- the check's state is Retry or Rejected now (kueue v0.19.2 apis/kueue/v1beta2/workload_types.go
  AdmissionCheckState), or
- its `retryCount` is above what it was when the test first read it (0 for a Workload created
  since): Kueue adds one each time it resets a Retry check to Pending on eviction
  (pkg/workload/workload.go `resetChecksOnEviction`), so the failure is seen even once the
  Workload has been admitted again.

The report quotes the Workload's Evicted condition: "Evicted due to AdmissionCheck in Retry state:
<check>: <what the slice controller said>" (workload_controller.go `buildAdmissionChecksMessage`),
kept as "Previously: ..." once quota is reserved again (pkg/workload/workload.go
`resetActiveCondition`); without one, the check's own message.

The API: the address the kubelet gives every container (KUBERNETES_SERVICE_HOST and _PORT), the
pod's projected ServiceAccount token and the cluster's CA from SMOKE_KUBE_API_DIR (read at each
call: the kubelet rotates the token), the namespace from SMOKE_NAMESPACE (the downward API). A read
that fails is logged once per distinct error and never fails the test by itself.
"""

from __future__ import annotations

import dataclasses
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

REQUEST_SECONDS = 10.0
TOKEN_FILE = "token"
CA_FILE = "ca.crt"
WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/workloads"
OWNER_KIND = "LeaderWorkerSet"
FAILED_STATES = ("Retry", "Rejected")
QUOTE_CHARS = 400  # of a Kueue message: the termination message keeps the log's last 2 KiB
ENV_CHECK = "SMOKE_SLICE_CHECK"
ENV_OWNERS = "SMOKE_SLICE_OWNERS"
ENV_DIR = "SMOKE_KUBE_API_DIR"
ENV_NAMESPACE = "SMOKE_NAMESPACE"

Workloads = list[dict[str, Any]]


class WatchError(Exception):
    """The watch's settings are missing or malformed (the smoke test's exit code 2)."""


@dataclasses.dataclass(frozen=True)
class Settings:
    check: str
    owners: frozenset[str]
    namespace: str
    api_url: str
    credentials: Path


def settings_from_env(env: Mapping[str, str]) -> Settings | None:
    """The watch's settings, or None when SMOKE_SLICE_CHECK is unset (no slices to watch)."""
    check = env.get(ENV_CHECK, "").strip()
    if not check:
        return None
    missing = [name for name in (ENV_OWNERS, ENV_DIR, ENV_NAMESPACE) if not env.get(name, "").strip()]
    missing += [name for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT") if not env.get(name)]
    if missing:
        raise WatchError(f"{ENV_CHECK} is set, so {', '.join(missing)} must be too")
    owners = frozenset(name.strip() for name in env[ENV_OWNERS].split(",") if name.strip())
    host = env["KUBERNETES_SERVICE_HOST"]
    host = f"[{host}]" if ":" in host else host  # an IPv6 address
    return Settings(
        check=check,
        owners=owners,
        namespace=env[ENV_NAMESPACE].strip(),
        api_url=f"https://{host}:{env['KUBERNETES_SERVICE_PORT']}",
        credentials=Path(env[ENV_DIR]),
    )


def list_workloads(settings: Settings) -> Workloads:
    """The namespace's Workloads, read with the pod's token; raises OSError or ValueError."""
    token = (settings.credentials / TOKEN_FILE).read_text().strip()
    context = ssl.create_default_context(cafile=str(settings.credentials / CA_FILE))
    request = urllib.request.Request(
        settings.api_url + WORKLOADS.format(namespace=settings.namespace),
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
    )
    # No proxy: the API server is in-cluster, whatever proxy the image's environment names.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    with opener.open(request, timeout=REQUEST_SECONDS) as response:
        items = json.load(response).get("items")
    if not isinstance(items, list):
        raise ValueError("the Workload list has no items")
    return [item for item in items if isinstance(item, dict)]


def _owner(workload: Mapping[str, Any], owners: frozenset[str]) -> str | None:
    for ref in (workload.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == OWNER_KIND and ref.get("name") in owners:
            return str(ref["name"])
    return None


def _check(workload: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    for state in (workload.get("status") or {}).get("admissionChecks") or []:
        if state.get("name") == name:
            return state
    return None


def _retries(workload: Mapping[str, Any], name: str) -> int:
    state = _check(workload, name) or {}
    count = state.get("retryCount")
    return count if isinstance(count, int) else 0


def _uid(workload: Mapping[str, Any]) -> str:
    return str((workload.get("metadata") or {}).get("uid", ""))


def retry_counts(workloads: Iterable[Mapping[str, Any]], settings: Settings) -> dict[str, int]:
    """Each watched Workload's retry count of the check, by UID: the baseline of a test."""
    return {_uid(w): _retries(w, settings.check) for w in workloads if _owner(w, settings.owners) is not None}


def _quote(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 3] + "..."


def _said(workload: Mapping[str, Any], state: Mapping[str, Any]) -> str:
    for condition in (workload.get("status") or {}).get("conditions") or []:
        # Evicted by a check now (reason AdmissionCheck), or before the quota reserved since
        # (reason QuotaReserved, the message kept after "Previously: ").
        evicted = condition.get("reason") == "AdmissionCheck" or "AdmissionCheck" in str(condition.get("message", ""))
        if condition.get("type") == "Evicted" and evicted:
            return _quote(str(condition["message"]))
    return _quote(str(state.get("message", "")))


def failures(workloads: Iterable[Mapping[str, Any]], settings: Settings, baseline: Mapping[str, int]) -> list[str]:
    """One line per watched Workload whose slice failed to come up since the baseline was read."""
    lines = []
    for workload in workloads:
        owner = _owner(workload, settings.owners)
        state = _check(workload, settings.check)
        if owner is None or state is None:
            continue
        retries = _retries(workload, settings.check) - baseline.get(_uid(workload), 0)
        current = state.get("state")
        if current not in FAILED_STATES and retries <= 0:
            continue
        name = (workload.get("metadata") or {}).get("name", "?")
        if current == "Rejected":
            outcome = "rejected: Kueue deactivates the Workload, which waits until it is activated again"
        else:
            times = max(retries, 1)
            outcome = f"{times} failed activation{'s' if times > 1 else ''}, the group queued again"
        lines.append(
            f"TPU slice for Workload {settings.namespace}/{name} ({OWNER_KIND} {owner}) did not come up "
            f"(admission check {settings.check}: {outcome}); Kueue said: {_said(workload, state)}"
        )
    return lines


class SliceWatch:
    """Called between attempts: None while every watched slice is fine, else why the test stops."""

    def __init__(
        self,
        settings: Settings,
        log: Callable[[str], None],
        read: Callable[[Settings], Workloads] = list_workloads,
    ) -> None:
        self.settings, self.log, self.read = settings, log, read
        self.baseline: dict[str, int] | None = None
        self._reported: set[str] = set()

    def _workloads(self) -> Workloads | None:
        try:
            return self.read(self.settings)
        except (OSError, ValueError, urllib.error.URLError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            if error not in self._reported:
                self._reported.add(error)
                self.log(f"slice watch: cannot read the Workloads ({error}); the requests go on")
            return None

    def start(self) -> None:
        """Reads the retry counts as they are before the test's first request."""
        workloads = self._workloads()
        if workloads is not None:
            self.baseline = retry_counts(workloads, self.settings)
            self.log(
                f"slice watch: {len(self.baseline)} Workload(s) of {', '.join(sorted(self.settings.owners))}, "
                f"admission check {self.settings.check}"
            )

    def __call__(self) -> str | None:
        workloads = self._workloads()
        if workloads is None:
            return None
        if self.baseline is None:  # the first read failed: counts from now on
            self.baseline = retry_counts(workloads, self.settings)
            return None
        found = failures(workloads, self.settings, self.baseline)
        return "; ".join(found) if found else None
