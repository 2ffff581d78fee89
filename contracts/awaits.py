"""How `pulumi up` waits for Kubernetes objects whose readiness the provider's default misjudges.

pulumi-kubernetes reads `pulumi.com/waitFor` on any object and waits for that condition instead
of its built-in await (provider docs, "Waiting for a custom condition", 4.18+).
"""

from __future__ import annotations

WAIT_FOR = "pulumi.com/waitFor"
TIMEOUT_SECONDS = "pulumi.com/timeoutSeconds"

# A LoadBalancer Service: its address, not its endpoints. The default Service await also waits
# for ready endpoints, and model servers take up to an hour to load, so the update would time
# out although the load balancer was long there.
LOAD_BALANCER_ADDRESS = {
    WAIT_FOR: "jsonpath={.status.loadBalancer.ingress[0].ip}",
    TIMEOUT_SECONDS: "1200",
}
