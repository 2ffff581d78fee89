"""tpu-slicing: TPU serving on GKE as one dependency graph.

This file only loads the configuration, composes the components and exports outputs; every rule
lives in `settings/`, every resource in a component (docs/architecture.md draws the layers).
The order below is the order of registration, which the plans keep (tests/test_plan_golden.py):

1. the Google Cloud half: APIs, network, the cluster (backends/platform.py);
2. the cluster's Kubernetes provider, which needs the cluster only, so cluster software installs
   while the TPU pools provision;
3. the TPU node pools: cubes under a workload policy, or one pool per fixed slice;
4. the batch controllers the serving backend asks for;
5. on TPU7x cubes, the dynamic-slicing platform: slice controller, Kueue queues, slicing checks
   and the serving namespace's NetworkPolicies (backends/dynamic_slicing.py);
6. the serving backend, looked up in the registry by `serving.backend` (backends/__init__.py);
7. observability: PodMonitorings, the dashboard and the opt-in alerts (observability/compose.py).
"""

import pulumi

from backends import REGISTRY
from backends.dynamic_slicing import dynamic_slicing
from backends.foundation import Foundation
from backends.platform import batch_controllers, cluster_provider, google_cloud, tpu_node_pools
from observability.compose import observe
from settings.capacity import node_pools
from settings.loader import from_runtime

# Validation happens here, before the first resource is registered.
config = from_runtime()
backend = REGISTRY[config.serving.backend]
nodes = node_pools(config)

cloud = google_cloud(config)
provider = cluster_provider(cloud.cluster)
tpu_pools = tpu_node_pools(config, cloud, nodes)
controllers = batch_controllers(config, provider, backend.controllers)
platform = Foundation(
    config, provider, cloud.network, cloud.cluster, tpu_pools, controllers, nodes.generation, nodes.machine
)
platform = dynamic_slicing(platform, backend.allowances(config))

served = backend.deploy(platform)
for key, value in served.outputs.items():
    pulumi.export(key, value)

dashboard_url = observe(config, provider, monitored_after=served.monitored_after, apis_ready=cloud.apis.ready)
if dashboard_url is not None:
    pulumi.export("dashboardUrl", dashboard_url)

cluster = cloud.cluster
pulumi.export("clusterName", cluster.cluster.name)
pulumi.export("location", cluster.cluster.location)
pulumi.export("endpoint", cluster.cluster.endpoint)
pulumi.export("kubeconfig", cluster.kubeconfig)
pulumi.export("nodePools", [pool.name for pool in tpu_pools.pools])
pulumi.export("totalChips", nodes.chips)
if controllers.required:
    # controllers.install false: the program neither upgrades nor reads the platform team's
    # controllers, so the versions it was written for are an output a version change shows in.
    pulumi.export("platformControllers", controllers.required)
