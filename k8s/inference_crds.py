"""Gateway API Inference Extension CRDs at a pinned release, applied by kubectl.

Why a command and not a Pulumi-native object: the CRDs ship only as manifests
(no chart), `yaml.v2.ConfigFile` cannot be built while a brand-new stack's
kubeconfig is unknown (so `pulumi preview` of a new stack would fail), and the
legacy `yaml.ConfigFile` downloads at program run time, which an offline plan
cannot. The command downloads files at an immutable commit, checks the
checksums we know, and applies them server-side; it needs `curl`, `sha256sum`,
`kubectl` and `gke-gcloud-auth-plugin` on the machine running Pulumi.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_command as command

from k8s.inference_releases import REPOSITORY, InferenceExtensionRelease, release

_KUBECONFIG = 'kubeconfig=$(mktemp); trap \'rm -f "$kubeconfig"\' EXIT; printf "%s" "$KUBECONFIG_DATA" > "$kubeconfig"'


def apply_script(pinned: InferenceExtensionRelease) -> str:
    lines = ["set -euo pipefail", _KUBECONFIG, "dir=$(mktemp -d)"]
    for index, crd_file in enumerate(pinned.files):
        url = f"{REPOSITORY}/{pinned.commit}/{crd_file.path}"
        target = f'"$dir/{index}.yaml"'
        lines.append(f"curl -fsSL --retry 5 {shlex.quote(url)} -o {target}")
        if crd_file.sha256:
            lines.append(f'echo "{crd_file.sha256}  $dir/{index}.yaml" | sha256sum -c -')
    lines.append('kubectl --kubeconfig "$kubeconfig" apply --server-side --field-manager=tpu-slicing -f "$dir"')
    crds = " ".join(f"crd/{f.crd}" for f in pinned.files)
    lines.append(f'kubectl --kubeconfig "$kubeconfig" wait --for=condition=Established --timeout=120s {crds}')
    return "\n".join(lines) + "\n"


def delete_script(pinned: InferenceExtensionRelease) -> str:
    crds = " ".join(f.crd for f in pinned.files)
    return (
        "\n".join(
            [
                "set -euo pipefail",
                _KUBECONFIG,
                f'kubectl --kubeconfig "$kubeconfig" delete crd --ignore-not-found {crds}',
            ]
        )
        + "\n"
    )


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
                update=apply_script(pinned),
                delete=delete_script(pinned),
                interpreter=["/bin/bash", "-c"],
                environment={"KUBECONFIG_DATA": args.kubeconfig},
                triggers=[pinned.version, pinned.commit],
                logging=command.local.Logging.STDERR,
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        self.register_outputs({"version": pinned.version})
