"""Stand-in `gke-gcloud-auth-plugin`: the local control plane's static token as an ExecCredential.

The program's kubeconfig (infra/cluster.py `kubeconfig`) holds no token; the Kubernetes provider
and kubectl run this plugin, which on GKE trades the caller's Google credentials for an access
token. Here it returns the token of $TPU_SLICING_STANDIN_GKE_TOKEN (the plane's admin user) in
the same `client.authentication.k8s.io/v1beta1` ExecCredential the plugin prints.

What it cannot show: Google authentication, token expiry and refresh, and the IAM and RBAC
rights a real user has (the token here belongs to `system:masters`).
"""

from __future__ import annotations

import json
import os
import sys

TOKEN_ENV = "TPU_SLICING_STANDIN_GKE_TOKEN"


def main() -> int:
    token = os.environ.get(TOKEN_ENV)
    if not token:
        print(f"{TOKEN_ENV} is not set: this stand-in only serves a local control plane", file=sys.stderr)
        return 1
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        "status": {"token": token},
    }
    print(json.dumps(credential))
    return 0


if __name__ == "__main__":
    sys.exit(main())
