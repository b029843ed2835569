"""Node labels of a ComputeDomain: on teardown, remove `resource.nvidia.com/computeDomain=<uid>` from nodes.

The kubelet plugin labels a node when it prepares a channel; the controller removes the labels when the
domain goes. The nodes are listed from the API (not the view), as the Go driver does, so a label the watch
has not delivered yet is not missed. Called by cdctl.controller.computedomain (teardown and orphan sweep).
"""

from __future__ import annotations

from cdctl.controller.actions import typed
from cdctl.controller.context import ReconcileContext
from cdctl.domain.computedomains import LABEL_COMPUTE_DOMAIN
from cdctl.k8s.errors import KubeApiError
from cdctl.k8s.resources import NODES


class NodeLabels:
    def __init__(self, ctx: ReconcileContext) -> None:
        self.ctx = ctx

    async def remove(self, uid: str) -> int:
        """Remove the domain's label from every node carrying it; how many nodes were changed."""
        try:
            listing = await self.ctx.api.list_objects(
                NODES.collection_path(), label_selector=f"{LABEL_COMPUTE_DOMAIN}={uid}"
            )
        except KubeApiError as exc:
            raise typed(exc, "list labelled nodes") from exc
        changed = 0
        for node in listing.get("items") or []:
            labels = dict(node.get("metadata", {}).get("labels") or {})
            if labels.get(LABEL_COMPUTE_DOMAIN) != uid:
                continue
            del labels[LABEL_COMPUTE_DOMAIN]
            node.setdefault("apiVersion", "v1")
            node.setdefault("kind", "Node")
            node["metadata"]["labels"] = labels
            await self.ctx.actions.replace(uid, "remove-label", NODES, node)
            changed += 1
        return changed
