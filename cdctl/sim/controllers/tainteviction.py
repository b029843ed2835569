"""Stand-in for kube-controller-manager's taint-eviction controller: pods leave a node tainted NoExecute.

For every pod bound to a node with NoExecute taints (the node lifecycle controller's
`node.kubernetes.io/unreachable`, or any other), `eviction_delay` decides as the real controller's
`getMinTolerationTime` does: a taint the pod does not tolerate evicts it at once; otherwise it is evicted once
the smallest `tolerationSeconds` among the tolerations that match has passed since the taint appeared (a
matching toleration without `tolerationSeconds` tolerates it for ever). Every pod gets 300 s for the
unreachable and not-ready taints unless it says otherwise (the DefaultTolerationSeconds admission plugin,
cdctl.sim.apiserver.admission); DaemonSet pods tolerate both for ever (cdctl.sim.controllers.daemonsets). An
eviction, as the real controller's `addConditionAndDeletePod`, adds the pod condition DisruptionTarget (reason
DeletionByTaintManager) and deletes the pod with its own grace period: on an unreachable node it then stays
Terminating until its kubelet is back (cdctl.sim.apiserver.deletion). When a taint appeared is noted on this
controller's own clock when it first sees it (never comparing timestamps across machines), and forgotten once
the taint is gone, so a taint removed before the deadline evicts nobody. Run by cdctl.sim.rack.cluster via a
ControllerLoop with a resync; tests call `reconcile()` with their own clock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from cdctl.sim.apiserver.errors import ApiError
from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.controllers.claimtemplates import pod_is_finished
from cdctl.sim.controllers.nodematch import tolerates
from cdctl.sim.controllers.podgc import with_disruption_target

log = logging.getLogger(__name__)
NODES = ("", "nodes")
PODS = ("", "pods")
NO_EXECUTE = "NoExecute"


def eviction_delay(tolerations: Iterable[dict[str, Any]], taints: Iterable[dict[str, Any]]) -> float | None:
    """Seconds after the NoExecute taints appeared that the pod is evicted; None: never (all tolerated for
    ever, or no NoExecute taint)."""
    tolerations = list(tolerations)
    delay: float | None = None
    for taint in taints:
        if taint.get("effect") != NO_EXECUTE:
            continue
        matching = [t for t in tolerations if tolerates(t, taint)]
        if not matching:
            return 0.0
        for toleration in matching:
            seconds = toleration.get("tolerationSeconds")
            if seconds is not None:
                bound = max(0.0, float(seconds))
                delay = bound if delay is None else min(delay, bound)
    return delay


class TaintEvictionController:
    def __init__(self, store: ObjectStore, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.clock = clock
        self.kinds = (NODES, PODS)
        self._seen: dict[tuple[str, str, str], float] = {}  # (node, taint key, value) -> first seen
        self.evicted: list[str] = []  # namespace/name, in order

    def reconcile(self) -> None:
        now = self.clock()
        nodes, _ = self.store.list_objects(self.store.type_of(*NODES), copies=False)  # read only
        seen: dict[tuple[str, str, str], float] = {}
        for node in nodes:
            name = node["metadata"]["name"]
            taints = [
                t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") == NO_EXECUTE
            ]
            if not taints:
                continue
            since = now
            for taint in taints:
                key = (name, str(taint.get("key", "")), str(taint.get("value", "")))
                seen[key] = self._seen.get(key, now)
                since = min(since, seen[key])
            for pod in list(self.store.pods_on_node(name)):
                self._consider(pod, taints, now - since)
        self._seen = seen

    def _consider(self, pod: dict[str, Any], taints: list[dict[str, Any]], tainted_for: float) -> None:
        meta = pod["metadata"]
        if meta.get("deletionTimestamp") or pod_is_finished(pod):
            return
        delay = eviction_delay((pod.get("spec") or {}).get("tolerations") or [], taints)
        if delay is None or tainted_for < delay:
            return
        pods = self.store.type_of(*PODS)
        try:
            self._mark_disruption(pod)
            self.store.delete(pods, meta["namespace"], meta["name"], preconditions={"uid": meta["uid"]})
        except ApiError:  # gone meanwhile
            return
        self.evicted.append(f"{meta['namespace']}/{meta['name']}")
        log.info("taint eviction: deleted pod %s/%s on node %s", meta["namespace"], meta["name"],
                 (pod.get("spec") or {}).get("nodeName"))  # fmt: skip

    def _mark_disruption(self, pod: dict[str, Any]) -> None:
        pods = self.store.type_of(*PODS)
        latest = self.store.get(pods, pod["metadata"]["namespace"], pod["metadata"]["name"])
        why = "Taint manager: deleting due to NoExecute taint"
        status = with_disruption_target(dict(latest.get("status") or {}), "DeletionByTaintManager", why)
        meta = latest["metadata"]
        self.store.update(
            pods, meta["namespace"], meta["name"], {**latest, "status": status}, subresource="status"
        )
