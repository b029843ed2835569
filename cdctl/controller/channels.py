"""The channel allocator's controller side under `channel` isolation (docs/channel-isolation.md).

For a live ComputeDomain, `sync` finds the cliques of the nodes its allocated workload claims are on (the
claims carry the domain's label from the workload template; a node's clique is its `nvidia.com/gpu.clique`
label), gives the domain a channel in each (cdctl.domain.channels: least-recently-released order, never 0),
records `ImexChannelAssigned` in stream `channels/<clique>` and only then publishes the number on the
(domain, clique) ComputeDomainClique object (`imexChannel`), where plugins read it: no plugin can use a number
the log does not hold. A number published by an earlier leader and recorded here as an observation is held
as it is (recorded as an assignment `observed`), never handed out again. When every channel of a clique is
held the domain waits: `ImexChannelsExhausted` once per wait, a Warning Event `IMEXChannelsExhausted` on the
domain, a NotReady status with that reason, `cdctl_imex_channels_free{clique}`; a release wakes it.
`release_gone` frees the channels of a domain that is gone (or deleting) in each clique where none of its
claims is allocated any more: the clique object is deleted, then `ImexChannelReleased` recorded.

Claims count only in the domain's own namespace: a claim elsewhere wearing the domain's label (anyone can set
a label) neither gets the domain a channel nor keeps one from release. Decisions on one clique are serialized
(one lock per clique), so two domains reconciled side by side never pick the same number. Called by
cdctl.controller.computedomain; the metric by cdctl.controller.metrics.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import structlog

from cdctl.api.isolation import CLIQUE_NODE_LABEL, channel_stream
from cdctl.api.shareddaemon import COMPONENT_LABEL, SHARED_DAEMON_COMPONENT
from cdctl.controller.channelview import ChannelBook
from cdctl.controller.clique import Cliques
from cdctl.controller.context import ReconcileContext
from cdctl.controller.observations import KIND_CLAIM, KIND_CLIQUE, pod_is_ready
from cdctl.controller.view import DomainState
from cdctl.domain.channels import (
    SOURCE_OBSERVED,
    SOURCE_PICKED,
    ImexChannelAssigned,
    ImexChannelReleased,
    ImexChannelsExhausted,
    format_channels,
    published_channel,
)
from cdctl.domain.computedomains import STATUS_NOT_READY, STATUS_READY, Blocked, DaemonEntry, global_status
from cdctl.k8s.resources import COMPUTE_DOMAIN_CLIQUES, NODES, PODS

log = structlog.get_logger(__name__)
JsonObject = dict[str, Any]

REASON_EXHAUSTED = "IMEXChannelsExhausted"
REASON_NO_CLIQUE = "NodeWithoutClique"


@dataclass
class ChannelStatus:
    """What the status of a domain under `channel` isolation is made of."""

    nodes: list[tuple[str, str, bool]] = field(default_factory=list)  # (node, clique, ready)
    channels: dict[str, int] = field(default_factory=dict)  # clique -> channel, published
    reason: str = ""  # what keeps it waiting (no free channel, a node of unknown clique); "" when nothing
    message: str = ""

    def blocked(self) -> tuple[str, str] | None:
        return (self.reason, self.message) if self.reason else None

    def entries(self) -> list[DaemonEntry]:
        """The nodes as status entries (no daemon index: the node's shared IMEX daemon serves them all)."""
        return [
            DaemonEntry(node, "", clique, 0, STATUS_READY if ready else STATUS_NOT_READY)
            for node, clique, ready in sorted(self.nodes)
        ]


class Channels:
    def __init__(self, ctx: ReconcileContext, cliques: Cliques) -> None:
        self.ctx = ctx
        self.cliques = cliques
        self.book: ChannelBook = ctx.journal.channels
        self._locks: dict[str, asyncio.Lock] = {}
        self.waiting: dict[str, set[str]] = {}  # clique -> domains waiting for a free channel there
        self.wake: Callable[[str], None] = lambda uid: None  # set by the manager: enqueue a domain

    # ---- what the cluster says ---------------------------------------------------------------------------
    def node_clique(self, node: str) -> str:
        obj = self.ctx.journal.cached(NODES, None, node)
        labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
        return str(labels.get(CLIQUE_NODE_LABEL) or "")

    def claim_nodes(self, state: DomainState, namespace: str | None) -> list[tuple[str, str]]:
        """(node, claim ns/name) of every allocated claim of the domain in `namespace` (any, if None)."""
        found = []
        for claim in state.of_kind(KIND_CLAIM):
            node = str(claim.summary.get("node") or "")
            if node and (namespace is None or claim.namespace == namespace):
                found.append((node, f"{claim.namespace}/{claim.name}"))
        return found

    def daemon_ready(self, node: str) -> bool:
        """Host-managed: the host's IMEX is the operator's. Driver-managed: the node's shared daemon pod."""
        if not self.ctx.settings.driver_managed_daemons:
            return True
        for pod in self.ctx.journal.cached_of(PODS):
            meta = pod.get("metadata") or {}
            if (meta.get("labels") or {}).get(COMPONENT_LABEL) != SHARED_DAEMON_COMPONENT:
                continue
            if (pod.get("spec") or {}).get("nodeName") == node and not meta.get("deletionTimestamp"):
                return pod_is_ready(pod)
        return False

    def domains_on(self, node: str) -> list[str]:
        """The domains with a claim allocated on `node` (a change of the node concerns them)."""
        return [
            state.uid
            for state in self.ctx.view
            if any(o.kind == KIND_CLAIM and o.summary.get("node") == node for o in state.objects.values())
        ]

    def published(self, state: DomainState) -> dict[str, int]:
        """clique -> channel published on the domain's clique objects (what plugins see)."""
        seen = {}
        for obj in state.of_kind(KIND_CLIQUE):
            channel = published_channel(obj.summary)
            if channel is not None and not obj.summary.get("deleting"):
                seen[str(obj.summary.get("clique", ""))] = channel
        return seen

    # ---- a live domain -----------------------------------------------------------------------------------
    async def sync(self, state: DomainState, cd: JsonObject) -> ChannelStatus:
        """A channel in every clique of the domain's allocated claims, published; the status it makes."""
        meta = cd["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        status = ChannelStatus()
        by_clique: dict[str, list[tuple[str, str]]] = {}
        for node, claim in self.claim_nodes(state, namespace):
            clique = self.node_clique(node)
            if not clique:
                if (node, "", False) not in status.nodes:
                    status.nodes.append((node, "", False))
                status.reason = REASON_NO_CLIQUE
                status.message = f"node {node} of claim {claim} has no {CLIQUE_NODE_LABEL} label"
                continue
            by_clique.setdefault(clique, []).append((node, claim))
        published = self.published(state)
        for clique, members in sorted(by_clique.items()):
            channel = await self._ensure(state.uid, namespace, name, clique, members[0], cd)
            if channel is None:
                status.reason = REASON_EXHAUSTED
                status.message = self._exhausted_message(clique)
            elif published.get(clique) != channel:
                await self.cliques.put(
                    state.uid, self.ctx.settings.namespace, clique, {"imexChannel": channel}
                )
                published[clique] = channel
            if channel is not None:
                status.channels[clique] = channel
            for node in sorted({n for n, _ in members}):
                ready = channel is not None and self.daemon_ready(node)
                status.nodes.append((node, clique, ready))
        return status

    def _lock(self, clique: str) -> asyncio.Lock:
        return self._locks.setdefault(clique, asyncio.Lock())

    async def _ensure(
        self, uid: str, namespace: str, name: str, clique: str, first: tuple[str, str], cd: JsonObject
    ) -> int | None:
        """The domain's channel in `clique`, assigned (and recorded) now if it has none; None: none free."""
        async with self._lock(clique):
            book = self.book.clique(clique)
            holding = book.held.get(uid)
            if holding is not None:
                if not holding.recorded:  # published by an earlier leader: hold it as it is, on the record
                    await self._record_assigned(
                        uid, namespace, name, clique, holding.channel, SOURCE_OBSERVED
                    )
                return holding.channel
            count = self.ctx.settings.imex_channel_count
            channel = book.pick(count)
            if channel is None:
                waiting = self.waiting.setdefault(clique, set())
                if uid not in waiting:
                    waiting.add(uid)
                    event = ImexChannelsExhausted(clique, uid, namespace, name, count)
                    await self.ctx.journal.record_in(channel_stream(clique), [event])
                    log.warning("IMEX channels exhausted: the domain waits", clique=clique, limit=count)
                    await self.ctx.actions.warn(uid, cd, REASON_EXHAUSTED, self._exhausted_message(clique))
                return None
            node, claim = first
            await self._record_assigned(uid, namespace, name, clique, channel, SOURCE_PICKED, node, claim)
            self.waiting.get(clique, set()).discard(uid)
            log.info("IMEX channel assigned", clique=clique, channel=channel, node=node, claim=claim)
            return channel

    async def _record_assigned(
        self,
        uid: str,
        namespace: str,
        name: str,
        clique: str,
        channel: int,
        source: str,
        node: str = "",
        claim: str = "",
    ) -> None:
        event = ImexChannelAssigned(clique, channel, uid, namespace, name, node, claim, source)
        await self.ctx.journal.record_in(channel_stream(clique), [event])

    def _exhausted_message(self, clique: str) -> str:
        count = self.ctx.settings.imex_channel_count
        return (
            f"no free IMEX channel in clique {clique}: all {count - 1} channels of --imex-channel-count "
            f"{count} (channel 0 is never used) are held by other ComputeDomains; waiting for a release"
        )

    # ---- a domain that is gone ---------------------------------------------------------------------------
    def holds(self, uid: str) -> bool:
        return bool(self.book.of_domain(uid))

    async def release_gone(self, state: DomainState) -> None:
        """Free the domain's channels in the cliques where none of its claims is allocated any more, and
        delete its clique objects there (the object first: a number is never free while still published)."""
        uid = state.uid
        namespace = state.cd.namespace if state.cd is not None else None
        held = self.book.of_domain(uid)
        busy: set[str] = set()
        # Outside `channel` isolation (a domain made before the switch) nothing hands channels out and the
        # claims are not watched, so what the view holds of them is stale: every channel goes with the domain.
        claims = (
            self.claim_nodes(state, namespace or self._namespace_of(uid))
            if self.ctx.settings.channel_isolation
            else []
        )
        for node, _ in claims:
            clique = self.node_clique(node)
            if not clique:  # a claim on a node of unknown clique may be in any: release nothing yet
                return
            busy.add(clique)
        for obj in state.of_kind(KIND_CLIQUE):
            clique = str(obj.summary.get("clique", ""))
            if clique not in busy:
                await self.ctx.actions.delete(uid, COMPUTE_DOMAIN_CLIQUES, obj.namespace, obj.name)
        for clique, channel in sorted(held.items()):
            if clique in busy:
                continue
            async with self._lock(clique):
                holding = self.book.clique(clique).held.get(uid)
                if holding is None or holding.channel != channel:
                    continue
                event = ImexChannelReleased(
                    clique, channel, uid, holding.namespace, holding.name, "domain gone, no claim allocated"
                )
                await self.ctx.journal.record_in(channel_stream(clique), [event])
            log.info("IMEX channel released", clique=clique, channel=channel, domain=uid)
            for waiter in sorted(self.waiting.pop(clique, set())):
                self.wake(waiter)

    def _namespace_of(self, uid: str) -> str | None:
        for state in self.book.cliques():
            holding = state.held.get(uid)
            if holding is not None and holding.namespace:
                return holding.namespace
        return None

    def free_per_clique(self) -> Iterable[tuple[str, int]]:
        count = self.ctx.settings.imex_channel_count
        return [(state.clique_id, state.free(count)) for state in self.book.cliques()]


def status_of(channel_status: ChannelStatus, num_nodes: int, blocked: Blocked | None) -> JsonObject:
    """The `status` object of a domain under `channel` isolation: NotReady with a `Ready=False` condition
    while `blocked`, else Ready once every node of its claims is (its channel published, its daemon Ready)."""
    entries = channel_status.entries()
    nodes = [{k: v for k, v in e.to_status_json().items() if k != "index"} for e in entries]
    ready = blocked is None and global_status(entries, num_nodes) == STATUS_READY
    desired: JsonObject = {"status": STATUS_READY if ready else STATUS_NOT_READY, "nodes": nodes}
    desired["channels"] = format_channels(channel_status.channels)
    if blocked is not None:
        desired["conditions"] = [blocked.condition()]
    return desired
