"""Node access for the kubelet plugin: its UID, the ComputeDomain label, and Kubernetes Events on the Node.

Called by the plugin's cluster adapter (cdctl.k8s.plugincluster) and start-up. Label writes carry the Node's
resourceVersion, so a concurrent change (or a stale cached copy) answers 409 and the caller retries (the Go
driver uses Update).
"""

from __future__ import annotations

from datetime import UTC, datetime

from cdctl.api.refs import COMPUTE_DOMAIN_LABEL
from cdctl.domain.errors import RetriableError
from cdctl.k8s.resources import EVENTS, NODES
from cdctl.k8s.rest import JsonObject, KubeApi

EVENT_NAMESPACE = "default"


class LabelConflict(RetriableError):
    """The node carries the label of another ComputeDomain."""


async def get_node(api: KubeApi, name: str) -> JsonObject:
    return await api.get(NODES.object_path(None, name))


async def add_domain_label(api: KubeApi, node: str, domain_uid: str) -> bool:
    """Label the node with the domain UID; True if a write was needed."""
    obj = await get_node(api, node)
    meta = obj.get("metadata") or {}
    current = (meta.get("labels") or {}).get(COMPUTE_DOMAIN_LABEL)
    if current == domain_uid:
        return False
    if current:
        raise LabelConflict(f"label already exists for a different ComputeDomain ({current})", delay=1.0)
    patch = {
        "metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "labels": {COMPUTE_DOMAIN_LABEL: domain_uid},
        }
    }
    await api.merge_patch(NODES.object_path(None, node), patch)
    return True


async def remove_domain_label(api: KubeApi, node: str, domain_uid: str) -> bool:
    """Remove the label only if it names this domain; True if a write was needed."""
    obj = await get_node(api, node)
    meta = obj.get("metadata") or {}
    if (meta.get("labels") or {}).get(COMPUTE_DOMAIN_LABEL) != domain_uid:
        return False
    patch = {
        "metadata": {"resourceVersion": meta.get("resourceVersion"), "labels": {COMPUTE_DOMAIN_LABEL: None}}
    }
    await api.merge_patch(NODES.object_path(None, node), patch)
    return True


async def record_node_event(
    api: KubeApi, *, node: str, node_uid: str, reason: str, message: str, warning: bool, component: str
) -> JsonObject:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body: JsonObject = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{node}.", "namespace": EVENT_NAMESPACE},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid},
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": component, "host": node},
        "reportingComponent": component,
        "reportingInstance": node,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    return await api.create(EVENTS.collection_path(EVENT_NAMESPACE), body)
