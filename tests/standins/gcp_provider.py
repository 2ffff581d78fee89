"""Stand-in `pulumi-resource-gcp` 10.2.0 for the real-engine tests.

The real provider bridges a patched Terraform provider whose module the proxy does not serve.
This one answers with the same placeholders as the offline plan (`plan.engine.cloud_state`):
a cluster endpoint and CA, service-account emails, dashboard ids, the project number.

What it cannot show: whether Google Cloud accepts a field or a combination of fields (the
bridged schema's validation and the API's), which fields force a replacement, what GKE returns
for fields it normalises, and every timing. Those are listed in the README under
"What only the real cloud can check".
"""

from __future__ import annotations

from plan.engine import cloud_invoke, cloud_state
from tests.standins.provider import StandInProvider, run

if __name__ == "__main__":
    run(StandInProvider("10.2.0", cloud_state, cloud_invoke))
