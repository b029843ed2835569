"""Reconcile one ComputeDomain, level-based: from the view (what the log says) to the cluster.

Live domain: finalizer, then (driver-managed mode) the daemon template and DaemonSet, then the workload
template, then cliques and status, and a warning for each of its nodes that is not Ready. While the workload
template's name is held by an object that is not the domain's, the status is NotReady with that reason (a
`Ready=False` condition) in either mode, whatever the daemons say. Deleting domain, in
the reference's order, each step idempotent: delete the workload template; delete the daemon templates and
DaemonSets in every namespace; remove the node labels; remove the workload template's finalizer and wait until
it is gone; remove the daemon templates' and DaemonSets' finalizers and wait until they are gone; delete the
cliques; remove the domain's finalizer (writes with no read of the view between them are pipelined:
cdctl.controller.actions). A domain that no longer exists but left objects behind (an orphan, found by the
sweep) gets the same teardown without the last step. Under HostManagedIMEX the host's nvidia-imex owns the
IMEX domain: a live domain gets its finalizer, the workload template and `status.status=Ready` (admitted,
nothing more); teardown deletes the workload template, removes its finalizer, waits until it is gone and
removes the domain's finalizer (no DaemonSets, daemon templates, node labels or cliques exist to touch; the
metrics read the view, so a domain that left it is forgotten). Under `channel` isolation (shared IMEX
domains, cdctl.controller.channels) a live domain gets its finalizer, the workload template, a channel in each
clique of its allocated claims and its status; teardown is HostManagedIMEX's plus the release of its channels
where none of its claims is allocated any more (a domain gone keeps the others until its claims go, as an
orphan the sweep and its claims' changes bring back). Teardown follows what the view says the domain owns,
not only the mode: a domain made with per-domain daemons before a switch to HostManagedIMEX or `channel`
isolation (the view rebuilt from the log knows its DaemonSet, daemon template and labelled nodes, which no
watch follows any more) gets the per-domain steps, and a DaemonSet or node that left unseen is recorded as
gone; a domain that holds channels, made under `channel` isolation, releases them under any mode (outside it
all of them: its claims are not watched there). Called by the work queue of
cdctl.controller.manager with the domain's uid.
"""

from __future__ import annotations

from typing import Any

import structlog

from cdctl.api.verbosity import V_DECISION
from cdctl.controller.actions import WRITES
from cdctl.controller.channels import REASON_EXHAUSTED, Channels
from cdctl.controller.clique import Cliques
from cdctl.controller.context import ReconcileContext
from cdctl.controller.daemonset import DaemonSets
from cdctl.controller.nodes import NodeLabels
from cdctl.controller.observations import KIND_NODE
from cdctl.controller.resourceclaimtemplate import CONFLICT_REASON, ClaimTemplateConflict, ClaimTemplates
from cdctl.controller.status import Status
from cdctl.controller.view import DomainState
from cdctl.domain.computedomains import (
    FINALIZER,
    TARGET_WORKLOAD,
    ComputeDomainObserved,
    ComputeDomainTornDown,
)
from cdctl.domain.errors import RetriableError
from cdctl.k8s.resources import COMPUTE_DOMAINS

log = structlog.get_logger(__name__)
JsonObject = dict[str, Any]
STILL_EXISTS_RETRY_S = 1.0
EXHAUSTED_RETRY_S = 10.0


class StillExists(RetriableError):
    """Teardown waits for objects whose deletion was requested to disappear."""


class ChannelsExhausted(RetriableError):
    """`channel` isolation: every channel of a clique of the domain's claims is held; the domain waits."""


