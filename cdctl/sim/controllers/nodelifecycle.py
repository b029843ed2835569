"""Stand-in for the node lifecycle controller of kube-controller-manager: a node whose kubelet went silent.

The kubelet renews its Lease `kube-node-lease/<node>` (cdctl.sim.node.kubelet). On every pass
(`reconcile`, run every `monitor_period_s` and on changes) this controller notes, on its own clock, when it
last saw each node's Lease renewed, as the real one keeps its probe timestamp, never comparing timestamps
across machines. A node not heard from for `grace_s` (the real `--node-monitor-grace-period`, 40 s by
default) gets its Ready condition set to Unknown (reason NodeStatusUnknown, "Kubelet stopped posting node
status."), the `node.kubernetes.io/unreachable` taints with effects NoSchedule and NoExecute, and every pod
bound to it its Ready condition set to False (MarkPodsNotReady), so that endpoints and controllers stop
counting on them. Once the kubelet posts Ready again the unreachable taints are removed. Pods that do not
tolerate the NoExecute taint are evicted by cdctl.sim.controllers.tainteviction (after their
tolerationSeconds, 300 s by default). Run by cdctl.sim.rack.cluster via a ControllerLoop with a
resync; tests call `reconcile()` with their own clock.
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
LEASES = ("coordination.k8s.io", "leases")
NODE_LEASE_NAMESPACE = "kube-node-lease"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
UNREACHABLE_EFFECTS = ("NoSchedule", "NoExecute")
NOT_POSTING = "Kubelet stopped posting node status."


def node_condition(node: dict[str, Any], kind: str = "Ready") -> dict[str, Any] | None:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return None


class NodeLifecycleController:
    def __init__(
        self, store: ObjectStore, *, grace_s: float = 40.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.store = store
        self.grace_s = grace_s
        self.clock = clock
        self.kinds = (NODES, LEASES)
        self._heard: dict[
            str, tuple[str, float]
        ] = {}  # node -> (lease renewTime, when this controller saw it)

    def reconcile(self) -> None:
        now = self.clock()
        nodes, _ = self.store.list_objects(self.store.type_of(*NODES), copies=False)  # read only
        leases, _ = self.store.list_objects(self.store.type_of(*LEASES), NODE_LEASE_NAMESPACE, copies=False)
        renewed = {
            lease["metadata"]["name"]: str((lease.get("spec") or {}).get("renewTime") or "")
            for lease in leases
        }
        names = set()
        for node in nodes:
            name = node["metadata"]["name"]
            names.add(name)
            renew = renewed.get(name, "")
            heard = self._heard.get(name)
            if heard is None or heard[0] != renew:
                self._heard[name] = heard = (renew, now)
            ready = node_condition(node)
            status = (ready or {}).get("status")
            if now - heard[1] > self.grace_s:
                if status != "Unknown":
                    self._mark_unknown(name)
            elif status == "True" and _unreachable_taints(node):
                self._untaint(name)
        for gone in set(self._heard) - names:
            del self._heard[gone]

    def _mark_unknown(self, name: str) -> None:
        nodes = self.store.type_of(*NODES)
        node = self.store.get(nodes, "", name)
        stamp = now_rfc3339()
        status = dict(node.get("status") or {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"]
        conditions.append(
            {
                "type": "Ready",
                "status": "Unknown",
                "reason": "NodeStatusUnknown",
                "message": NOT_POSTING,
                "lastHeartbeatTime": (node_condition(node) or {}).get("lastHeartbeatTime", stamp),
                "lastTransitionTime": stamp,
            }
        )
        body = {**node, "status": {**status, "conditions": conditions}}
        node = self.store.update(nodes, "", name, body, subresource="status")
        spec = dict(node.get("spec") or {})
        taints = [t for t in spec.get("taints") or [] if t.get("key") != UNREACHABLE_TAINT]
        taints += [{"key": UNREACHABLE_TAINT, "effect": e, "timeAdded": stamp} for e in UNREACHABLE_EFFECTS]
        self.store.update(nodes, "", name, {**node, "spec": {**spec, "taints": taints}})
        self._mark_pods_not_ready(name)

    def _untaint(self, name: str) -> None:
        nodes = self.store.type_of(*NODES)
        node = self.store.get(nodes, "", name)
        spec = dict(node.get("spec") or {})
        spec["taints"] = [t for t in spec.get("taints") or [] if t.get("key") != UNREACHABLE_TAINT]
        if not spec["taints"]:
            del spec["taints"]
        self.store.update(nodes, "", name, {**node, "spec": spec})

    def _mark_pods_not_ready(self, name: str) -> None:
        pods = self.store.type_of(*PODS)
        for pod in list(self.store.pods_on_node(name)):
            status = pod.get("status") or {}
            conditions = status.get("conditions") or []
            if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                continue
            stamp = now_rfc3339()
            updated = [
                {**c, "status": "False", "lastTransitionTime": stamp} if c.get("type") == "Ready" else c
                for c in conditions
            ]
            meta = pod["metadata"]
            try:
                body = {**pod, "status": {**status, "conditions": updated}}
                self.store.update(pods, meta["namespace"], meta["name"], body, subresource="status")
            except ApiError:  # gone or changed meanwhile: the next pass sees it again
                continue


def _unreachable_taints(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") == UNREACHABLE_TAINT]
