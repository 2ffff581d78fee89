"""Saxml on multi-host slices: an admin server, one model-server JobSet Job per slice, sax-http
and the publish Job."""

from __future__ import annotations

from backends.foundation import Foundation, Served
from contracts.network_policies import Allowance
from settings.model import StackConfig
from workloads.saxml import Saxml, SaxmlArgs


def allowances(config: StackConfig) -> list[Allowance]:
    return []  # not on the dynamic-slicing platform: the component owns its namespace's policies


def deploy(base: Foundation) -> Served:
    config = base.config
    serving, versions, names = config.serving, config.versions, config.names
    saxml = Saxml(
        "saxml",
        SaxmlArgs(
            provider=base.provider,
            project=config.project,
            region=config.location,
            namespace=serving.namespace,
            bucket_name=names.sax_bucket(config.project),
            google_account_id=names.sax_account,
            cell_account=names.sax_cell_account,
            http_account=names.sax_http_account,
            generation=base.generation,
            topology=serving.slice.topology,
            machine_type=serving.slice.machine_type,
            slices=serving.slices,
            cell=serving.saxml.cell,
            model_key=serving.saxml.model_key,
            model_path=serving.saxml.model_path,
            checkpoint=serving.saxml.checkpoint,
            weights_bucket=serving.model.weights_bucket,
            publish_deadline_seconds=serving.saxml.publish_deadline_seconds,
            images={
                "admin": versions.sax_admin_image,
                "model": versions.sax_model_image,
                "http": versions.sax_http_image,
                "publish": versions.smoke_test_image,
            },
            exposure=serving.http.type,
            source_ranges=[str(r) for r in serving.http.source_ranges],
            pod_cidr=str(config.network.pod_cidr),
            depends_on=base.controllers.ready("jobset"),
            tpu_pools=[base.tpu_pools],
            identity_pool=[base.cluster.cluster],
        ),
    )
    return Served(outputs={"saxHttpAddress": saxml.address, "modelKey": serving.saxml.model_key})
