"""Nodes of a ComputeDomain: their labels on teardown, and a warning when one of them stops being Ready.

On teardown the controller removes `resource.nvidia.com/computeDomain=<uid>` from nodes.

The kubelet plugin labels a node when it prepares a channel; the controller removes the labels when the
domain goes. When the view knows of a node labelled for the domain, the nodes are listed from the API, as
the Go driver does, so a label the watch has not delivered yet is not missed; when it knows of none (the
domain's daemons never ran: most domains) the list is skipped, and a label the watch delivers after the
teardown puts that node in the view of a domain that no longer exists, which the orphan teardown clears
the same way. Each label goes by a merge patch of that one label, guarded by the listed resourceVersion (a
node changed since answers 409 and the teardown retries), so the controller's role needs `patch` on Nodes,
not `update` of the whole object. In a mode whose watch does not follow labelled nodes (a domain made
before a switch to `channel` isolation or HostManagedIMEX) the nodes the view knew leave the domain by record.

While the domain runs, a node it lists in `status.nodes` whose Node is not Ready (its kubelet stopped
posting status, so the node lifecycle controller set Ready to Unknown) is reported on the ComputeDomain as a
Warning Event `NodeNotReady` naming the node, why, and the daemon's clique and index there: the workload may
have lost a worker, and the domain cannot reach that node's IMEX. The status says the same (the daemon pod is
marked not ready, so its entry is); the Event tells a user who looks at `kubectl describe`. The recorder
posts one Event per node and cause (repeats are suppressed). Called by cdctl.controller.computedomain
(teardown, orphan sweep and each reconcile of a live domain).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cdctl.controller.actions import typed
from cdctl.controller.context import ReconcileContext
from cdctl.controller.observations import KIND_NODE
from cdctl.controller.view import DomainState
from cdctl.domain.computedomains import LABEL_COMPUTE_DOMAIN, DaemonEntry
from cdctl.k8s.errors import KubeApiError
from cdctl.k8s.resources import NODES


class NodeLabels:
    def __init__(self, ctx: ReconcileContext) -> None:
        self.ctx = ctx

    async def remove(self, state: DomainState) -> int:
        """Remove the domain's label from every node carrying it; how many nodes were changed."""
        uid = state.uid
        if not state.of_kind(KIND_NODE):
            return 0
        try:
            listing = await self.ctx.api.list_objects(
                NODES.collection_path(), label_selector=f"{LABEL_COMPUTE_DOMAIN}={uid}"
            )
        except KubeApiError as exc:
            raise typed(exc, "list labelled nodes") from exc
        changed = 0
        for node in listing.get("items") or []:
            meta = node.get("metadata") or {}
            if (meta.get("labels") or {}).get(LABEL_COMPUTE_DOMAIN) != uid:
                continue
            patch = {
                "metadata": {
                    "resourceVersion": meta.get("resourceVersion"),
                    "labels": {LABEL_COMPUTE_DOMAIN: None},
                }
            }
            await self.ctx.actions.merge_patch(uid, "remove-label", NODES, None, str(meta["name"]), patch)
            changed += 1
        if not self.ctx.settings.per_domain_daemons:  # no watch follows labelled nodes: say they left
            for node in state.of_kind(KIND_NODE):
                await self.ctx.actions.forget(uid, node)
        return changed

    async def report_not_ready(
        self, state: DomainState, cd: dict[str, Any], nodes: Sequence[DaemonEntry]
    ) -> list[str]:
        """Warn on the domain about each node it lists whose Node is not Ready; the nodes warned about."""
        listed = {entry.node_name: entry for entry in nodes}
        warned = []
        for node in state.of_kind(KIND_NODE):
            entry = listed.get(node.name)
            if entry is None or node.summary.get("ready", True) or node.summary.get("deleting"):
                continue
            where = f"clique {entry.clique_id} index {entry.index}" if entry.clique_id else "no clique"
            message = (
                f"node {node.name} is not Ready ({node.summary.get('why') or 'unknown'}): its IMEX daemon "
                f"({where}) cannot be reached and workers there may be lost"
            )
            await self.ctx.actions.warn(state.uid, cd, "NodeNotReady", message)
            warned.append(node.name)
        return warned
