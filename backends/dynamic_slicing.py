"""The dynamic-slicing platform (TPU7x cubes): the slice controller, the Kueue queues, the
slicing checks and the serving namespace's NetworkPolicies, which the backends on it build on.

Composition only, like backends/platform.py: the same names, parents and dependencies as when
`__main__.py` registered them itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from backends.foundation import Foundation
from contracts.network_policies import Allowance, NetworkPolicies, NetworkPoliciesArgs
from k8s.kueue_queues import LOCAL_QUEUE, KueueQueues, KueueQueuesArgs
from k8s.slice_controller import SliceController, SliceControllerArgs
from k8s.slicing_checks import SliceCheck, SlicingChecks, SlicingChecksArgs, network_allowances
from settings import rules_recovery


def dynamic_slicing(base: Foundation, allowances: Sequence[Allowance]) -> Foundation:
    """`base` with the platform added; unchanged on the fixed-slice backends, which have none.

    `allowances`: what the backend's pods need admitted in the serving namespace."""
    config = base.config
    if not config.serving.dynamic_slicing:
        return base
    names, serving, versions = config.names, config.serving, config.versions
    provider, controllers, tpu_pools = base.provider, base.controllers, base.tpu_pools
    slice_controller = SliceController(
        "slice-controller",
        SliceControllerArgs(
            provider=provider,
            image=versions.slice_controller_image,
            pod_cidr=str(config.network.pod_cidr),
            kubeconfig=base.cluster.kubeconfig,
            # Also on the TPU pools, for the teardown: workloads, then the slice controller, then
            # the pools, then the cluster (tests/test_teardown.py).
            depends_on=[*controllers.ready(), tpu_pools],
        ),
    )
    vms = config.tpu.cubes * config.tpu.vms_per_cube
    queues = KueueQueues(
        "kueue",
        KueueQueuesArgs(
            provider=provider,
            names=names,
            namespace=serving.namespace,
            topology_levels=config.kueue.topology_levels,
            accelerator_label=base.generation.accelerator_label,
            priorities=config.kueue.priorities.items(),
            tpu_chips=config.tpu.total_chips,
            vcpus=vms * base.machine.vcpus,
            memory_gib=vms * base.machine.memory_gib,
            kueue=controllers.ready("kueue"),
            slice_controller=slice_controller,
            recovery=rules_recovery.kueue_manager_config(config.kueue.recovery),
        ),
    )
    checks = [
        SliceCheck(name, cfg.topology, replicas, names.priority_class(level))
        for name, cfg, replicas, level in (
            ("subslicing-check", config.checks.subslicing, config.checks.subslicing.replicas, "low"),
            ("superslicing-check", config.checks.superslicing, 1, "medium"),
        )
        if cfg.enabled
    ]
    # Ingress is denied in the serving namespace except for what serving and the checks need.
    serving_policies = NetworkPolicies(
        "serving-network-policies",
        NetworkPoliciesArgs(
            provider=provider,
            namespace=serving.namespace,
            allowances=[*network_allowances(checks), *allowances],
            depends_on=[queues.namespace],
        ),
    )
    if checks:
        SlicingChecks(
            "slicing-checks",
            SlicingChecksArgs(
                provider=provider,
                namespace=serving.namespace,
                local_queue=LOCAL_QUEUE,
                generation=base.generation,
                image=versions.jax_tpu_image,
                checks=checks,
                # TPU consumers wait for the pools, so a destroy removes them first.
                depends_on=[tpu_pools, slice_controller, *controllers.ready("jobset"), queues, serving_policies],
            ),
        )
    return replace(base, slice_controller=slice_controller, queues=queues, serving_policies=serving_policies)
