"""JetStream (MaxText) with Pathways on multi-host slices: one LWS group per slice, and the smoke
Job that `pulumi up` waits for: one completion through jetstream-http."""

from __future__ import annotations

from backends.foundation import Foundation, Served
from contracts.network_policies import Allowance
from domain.serving_budget import BUDGET
from settings.model import StackConfig
from workloads.jetstream import Jetstream, JetstreamArgs, service_url
from workloads.smoke_job import JETSTREAM_API, SmokeJob, SmokeJobArgs
from workloads.smoke_job import JOB_NAME as SMOKE_JOB

# What the smoke Job's fingerprint reads of the versions: the images of the servers it tests, and its own.
TESTED_IMAGES = frozenset(
    {
        "jetstream_maxengine_image",
        "jetstream_http_image",
        "jetstream_pathways_image",
        "pathways_server_image",
        "pathways_proxy_image",
        "smoke_test_image",
    }
)


def allowances(config: StackConfig) -> list[Allowance]:
    return []  # not on the dynamic-slicing platform: the component owns its namespace's policies


def deploy(base: Foundation) -> Served:
    config = base.config
    serving, versions = config.serving, config.versions
    assert serving.model.weights_bucket is not None  # validated: jetstream needs its checkpoint bucket
    args = JetstreamArgs(
        provider=base.provider,
        project=config.project,
        namespace=serving.namespace,
        service_account=config.names.jetstream_account,
        generation=base.generation,
        topology=serving.slice.topology,
        machine_type=serving.slice.machine_type,
        slices=serving.slices,
        bucket=serving.model.weights_bucket,
        checkpoint_path=serving.model.path,
        maxtext_model=serving.jetstream.maxtext_model,
        tokenizer_path=serving.jetstream.tokenizer_path,
        per_device_batch_size=serving.jetstream.per_device_batch_size,
        max_prefill_predict_length=serving.jetstream.max_prefill_predict_length,
        max_target_length=serving.jetstream.max_target_length,
        quantization=serving.jetstream.quantization,
        tensor_parallelism=config.jetstream_tensor_parallelism(),
        images={
            "maxengine": versions.jetstream_maxengine_image,
            "http": versions.jetstream_http_image,
            "pathways": versions.jetstream_pathways_image,
            "pathways_server": versions.pathways_server_image,
            "pathways_proxy": versions.pathways_proxy_image,
        },
        exposure=serving.http.type,
        source_ranges=[str(r) for r in serving.http.source_ranges],
        pod_cidr=str(config.network.pod_cidr),
        depends_on=base.controllers.ready(),
        tpu_pools=[base.tpu_pools],
        identity_pool=[base.cluster.cluster],
        smoke_test_job=SMOKE_JOB if serving.smoke_test.enabled else None,
    )
    jetstream = Jetstream("jetstream", args)
    # The LeaderWorkerSet (or Deployment) skips pulumi's await: this Job is what proves the servers
    # answer, and a failed Job fails `pulumi up` with the program's last lines.
    smoke = serving.smoke_test
    if smoke.enabled:
        SmokeJob(
            "smoke-test",
            SmokeJobArgs(
                provider=base.provider,
                namespace=serving.namespace,
                gateway_address=None,
                base_url=service_url(args),
                api=JETSTREAM_API,
                model=serving.model.name,
                image=versions.smoke_test_image,
                # A deadline the stack sets (at least JetStream's own budget, settings) or that budget.
                deadline_seconds=smoke.deadline_seconds
                if "deadline_seconds" in smoke.model_fields_set
                else BUDGET.jetstream_smoke_deadline_seconds,
                # What the servers are, and the run id that re-runs the test; not the number of
                # slices (a new group's leader joins the Service once its probes pass, and a
                # scale-down leaves groups already tested), nor the other backends' images (a vLLM
                # bump must not re-run this Job).
                serving_spec=[
                    serving.model_dump(mode="json", include={"namespace", "model", "slice", "jetstream"}),
                    versions.model_dump(mode="json", include=set(TESTED_IMAGES)),
                    *([smoke.run_id] if smoke.run_id else []),
                ],
                depends_on=[jetstream],
            ),
        )
    return Served(outputs={"jetstreamAddress": jetstream.address}, monitored_after=[jetstream.namespace])
