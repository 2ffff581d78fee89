"""The reservation as it is, read before a TPU pool is created: health, free hosts, maintenance.

A pool bound to a sub-block that is DEGRADED or full is created by GKE and never becomes ready
(its VMs stay unprovisioned; tests/standins/gcp_project.py rule sub-block-unhealthy), 15 minutes
into `pulumi up`. So every bound sub-block is read through the provider's invokes,
`gcp.compute.get_reservation_sub_block` (and, for pools bound to the whole block,
`get_reservation_block` for its sub-block names; both in pulumi-gcp 10.2.0,
`gcp:compute/getReservationSubBlock:getReservationSubBlock` and `.../getReservationBlock:...`),
and judged by domain/reservation_health.py:

- the reads wait for the project's APIs (`after`): the Compute API answers 403 SERVICE_DISABLED
  until it is on, so on a bare project the first preview leaves them unknown and `up` reads them
  once the API is enabled, before any pool (each pool's `cluster` input waits for the verdict);
- a new pool is refused by its `before_create` hook, in preview too (`on_dry_run`): a pool the
  stack already runs is never created again, so it is never refused, only warned about (a DEGRADED
  sub-block under a running stack neither destroys nor replaces anything), and its hosts, counted in
  `inUseCount`, never count against the stack on a second `up`;
- the hosts the stack's own pools hold are read too (`gcp.container.get_cluster` once the cluster
  exists: which of its pools run, on which sub-block, with how many nodes), so a pool replaced
  delete-first is judged net of its predecessor's hosts, in preview and at the create, whether it
  is bound to a sub-block or to the whole block (then by its name: GKE picks where its hosts are);
  at the real create a sub-block pool's refusal is judged once more on a fresh read;
- the offline plan answers the same invokes from a snapshot or as not read (plan/engine.py), and
  runs the same hooks (plan/engine.py `RecordingMonitor`): one check, one path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pulumi
import pulumi_gcp as gcp

from domain import reservation_health as rh

T = TypeVar("T")

SUB_BLOCKS_KEY = "tpu-slicing:reservation.subBlocks"
BLOCK_KEY = "tpu-slicing:reservation.block"


class ReservationRefusedError(pulumi.RunError):
    """A new pool the reservation cannot take. A RunError: printed alone, without a traceback."""


@dataclass(frozen=True)
class ReservationCheckArgs:
    project: str  # the reservation's project
    zone: str
    reservation: str
    block: str
    sub_blocks: Sequence[str] | None  # None: the pools bind the whole block, GKE picks sub-blocks
    hosts_per_pool: int
    after: Sequence[pulumi.Resource]  # the project's APIs: no read before its API is on
    no_go: Sequence[rh.Window] = ()
    accepted: Mapping[str, str] = field(default_factory=dict)


class ReservationCheck:
    """Reads the bound sub-blocks once and judges every new pool against the reading."""

    def __init__(self, args: ReservationCheckArgs):
        self.args = args
        self.verdict: rh.Verdict | None = None
        self.readings: list[rh.Reading] | None = None
        self._claimed = 0  # hosts the stack's new pools take from the block, in the order they are created
        # Hosts the stack's own pools hold, by sub-block and by pool name, once the cluster exists
        # (`own_pools`): a pool replaced delete-first gives them back before its successor is created.
        self._own: pulumi.Output[dict[str, int]] | None = None
        self._own_by_pool: pulumi.Output[dict[str, int]] | None = None
        self.checked: pulumi.Output[bool] = self._read().apply(self._judge)

    def _options(self) -> pulumi.InvokeOutputOptions:
        return pulumi.InvokeOutputOptions(depends_on=list(self.args.after))

    def _read_sub_block(self, name: str) -> pulumi.Output[rh.Reading]:
        a = self.args
        found = gcp.compute.get_reservation_sub_block_output(
            name=name,
            reservation=a.reservation,
            reservation_block=a.block,
            zone=a.zone,
            project=a.project,
            opts=self._options(),
        )
        return pulumi.Output.all(
            found.name, found.health_infos, found.sub_block_count, found.in_use_count,
            found.reservation_sub_block_maintenances,
        ).apply(lambda got: rh.from_provider(_as_provider(name, *got[1:])))  # fmt: skip

    def _read(self) -> pulumi.Output[list[rh.Reading]]:
        a = self.args
        if a.sub_blocks:
            return pulumi.Output.all(*[self._read_sub_block(name) for name in a.sub_blocks]).apply(list)
        block = gcp.compute.get_reservation_block_output(
            name=a.block, reservation=a.reservation, zone=a.zone, project=a.project, opts=self._options()
        )

        def each(names: Sequence[str] | None) -> pulumi.Output[list[rh.Reading]]:
            return pulumi.Output.all(*[self._read_sub_block(name) for name in names or []]).apply(list)

        return block.sub_block_names.apply(each)

    def _judge(self, readings: list[rh.Reading]) -> bool:
        a = self.args
        self.readings = readings
        key = SUB_BLOCKS_KEY if a.sub_blocks else BLOCK_KEY
        verdict = rh.judge(key, readings, a.hosts_per_pool, no_go=a.no_go, accepted=a.accepted)
        self.verdict = verdict
        unread = [r.sub_block for r in readings if not r.read]
        if unread or not readings:
            pulumi.log.warn(
                f"reservation {a.reservation} block {a.block} was not read ({', '.join(unread) or 'no sub-blocks'}): "
                "health, free hosts and maintenance are unknown to this plan; give reservation.snapshot to see them"
            )
        for line in verdict.warnings:
            if "was not read" not in line:
                pulumi.log.warn(line)
        return True

    def bound(self) -> pulumi.Output[list[dict[str, Any]]]:
        """Each bound sub-block's health as read and the reason it is accepted anyway, if any: the
        TpuPools component's input, which the policy pack judges (policy/guardrails.py
        `tpu-pools-on-healthy-sub-blocks`). Health only, no host counts: the stack's own pools change
        those, and every `up` would then update the component."""
        accepted = self.args.accepted
        return self.checked.apply(
            lambda _: [
                {"subBlock": r.sub_block, "health": r.health, "accepted": accepted.get(r.sub_block)}
                for r in self.readings or []
            ]
        )

    def own_pools(self, cluster: gcp.container.Cluster, pool_names: Sequence[str]) -> None:
        """Read which of `pool_names` the cluster runs, and the hosts each holds on its sub-block,
        through `gcp.container.get_cluster` once the cluster exists (unknown in the preview of a new
        stack, which runs no pool of its own): the reading's in-use count includes them."""
        found = gcp.container.get_cluster_output(
            name=cluster.name,
            location=cluster.location,
            project=cluster.project,
            opts=pulumi.InvokeOutputOptions(depends_on=[cluster]),
        )
        names = set(pool_names)
        self._own = found.node_pools.apply(lambda pools: _own_hosts(pools or [], names))
        self._own_by_pool = found.node_pools.apply(lambda pools: _hosts_by_pool(pools or [], names))

    def gate(self, value: pulumi.Input[T]) -> pulumi.Output[T]:
        """`value` once the reservation has been read and judged: what a pool's registration waits for."""
        return pulumi.Output.all(value, self.checked).apply(lambda got: got[0])

    def refuse_create(
        self, sub_block: str | None, pool_name: str | None = None
    ) -> Callable[[pulumi.ResourceHookArgs], Awaitable[None]]:
        """The `before_create` hook of the pool `pool_name` bound to `sub_block` (None: to the whole block)."""

        async def hook(_: pulumi.ResourceHookArgs) -> None:
            line = self.refusal(sub_block)
            if line is not None and sub_block is None and pool_name and self._own_by_pool is not None:
                # The stack's own pool of that name runs: this create replaces it, delete first
                # (infra/tpu_pools.py), so its hosts are back in the block before the new pool asks.
                held = (await self._own_by_pool.future() or {}).get(pool_name, 0)
                if held:
                    line = rh.block_refusal(
                        BLOCK_KEY, self.args.block, self.readings or [], max(self._claimed - held, 0)
                    )
            own = (await self._own.future()) if line is not None and self._own is not None else None
            if line is not None and sub_block is not None and own and own.get(sub_block):
                # The stack's own pool there is being replaced (delete first): its hosts are the
                # stack's, not another's; judged net of them, as on a second `up`.
                line = self._judged_net(sub_block, own[sub_block])
            if line is not None and sub_block is not None and not pulumi.runtime.is_dry_run():
                # The reading was taken before this update's steps ran: a pool of the stack replaced
                # delete-first (infra/tpu_pools.py) has given its hosts back since. Judge the sub-block
                # as it is now, just before GKE is asked for the pool.
                fresh = await self._read_sub_block(sub_block).future()
                if fresh is not None:
                    a = self.args
                    now = rh.judge(SUB_BLOCKS_KEY, [fresh], a.hosts_per_pool, no_go=a.no_go, accepted=a.accepted)
                    line = now.refusal(sub_block)
            if line is not None:
                raise ReservationRefusedError(line)

        return hook

    def _judged_net(self, sub_block: str, held: int) -> str | None:
        """The refusal of a new pool on `sub_block` when `held` of its in-use hosts are the stack's own."""
        a = self.args
        readings = [
            dataclasses.replace(r, in_use=max(r.in_use - held, 0)) if r.sub_block == sub_block else r
            for r in self.readings or []
        ]
        return rh.judge(SUB_BLOCKS_KEY, readings, a.hosts_per_pool, no_go=a.no_go, accepted=a.accepted).refusal(
            sub_block
        )

    def refusal(self, sub_block: str | None) -> str | None:
        """Why a new pool on `sub_block` is refused, or None; unread (unknown at preview) refuses nothing.
        A pool on the block claims its hosts: the next new one there is judged net of them."""
        if self.verdict is None or self.readings is None:
            return None
        if sub_block is not None:
            return self.verdict.refusal(sub_block)
        self._claimed += self.args.hosts_per_pool
        return rh.block_refusal(BLOCK_KEY, self.args.block, self.readings, self._claimed)


