"""Node labels of a ComputeDomain: on teardown, remove `resource.nvidia.com/computeDomain=<uid>` from nodes.

The kubelet plugin labels a node when it prepares a channel; the controller removes the labels when the
domain goes. The nodes are listed from the API (not the view), as the Go driver does, so a label the watch
has not delivered yet is not missed. Each label goes by a merge patch of that one label, guarded by the
listed resourceVersion (a node changed since answers 409 and the teardown retries), so the controller's role
needs `patch` on Nodes, not `update` of the whole object. Called by cdctl.controller.computedomain (teardown
and orphan sweep).
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
        return changed
