"""The wait between the TPU workloads and the slice controller on `pulumi destroy`.

Pulumi deletes a LeaderWorkerSet or JobSet and moves on once the object is gone, while its pods,
Kueue Workloads and GKE's Slice objects (`slices.accelerator.gke.io`) are still finalizing; only a
running slice controller removes a Slice's finalizer. Deleting the controller then would leave
the Slices, and the node pools they hold, stuck. This command does nothing on create; on delete,
which Pulumi runs after every workload that depends on the slice controller is gone and before
the controller itself, it waits until no Slice is left, for a bounded time.
"""

from __future__ import annotations

from contracts.kubeconfig_shell import KUBECONFIG_FROM_ENV

SLICE_RESOURCE = "slices.accelerator.gke.io"  # installed by GKE with --enable-slice-controller
# How long a destroy waits for the slice controller to finalize the Slices; SLICE_DRAIN_SECONDS
# in the command's environment overrides it.
DRAIN_SECONDS = 1800


def drain_script() -> str:
    """Wait until the cluster holds no Slice. A cluster without the Slice resource has nothing to
    drain; any other error is retried until the deadline."""
    return (
        "\n".join(
            [
                "set -uo pipefail",
                KUBECONFIG_FROM_ENV,
                f"drain_wait=${{SLICE_DRAIN_SECONDS:-{DRAIN_SECONDS}}}; deadline=$((SECONDS + drain_wait))",
                "while true; do",
                f'  if left=$(kubectl --kubeconfig "$kubeconfig" get {SLICE_RESOURCE} -A -o name 2>&1); then',
                '    [ -z "$left" ] && exit 0',
                '  elif printf "%s" "$left" | grep -q "the server doesn\'t have a resource type"; then',
                "    exit 0",
                "  fi",
                '  if [ "$SECONDS" -ge "$deadline" ]; then',
                f'    echo "{SLICE_RESOURCE} still present after $drain_wait s, so the slice controller is kept: "'
                '"$left" >&2',
                "    exit 1",
                "  fi",
                "  sleep 5",
                "done",
            ]
        )
        + "\n"
    )
