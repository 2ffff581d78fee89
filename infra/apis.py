"""Project services, and the AI-zone preview feature when the stack's TPUs live in AI zones."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

# The reference's step 02, plus what the stack writes to: Cloud Monitoring (the dashboard, the
# alerts, Managed Prometheus) and Cloud Logging (the node service account's log writes), which
# new projects often but not always have on; Cloud Storage, whose buckets the program creates
# (Saxml's admin bucket), reads and grants on (the weights bucket): on by default in a console-made
# project ("Services enabled by default", cloud.google.com/service-usage/docs/enabled-service), not
# in every one; and the IAM Service Account Credentials API, through which the GKE metadata server
# mints a Google service account's token for a pod whose Kubernetes ServiceAccount is bound to it
# (GKE "Authenticate to Google Cloud APIs from GKE workloads", cloud.google.com/kubernetes-engine/
# docs/how-to/workload-identity; Saxml's pods): off, the pod's every GCS call gets a 403
# ("IAM Service Account Credentials API has not been used in project N", google/kctf#194).
REQUIRED_APIS = (
    "container.googleapis.com",
    "compute.googleapis.com",
    "iam.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    "file.googleapis.com",
    "networkservices.googleapis.com",
    "monitoring.googleapis.com",
    "logging.googleapis.com",
    "storage.googleapis.com",
    "iamcredentials.googleapis.com",
)


@dataclass(frozen=True)
class ProjectApisArgs:
    project: str
    ai_zones: bool  # TPU7x: AI zones such as us-central1-ai1a are hidden without the preview feature


class ProjectApis(pulumi.ComponentResource):
    """Enables the APIs and makes the AI zones (e.g. us-central1-ai1a) visible."""

    services: dict[str, gcp.projects.Service]
    ai_zones: gcp.compute.PreviewFeature | None

    def __init__(self, name: str, args: ProjectApisArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tpu-slicing:infra:ProjectApis", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.services = {
            api: gcp.projects.Service(
                api.split(".")[0],
                gcp.projects.ServiceArgs(
                    project=args.project,
                    service=api,
                    # Other stacks and tools in the project may rely on these APIs.
                    disable_on_destroy=False,
                    disable_dependent_services=False,
                ),
                opts=child,
            )
            for api in REQUIRED_APIS
        }
        # A project-wide switch that several stacks may share: harmless, because the provider's
        # delete of a PreviewFeature only drops it from this stack's state and leaves it enabled.
        self.ai_zones = None
        if args.ai_zones:
            self.ai_zones = self._ai_zones_feature(args)
        self.register_outputs({"services": list(REQUIRED_APIS)})

    def _ai_zones_feature(self, args: ProjectApisArgs) -> gcp.compute.PreviewFeature:
        return gcp.compute.PreviewFeature(
            "ai-zones-visibility",
            gcp.compute.PreviewFeatureArgs(
                name="ai-zones-visibility",
                project=args.project,
                activation_status="ENABLED",
                rollout_operation=gcp.compute.PreviewFeatureRolloutOperationArgs(
                    rollout_input=gcp.compute.PreviewFeatureRolloutOperationRolloutInputArgs(
                        predefined_rollout_plan="ROLLOUT_PLAN_FAST_ROLLOUT",
                    ),
                ),
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.services["compute.googleapis.com"]]),
        )

    @property
    def ready(self) -> list[pulumi.Resource]:
        """What anything that calls these APIs must wait for."""
        return [*self.services.values(), *([self.ai_zones] if self.ai_zones is not None else [])]
