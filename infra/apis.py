"""Project services and the AI-zone preview feature the TPU7x zones need."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

# From the reference's step 02; storage is on by default in every project.
REQUIRED_APIS = (
    "container.googleapis.com",
    "compute.googleapis.com",
    "iam.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    "file.googleapis.com",
    "networkservices.googleapis.com",
)


@dataclass(frozen=True)
class ProjectApisArgs:
    project: str


class ProjectApis(pulumi.ComponentResource):
    """Enables the APIs and makes the AI zones (e.g. us-central1-ai1a) visible."""

    services: dict[str, gcp.projects.Service]
    ai_zones: gcp.compute.PreviewFeature

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
        self.ai_zones = gcp.compute.PreviewFeature(
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
        self.register_outputs({"services": list(REQUIRED_APIS)})

    @property
    def ready(self) -> list[pulumi.Resource]:
        """What anything that calls these APIs must wait for."""
        return [*self.services.values(), self.ai_zones]
