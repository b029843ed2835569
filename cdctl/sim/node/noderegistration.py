"""What a kubelet writes about its own node: the Node object with a Ready condition, and its Lease heartbeat.

`register(store, name, labels, ip)` creates the Node when absent (a new node, or one deleted while its kubelet
was down) and posts the Ready condition and addresses, keeping what others wrote in the status (the device
plugin's allocatable, the node lifecycle controller's conditions but Ready); `renew_lease(store, name, ...)`
renews `kube-node-lease/<name>`, creating it owned by the Node so that it goes when the Node is deleted, as
the kubelet's node lease controller does. Used by cdctl.sim.node.kubelet.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import Any

from cdctl.sim.apiserver.errors import AlreadyExists, NotFound
from cdctl.sim.apiserver.objectmeta import now_rfc3339
from cdctl.sim.apiserver.store import ObjectStore

NODES = ("", "nodes")
LEASES = ("coordination.k8s.io", "leases")
NODE_LEASE_NAMESPACE = "kube-node-lease"


def register(store: ObjectStore, name: str, labels: dict[str, str], ip: str) -> dict[str, Any]:
    """Create the Node if absent and post it Ready; the Node as written."""
    nodes = store.type_of(*NODES)
    try:
        store.get(nodes, "", name)
    except NotFound:
        store.create(nodes, "", {"metadata": {"name": name, "labels": dict(labels)}})
    node = store.get(nodes, "", name)
    stamp = now_rfc3339()
    status = dict(node.get("status") or {})
    previous: dict[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {}
    )
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": previous.get("lastTransitionTime", stamp)
        if previous.get("status") == "True"
        else stamp,
    }
    status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"] + [ready]
    status["addresses"] = [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}]
    return store.update(nodes, "", name, {**node, "status": status}, subresource="status")


def renew_lease(store: ObjectStore, name: str, duration_s: int, node: dict[str, Any] | None = None) -> None:
    """Renew the node's Lease (create it, owned by the Node, when absent)."""
    leases = store.type_of(*LEASES)
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    try:
        lease = store.get(leases, NODE_LEASE_NAMESPACE, name)
    except NotFound:
        node = node or store.get(store.type_of(*NODES), "", name)
        owner = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}
        body = {
            "metadata": {"name": name, "ownerReferences": [owner]},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": duration_s, "renewTime": stamp},
        }
        with contextlib.suppress(AlreadyExists):
            store.create(leases, NODE_LEASE_NAMESPACE, body)
        return
    spec = {**(lease.get("spec") or {}), "renewTime": stamp}
    store.update(leases, NODE_LEASE_NAMESPACE, name, {**lease, "spec": spec})
