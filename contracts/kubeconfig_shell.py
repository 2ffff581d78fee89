"""The shell line a local Command starts with to give kubectl the cluster's kubeconfig.

The kubeconfig arrives in the environment (KUBECONFIG_DATA, a secret the engine passes), is
written to a private temporary file for the script's life and removed on exit.
"""

KUBECONFIG_FROM_ENV = (
    'kubeconfig=$(mktemp); trap \'rm -f "$kubeconfig"\' EXIT; printf "%s" "$KUBECONFIG_DATA" > "$kubeconfig"'
)
