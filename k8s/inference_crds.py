"""Gateway API Inference Extension CRDs at a pinned release, applied by kubectl.

Why a command and not a Pulumi-native object: the CRDs ship only as manifests
(no chart), `yaml.v2.ConfigFile` cannot be built while a brand-new stack's
kubeconfig is unknown (so `pulumi preview` of a new stack would fail), and the
legacy `yaml.ConfigFile` downloads at program run time, which an offline plan
cannot. The command downloads the files the program owns at an immutable commit,
checks the checksums we know, applies them server-side, and waits for the ones
GKE installs itself (InferencePool); it needs `curl`, `sha256sum`, `kubectl`
and `gke-gcloud-auth-plugin` on the machine running Pulumi.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_command as command

from contracts.kubeconfig_shell import KUBECONFIG_FROM_ENV
from domain.inference_releases import REPOSITORY, InferenceExtensionRelease, release

# How long the apply waits for GKE to install the CRDs it owns (minutes after the cluster is up, in
# practice); CRD_WAIT_SECONDS in the Command's environment overrides it.
GKE_CRD_WAIT_SECONDS = 1200


def apply_script(pinned: InferenceExtensionRelease) -> str:
    """Apply the CRDs the program owns; wait for those GKE owns. Nothing here ever deletes a CRD.

    Server-side apply with the program's field manager and without --force-conflicts: a field
    another manager (GKE, another tenant's install) owns is a conflict that fails the update,
    never a silent takeover.
    """
    lines = ["set -euo pipefail", KUBECONFIG_FROM_ENV]
    owned = [f for f in pinned.files if not f.gke_managed]
    if owned:
        lines.append("dir=$(mktemp -d)")
    for index, crd_file in enumerate(owned):
        url = f"{REPOSITORY}/{pinned.commit}/{crd_file.path}"
        target = f'"$dir/{index}.yaml"'
        lines.append(f"curl -fsSL --retry 5 {shlex.quote(url)} -o {target}")
        lines.append(f'echo "{crd_file.sha256}  $dir/{index}.yaml" | sha256sum -c -')
    if owned:
        lines.append('kubectl --kubeconfig "$kubeconfig" apply --server-side --field-manager=tpu-slicing -f "$dir"')
    crds = " ".join(f"crd/{f.crd}" for f in pinned.files)
    # GKE installs its CRDs shortly after the cluster is up: wait for them to exist first, for a
    # bounded time, so a cluster without the Gateway API fails `pulumi up` instead of hanging it.
    managed = [f.crd for f in pinned.files if f.gke_managed]
    if managed:
        lines.append(f"crd_wait=${{CRD_WAIT_SECONDS:-{GKE_CRD_WAIT_SECONDS}}}; deadline=$((SECONDS + crd_wait))")
    for crd in managed:
        lines += [
            f'until kubectl --kubeconfig "$kubeconfig" get crd/{crd} >/dev/null 2>&1; do',
            '  if [ "$SECONDS" -ge "$deadline" ]; then',
            f'    echo "crd/{crd} is not installed after $crd_wait s: GKE installs it on clusters with the Gateway '
            'API enabled (gatewayApiConfig) from 1.34.0-gke.1626000" >&2',
            "    exit 1",
            "  fi",
            "  sleep 5",
            "done",
        ]
    lines.append(f'kubectl --kubeconfig "$kubeconfig" wait --for=condition=Established --timeout=600s {crds}')
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class InferenceCrdsArgs:
    kubeconfig: pulumi.Input[str]
    version: str
    depends_on: Sequence[pulumi.Resource] = ()


class InferenceCrds(pulumi.ComponentResource):
    apply: command.local.Command

    def __init__(self, name: str, args: InferenceCrdsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpu-slicing:k8s:InferenceCrds", name, None, opts)
        pinned = release(args.version)
        self.apply = command.local.Command(
            "apply",
            command.local.CommandArgs(
                create=apply_script(pinned),
                # A new release is an update: the same apply. No `triggers` (pulumi-command's SDK
                # turns them into replace-on-change, pulumi-command#855, and a replacement would
                # run the old command's delete after the new apply) and no `delete`: CRDs are
                # shared by every tenant of the cluster, and deleting one deletes every object of
                # its kind. They go with the cluster.
                update=apply_script(pinned),
                interpreter=["/bin/bash", "-c"],
                environment={"KUBECONFIG_DATA": args.kubeconfig},
                logging=command.local.Logging.STDERR,
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        self.register_outputs({"version": pinned.version})