def _field(item: Any, name: str) -> Any:
    """A field of an invoke's nested result: the SDK's typed class, or a dict in either case."""
    if isinstance(item, Mapping):
        return item.get(name, item.get("".join(w.title() if i else w for i, w in enumerate(name.split("_")))))
    return getattr(item, name, None)


def _own_hosts(pools: Sequence[Any], names: set[str]) -> dict[str, int]:
    """Hosts the stack's pools (by name) hold, by the sub-block their reservation affinity names."""
    held: dict[str, int] = {}
    for pool in pools:
        if _field(pool, "name") not in names:
            continue
        hosts = int(_field(pool, "node_count") or _field(pool, "initial_node_count") or 0)
        for config in _field(pool, "node_configs") or []:
            for affinity in _field(config, "reservation_affinities") or []:
                for value in _field(affinity, "values") or []:
                    if "/reservationSubBlocks/" in str(value):
                        sub = str(value).rsplit("/", 1)[-1]
                        held[sub] = held.get(sub, 0) + hosts
    return held


def _hosts_by_pool(pools: Sequence[Any], names: set[str]) -> dict[str, int]:
    """Hosts each of the stack's pools (by name) holds, wherever it is bound."""
    return {
        str(_field(pool, "name")): int(_field(pool, "node_count") or _field(pool, "initial_node_count") or 0)
        for pool in pools
        if _field(pool, "name") in names
    }


def _as_provider(name: str, infos: Any, count: Any, in_use: Any, maintenances: Any) -> dict[str, Any]:
    """The invoke's typed result back as the provider's camelCase fields (domain.reservation_health
    reads those, and the snapshot answers in them)."""

    def plain(item: Any, *fields: str) -> dict[str, Any]:
        # The SDK hands nested results over as its typed classes or as dicts keyed in snake_case.
        if isinstance(item, Mapping):
            return {f: item.get(f, item.get(_snake(f))) for f in fields}
        return {f: getattr(item, _snake(f), None) for f in fields}

    return {
        "name": name,
        "healthInfos": [plain(i, "healthStatus") for i in infos or []],
        "subBlockCount": count,
        "inUseCount": in_use,
        "reservationSubBlockMaintenances": [
            plain(m, "maintenancePendingCount", "maintenanceOngoingCount") for m in maintenances or []
        ],
    }


def _snake(camel: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)