class ComputeDomainReconciler:
    def __init__(self, ctx: ReconcileContext) -> None:
        self.ctx = ctx
        self.templates = ClaimTemplates(ctx)
        self.daemon_sets = DaemonSets(ctx, self.templates)
        self.cliques = Cliques(ctx)
        self.node_labels = NodeLabels(ctx)
        self.status = Status(ctx)
        self.channels = Channels(ctx, self.cliques)

    async def reconcile(self, uid: str) -> None:
        state = self.ctx.view.domain(uid)
        cd_summary = state.cd
        writes: list[str] = []
        token = WRITES.set(writes)
        with structlog.contextvars.bound_contextvars(
            namespace=cd_summary.namespace if cd_summary else None,
            name=cd_summary.name if cd_summary else None,
            uid=uid,
        ):
            try:
                await self._reconcile(uid, state, cd_summary)
            finally:
                WRITES.reset(token)
                if writes:
                    log.info("ComputeDomain reconciled", writes=writes)
                else:
                    log.info("ComputeDomain reconciled: nothing to change", v=V_DECISION)

    async def _reconcile(
        self, uid: str, state: DomainState, cd_summary: ComputeDomainObserved | None
    ) -> None:
        if cd_summary is None:
            if not state.empty or self.channels.holds(uid):
                log.info("tearing down the objects of a ComputeDomain that no longer exists")
                await self.teardown(state, None)
            return
        cd = self.ctx.journal.cached(COMPUTE_DOMAINS, cd_summary.namespace, cd_summary.name)
        if cd is None or cd.get("metadata", {}).get("uid") != uid:
            raise RetriableError("ComputeDomain not in the object cache yet", delay=0.5)
        if cd_summary.deleting:
            if FINALIZER in cd_summary.finalizers:
                await self.teardown(state, cd)
            return
        await self.apply(state, cd)

    async def apply(self, state: DomainState, cd: JsonObject) -> None:
        if FINALIZER not in (state.cd.finalizers if state.cd else []):
            await self.ctx.actions.set_finalizer(
                state.uid,
                COMPUTE_DOMAINS,
                cd["metadata"]["namespace"],
                cd["metadata"]["name"],
                FINALIZER,
                True,
            )
            cd = self._fresh(state, cd)
        if self.ctx.settings.channel_isolation:
            await self._apply_channel(state, cd)
            return
        if not self.ctx.settings.driver_managed_daemons:
            try:
                await self.templates.ensure_workload(state, cd)
            except ClaimTemplateConflict as exc:
                await self.status.write_admitted(state, self._fresh(state, cd), (CONFLICT_REASON, str(exc)))
                raise
            await self.status.write_admitted(state, self._fresh(state, cd))
            return
        await self.daemon_sets.ensure(state, cd)
        conflict: ClaimTemplateConflict | None = None
        try:
            await self.templates.ensure_workload(state, cd)
        except ClaimTemplateConflict as exc:  # the user's to fix; cliques still follow the daemons
            conflict = exc
        nodes = await self.cliques.sync(state, cd)
        blocked = (CONFLICT_REASON, str(conflict)) if conflict is not None else None
        await self.status.write(state, self._fresh(state, cd), nodes, blocked)
        await self.node_labels.report_not_ready(state, self._fresh(state, cd), nodes)
        if conflict is not None:
            raise conflict

    async def _apply_channel(self, state: DomainState, cd: JsonObject) -> None:
        """`channel` isolation: the workload template, a channel in each clique of its claims, status."""
        conflict: ClaimTemplateConflict | None = None
        try:
            await self.templates.ensure_workload(state, cd)
        except ClaimTemplateConflict as exc:
            conflict = exc
        channels = await self.channels.sync(state, cd)
        blocked = (CONFLICT_REASON, str(conflict)) if conflict is not None else None
        await self.status.write_channels(state, self._fresh(state, cd), channels, blocked)
        if conflict is not None:
            raise conflict
        if channels.reason == REASON_EXHAUSTED:  # a release wakes it at once; this covers one not seen here
            raise ChannelsExhausted(channels.message, delay=EXHAUSTED_RETRY_S)

    def _fresh(self, state: DomainState, cd: JsonObject) -> JsonObject:
        meta = cd["metadata"]
        cached = self.ctx.journal.cached(COMPUTE_DOMAINS, meta["namespace"], meta["name"])
        return cached if cached is not None and cached["metadata"].get("uid") == state.uid else cd

    async def teardown(self, state: DomainState, cd: JsonObject | None) -> None:
        """The reference's delete flow; the view is read again after each step that wrote. It follows what
        the domain owns, not only the current mode: a domain made with per-domain daemons before a switch to
        `channel` isolation or HostManagedIMEX still has its DaemonSet, daemon template and node labels
        removed, and one that holds channels has them released under any mode."""
        if not self.ctx.settings.per_domain_daemons and not self._owns_daemon_objects(state):
            await self._teardown_shared(state, cd)
            return
        uid = state.uid
        async with self.ctx.actions.pipelined():
            await self.templates.delete(state, TARGET_WORKLOAD)
            await self.daemon_sets.delete(state)
        await self.node_labels.remove(state)
        state = self.ctx.view.domain(uid)
        await self.templates.remove_finalizers(state, TARGET_WORKLOAD)
        state = self.ctx.view.domain(uid)
        self._assert_gone(self.templates.remaining(state, TARGET_WORKLOAD), "workload ResourceClaimTemplate")
        async with self.ctx.actions.pipelined():
            await self.daemon_sets.remove_finalizers(state)
        state = self.ctx.view.domain(uid)
        if not self.ctx.settings.per_domain_daemons:  # made before a switch: no watch sees them go
            await self.daemon_sets.forget_gone(state)
            state = self.ctx.view.domain(uid)
        self._assert_gone(self.daemon_sets.remaining(state), "daemon objects")
        if self._releases_channels(uid):  # the channels' clique objects go with their release
            await self.channels.release_gone(state)
            await self._release(state, cd)
            return
        async with self.ctx.actions.pipelined():
            await self.cliques.delete_all(state)
            await self._release(state, cd)

    async def _teardown_shared(self, state: DomainState, cd: JsonObject | None) -> None:
        """HostManagedIMEX or `channel` isolation: only the workload template was made, so only it is
        deleted and waited for; the domain's channels are released in the cliques where none of its claims
        is allocated any more (the others when those claims go: the domain does not wait)."""
        uid = state.uid
        await self.templates.delete(state, TARGET_WORKLOAD)
        state = self.ctx.view.domain(uid)
        await self.templates.remove_finalizers(state, TARGET_WORKLOAD)
        state = self.ctx.view.domain(uid)
        self._assert_gone(self.templates.remaining(state, TARGET_WORKLOAD), "workload ResourceClaimTemplate")
        if self._releases_channels(uid):
            await self.channels.release_gone(state)
        await self._release(state, cd)

    def _owns_daemon_objects(self, state: DomainState) -> bool:
        """Whether the domain has a DaemonSet, a daemon template or a labelled node (made before the mode
        changed to one without per-domain daemons: the view rebuilt from the log still knows them)."""
        return bool(self.daemon_sets.remaining(state) or state.of_kind(KIND_NODE))

    def _releases_channels(self, uid: str) -> bool:
        """Under `channel` isolation, or for a domain that got channels before a switch away from it."""
        return self.ctx.settings.channel_isolation or self.channels.holds(uid)

    async def _release(self, state: DomainState, cd: JsonObject | None) -> None:
        """Last teardown step of a domain that still exists: remove its finalizer, record the teardown."""
        if cd is None:
            return
        meta = cd["metadata"]
        await self.ctx.actions.set_finalizer(
            state.uid, COMPUTE_DOMAINS, meta["namespace"], meta["name"], FINALIZER, False
        )
        await self.ctx.actions.record(
            state.uid, [ComputeDomainTornDown(state.uid, meta["namespace"], meta["name"])]
        )
        log.info("ComputeDomain torn down")

    @staticmethod
    def _assert_gone(remaining: list[str], what: str) -> None:
        if remaining:
            raise StillExists(f"{what} still exists: {', '.join(remaining)}", delay=STILL_EXISTS_RETRY_S)
