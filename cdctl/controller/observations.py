"""Turn informer observations into the domain events of stream `domain/<uid>`.

Each object kind the controller follows is summarised to what the reconcilers decide on (the full objects stay
in the journal's object cache for request bodies): a ComputeDomain becomes `ComputeDomainObserved`, anything
labelled with a domain's uid a `DomainObjectObserved`. Pure; called by cdctl.controller.journal.
"""

from __future__ import annotations

from typing import Any

from cdctl.domain.computedomains import (
    LABEL_CLIQUE_ID,
    LABEL_COMPUTE_DOMAIN,
    LABEL_TARGET,
    ComputeDomainObserved,
    DomainObjectObserved,
)
from cdctl.domain.events import DomainEvent
from cdctl.k8s.informer import Observation

JsonObject = dict[str, Any]

KIND_COMPUTE_DOMAIN = "ComputeDomain"
KIND_DAEMON_SET = "DaemonSet"
KIND_CLAIM_TEMPLATE = "ResourceClaimTemplate"
KIND_POD = "Pod"
KIND_CLIQUE = "ComputeDomainClique"
KIND_NODE = "Node"


def domain_uid_of(observation: Observation) -> str | None:
    """The ComputeDomain an observation belongs to: its own uid, or the uid in its computeDomain label."""
    if observation.resource.kind == KIND_COMPUTE_DOMAIN:
        return observation.uid or None
    return observation.labels.get(LABEL_COMPUTE_DOMAIN) or None


def pod_is_ready(pod: JsonObject) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def node_readiness(node: JsonObject) -> dict[str, Any]:
    """Whether the Node is Ready, and why not: the reason of its Ready condition (its free-text message can
    change on every status update, and would make each one a new Event). A Node without a Ready condition yet
    (just registered) counts as Ready: nothing says otherwise."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            if condition.get("status") == "True":
                return {"ready": True}
            return {
                "ready": False,
                "why": str(condition.get("reason") or f"Ready is {condition.get('status')}"),
            }
    return {"ready": True}


def summarize(kind: str, obj: JsonObject) -> dict[str, Any]:
    """The decision-relevant fields of a labelled object."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    common: dict[str, Any] = {
        "finalizers": list(meta.get("finalizers") or []),
        "deleting": bool(meta.get("deletionTimestamp")),
    }
    if kind == KIND_CLAIM_TEMPLATE:
        return {**common, "target": str(labels.get(LABEL_TARGET, ""))}
    if kind == KIND_POD:
        return {
            **common,
            "node": str((obj.get("spec") or {}).get("nodeName") or ""),
            "ip": str((obj.get("status") or {}).get("podIP") or ""),
            "clique": labels.get(LABEL_CLIQUE_ID),
            "ready": pod_is_ready(obj),
        }
    if kind == KIND_NODE:
        return {**common, **node_readiness(obj)}
    if kind == KIND_CLIQUE:
        return {
            **common,
            "clique": str(labels.get(LABEL_CLIQUE_ID, "")),
            "daemons": list(obj.get("daemons") or []),
        }
    return common


def to_event(observation: Observation, domain_uid: str) -> DomainEvent:
    obj = observation.obj
    kind = observation.resource.kind
    if kind == KIND_COMPUTE_DOMAIN:
        spec = obj.get("spec") or {}
        channel = spec.get("channel") or {}
        meta = obj.get("metadata") or {}
        return ComputeDomainObserved(
            uid=observation.uid,
            namespace=observation.namespace or "",
            name=observation.name,
            resource_version=observation.resource_version,
            change=str(observation.change),
            num_nodes=int(spec.get("numNodes") or 0),
            channel_template_name=str((channel.get("resourceClaimTemplate") or {}).get("name", "")),
            allocation_mode=str(channel.get("allocationMode") or "Single"),
            deleting=bool(meta.get("deletionTimestamp")),
            finalizers=list(meta.get("finalizers") or []),
            status=dict(obj.get("status") or {}),
        )
    return DomainObjectObserved(
        domain_uid=domain_uid,
        kind=kind,
        namespace=observation.namespace or "",
        name=observation.name,
        uid=observation.uid,
        resource_version=observation.resource_version,
        change=str(observation.change),
        summary=summarize(kind, obj),
    )
