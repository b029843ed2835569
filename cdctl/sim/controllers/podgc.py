"""Stand-in for the pod garbage collector of kube-controller-manager: pods bound to nodes that are gone.

A pod whose `spec.nodeName` names a Node that does not exist is an orphan (its node was deleted: its kubelet
will never report on it again). Like the real collector's gcOrphaned, a node must have been missing for
`quarantine_s` (40 s on a real cluster) on this controller's clock before its pods go; each is then marked
Failed with a `DisruptionTarget` condition (reason DeletionByPodGC) and deleted at once, grace period 0.
That is what lets the Job controller replace a lost worker and the DaemonSet controller forget a lost
daemon (which, as on a real cluster, does not delete pods of a node that no longer exists itself). Run by
cdctl.sim.rack.cluster via a ControllerLoop with a resync; tests call `reconcile()` with their own clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from cdctl.sim.apiserver.errors import ApiError
from cdctl.sim.apiserver.objectmeta import now_rfc3339
from cdctl.sim.apiserver.store import ObjectStore

NODES = ("", "nodes")
PODS = ("", "pods")
DISRUPTION_TARGET = "DisruptionTarget"


def with_disruption_target(status: dict[str, Any], reason: str, message: str) -> dict[str, Any]:
    """The pod status with its DisruptionTarget condition set: what a controller about to delete it writes."""
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != DISRUPTION_TARGET]
    condition = {"type": DISRUPTION_TARGET, "status": "True", "reason": reason, "message": message}
    conditions.append({**condition, "lastTransitionTime": now_rfc3339()})
    return {**status, "conditions": conditions}


class PodGarbageCollector:
    def __init__(
        self, store: ObjectStore, *, quarantine_s: float = 40.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.store = store
        self.quarantine_s = quarantine_s
        self.clock = clock
        self.kinds = (PODS, NODES)
        self._missing_since: dict[str, float] = {}
        self.collected: list[str] = []  # namespace/name of every pod deleted, in order

    def reconcile(self) -> None:
        now = self.clock()
        nodes, _ = self.store.list_objects(self.store.type_of(*NODES), copies=False)  # read only
        existing = {n["metadata"]["name"] for n in nodes}
        pods, _ = self.store.list_objects(self.store.type_of(*PODS), copies=False)
        orphans: dict[str, list[tuple[str, str]]] = {}
        for pod in pods:
            node = str((pod.get("spec") or {}).get("nodeName") or "")
            if node and node not in existing:
                orphans.setdefault(node, []).append((pod["metadata"]["namespace"], pod["metadata"]["name"]))
        self._missing_since = {n: self._missing_since.get(n, now) for n in orphans}
        for node, names in sorted(orphans.items()):
            if now - self._missing_since[node] >= self.quarantine_s:
                for namespace, name in names:
                    self._collect(namespace, name, node)

    def _collect(self, namespace: str, name: str, node: str) -> None:
        pods = self.store.type_of(*PODS)
        try:
            pod = self.store.get(pods, namespace, name)
            status = dict(pod.get("status") or {})
            if status.get("phase") not in ("Succeeded", "Failed"):
                why = f"PodGC: node {node} no longer exists"
                marked = with_disruption_target(status, "DeletionByPodGC", why)
                failed = {**marked, "phase": "Failed"}
                pod = self.store.update(
                    pods, namespace, name, {**pod, "status": failed}, subresource="status"
                )
            self.store.delete(pods, namespace, name)
        except ApiError:  # already gone
            return
        self.collected.append(f"{namespace}/{name}")
