"""JetStream (MaxText) with Pathways on multi-host slices: one LWS group per slice."""

from __future__ import annotations

from backends.foundation import Foundation, Served
from settings.model import StackConfig
from shared.network_policies import Allowance
from workloads.jetstream import Jetstream, JetstreamArgs


def allowances(config: StackConfig) -> list[Allowance]:
    return []  # not on the dynamic-slicing platform: the component owns its namespace's policies


def deploy(base: Foundation) -> Served:
    config = base.config
    serving, versions = config.serving, config.versions
    assert serving.model.weights_bucket is not None  # validated: jetstream needs its checkpoint bucket
    jetstream = Jetstream(
        "jetstream",
        JetstreamArgs(
            provider=base.provider,
            project=config.project,
            namespace=serving.namespace,
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
        ),
    )
    return Served(outputs={"jetstreamAddress": jetstream.address}, monitored_after=[jetstream.namespace])
