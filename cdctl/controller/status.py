"""ComputeDomain status: `status.nodes` and the global Ready/NotReady, written only when they change.

The desired status comes from cdctl.domain.computedomains.desired_status over the clique entries and the
non-fabric daemons (reference section 2.4, without the DaemonSet-count shortcut); under HostManagedIMEX it
is Ready with no nodes, meaning only that the domain was admitted and its workload template exists; under
`channel` isolation it comes from cdctl.controller.channels.status_of (the nodes of its claims and its
channels; NotReady with a reason while it waits for a channel or a node's clique). While
the controller cannot do what the domain needs (`Blocked`: its workload template's name is taken), the status
is NotReady with a `Ready=False` condition giving the reason, whatever the daemons say. It is compared
with the status last observed in the view and written through the status subresource with an update guarded
by resourceVersion (a conflict retries with the newer object). A write that turns the domain Ready reports
how long it took (from its creation, or from when this controller last turned it NotReady) to `ctx.formed`.
Called by cdctl.controller.computedomain.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from cdctl.controller.channels import ChannelStatus, status_of
from cdctl.controller.context import ReconcileContext
from cdctl.controller.view import DomainState
from cdctl.domain.computedomains import (
    STATUS_NOT_READY,
    STATUS_READY,
    Blocked,
    ComputeDomainStatusChanged,
    DaemonEntry,
    blocked_since,
    desired_status,
    same_status,
)
from cdctl.k8s.resources import COMPUTE_DOMAINS

JsonObject = dict[str, Any]


class Status:
    def __init__(self, ctx: ReconcileContext) -> None:
        self.ctx = ctx
        self._not_ready_since: dict[str, float] = {}  # uid -> when this controller wrote Ready -> NotReady

    async def write(
        self,
        state: DomainState,
        cd: JsonObject,
        nodes: Sequence[DaemonEntry],
        blocked: tuple[str, str] | None = None,
    ) -> bool:
        """Write the status if it differs from what was last observed; whether a write happened.

        `blocked` (reason, message) makes it NotReady with that reason, whatever `nodes` say."""
        if state.cd is None:
            return False
        desired = desired_status(nodes, state.cd.num_nodes, self._blocked(state, blocked))
        return await self._write(state, cd, desired, nodes)

    async def write_admitted(
        self, state: DomainState, cd: JsonObject, blocked: tuple[str, str] | None = None
    ) -> bool:
        """HostManagedIMEX: Ready once admitted with its workload template (`numNodes`, host IMEX ignored);
        NotReady with the reason while `blocked`."""
        if state.cd is None:
            return False
        desired: JsonObject = {"status": STATUS_READY, "nodes": []}
        why = self._blocked(state, blocked)
        if why is not None:
            desired = {"status": STATUS_NOT_READY, "nodes": [], "conditions": [why.condition()]}
        return await self._write(state, cd, desired, ())

    async def write_channels(
        self,
        state: DomainState,
        cd: JsonObject,
        channels: ChannelStatus,
        blocked: tuple[str, str] | None = None,
    ) -> bool:
        """`channel` isolation: Ready with a channel in every clique of its claims and their nodes' daemons
        Ready; `status.nodes` the nodes of its claims, `status.channels` its channels. NotReady with the
        reason while it waits for a channel or a node's clique, or while `blocked`."""
        if state.cd is None:
            return False
        why = channels.blocked() or blocked
        desired = status_of(channels, state.cd.num_nodes, self._blocked(state, why))
        return await self._write(state, cd, desired, channels.entries())

    def _measure(self, state: DomainState, cd: JsonObject, written: str) -> None:
        """On a turn to Ready, report how long the domain took: from its creation, or from when this
        controller last saw it turn NotReady."""
        assert state.cd is not None
        was_ready = state.cd.status.get("status") == STATUS_READY
        if written != STATUS_READY:
            if was_ready:
                self._not_ready_since[state.uid] = time.time()
            return
        if was_ready:
            return
        since = self._not_ready_since.pop(state.uid, None)
        if since is None:
            created = str(cd.get("metadata", {}).get("creationTimestamp") or "")
            try:
                since = datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
            except ValueError:
                return
        self.ctx.formed(max(0.0, time.time() - since))

    @staticmethod
    def _blocked(state: DomainState, blocked: tuple[str, str] | None) -> Blocked | None:
        if blocked is None or state.cd is None:
            return None
        reason, message = blocked
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return Blocked(reason, message, blocked_since(state.cd.status, reason, now))

    async def _write(
        self, state: DomainState, cd: JsonObject, desired: JsonObject, nodes: Sequence[DaemonEntry]
    ) -> bool:
        assert state.cd is not None
        if same_status(state.cd.status, desired):
            return False
        written = await self.ctx.actions.replace(
            state.uid, "update-status", COMPUTE_DOMAINS, {**cd, "status": desired}, subresource="status"
        )
        if written is None:
            return False
        self._measure(state, cd, desired["status"])
        ready = sum(1 for node in nodes if node.status == STATUS_READY)
        await self.ctx.journal.record(
            state.uid, [ComputeDomainStatusChanged(state.uid, desired["status"], len(nodes), ready)]
        )
        return True
