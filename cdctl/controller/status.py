"""ComputeDomain status: `status.nodes` and the global Ready/NotReady, written only when they change.

The desired status comes from cdctl.domain.computedomains.desired_status over the clique entries and the
non-fabric daemons (reference section 2.4, without the DaemonSet-count shortcut); under HostManagedIMEX it
is Ready with no nodes, meaning only that the domain was admitted and its workload template exists; under
`channel` isolation it comes from cdctl.controller.channels.status_of (the nodes of its claims, its channels
and, while NotReady, a reason such as IMEXChannelsExhausted). It is
compared with the status last observed in the view and written through the status subresource with an
update guarded by resourceVersion (a conflict retries with the newer object). Called by
cdctl.controller.computedomain.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cdctl.controller.channels import ChannelStatus, status_of
from cdctl.controller.context import ReconcileContext
from cdctl.controller.view import DomainState
from cdctl.domain.computedomains import (
    STATUS_READY,
    ComputeDomainStatusChanged,
    DaemonEntry,
    desired_status,
    same_status,
)
from cdctl.k8s.resources import COMPUTE_DOMAINS

JsonObject = dict[str, Any]


class Status:
    def __init__(self, ctx: ReconcileContext) -> None:
        self.ctx = ctx

    async def write(self, state: DomainState, cd: JsonObject, nodes: Sequence[DaemonEntry]) -> bool:
        """Write the status if it differs from what was last observed; whether a write happened."""
        if state.cd is None:
            return False
        ready = sum(1 for node in nodes if node.status == STATUS_READY)
        return await self._write(state, cd, desired_status(nodes, state.cd.num_nodes), len(nodes), ready)

    async def write_admitted(self, state: DomainState, cd: JsonObject) -> bool:
        """HostManagedIMEX: Ready once admitted with its workload template (`numNodes`, host IMEX ignored)."""
        if state.cd is None:
            return False
        return await self._write(state, cd, {"status": STATUS_READY, "nodes": []}, 0, 0)

    async def write_channels(self, state: DomainState, cd: JsonObject, channels: ChannelStatus) -> bool:
        """`channel` isolation: Ready with a channel in every clique of its claims and their nodes' daemons
        Ready; `status.nodes` the nodes of its claims, `status.channels` its channels, a reason otherwise."""
        if state.cd is None:
            return False
        desired = status_of(channels, state.cd.num_nodes)
        ready = sum(1 for _, _, ok in channels.nodes if ok)
        return await self._write(state, cd, desired, len(channels.nodes), ready)

    async def _write(
        self, state: DomainState, cd: JsonObject, desired: JsonObject, nodes: int, ready: int
    ) -> bool:
        assert state.cd is not None
        if same_status(state.cd.status, desired):
            return False
        written = await self.ctx.actions.replace(
            state.uid, "update-status", COMPUTE_DOMAINS, {**cd, "status": desired}, subresource="status"
        )
        if written is None:
            return False
        await self.ctx.journal.record(
            state.uid, [ComputeDomainStatusChanged(state.uid, desired["status"], nodes, ready)]
        )
        return True
