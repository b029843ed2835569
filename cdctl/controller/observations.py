"""Turn informer observations into the domain events of stream `domain/<uid>`.

Each object kind the controller follows is summarised to what the reconcilers decide on (the full objects stay
in the journal's object cache for request bodies): a ComputeDomain becomes `ComputeDomainObserved`, anything
labelled with a domain's uid a `DomainObjectObserved`. `kept_form` is what the controller keeps of an
object at all (the informers' transform, and the journal's for a write's answer): never `managedFields`; of
a DaemonSet not its spec (it is never written back: its finalizer goes by patch, see `PATCHED_FINALIZERS`);
of a daemon pod or a workload claim only what `summarize` reads (neither is ever written). Pure; called by
cdctl.controller.journal and cdctl.controller.manager.
"""

from __future__ import annotations

from typing import Any

from cdctl.api.isolation import CLIQUE_CHANNEL_FIELD
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
KIND_CLAIM = "ResourceClaim"


# Kinds kept without their spec (see `kept_form`), whose finalizers are therefore set by a merge patch guarded
# by resourceVersion rather than an update of the whole object (the chart grants patch on DaemonSets).
PATCHED_FINALIZERS = frozenset({KIND_DAEMON_SET})


def kept_form(kind: str, obj: JsonObject) -> JsonObject:
    """The part of an object the controller keeps: a DaemonSet's spec, a pod's containers and volumes, and
    every object's managedFields are most of their size and never read (a DaemonSet is about 12 KB in
    memory, 1 KB without its spec)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    if kind == KIND_DAEMON_SET:
        return {k: v for k, v in obj.items() if k != "spec"}
    if kind == KIND_CLAIM:  # channel isolation: only where it is allocated is read (`allocated_node`)
        allocation = (obj.get("status") or {}).get("allocation")
        kept = {k: v for k, v in obj.items() if k not in ("spec", "status")}
        where = {"nodeSelector": allocation.get("nodeSelector")} if allocation else None
        kept["status"] = {"allocation": where} if where else {}
        return kept
    if kind == KIND_POD:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        kept = {k: v for k, v in obj.items() if k not in ("spec", "status")}
        kept["spec"] = {"nodeName": spec.get("nodeName")} if spec.get("nodeName") else {}
        kept["status"] = {k: status[k] for k in ("phase", "podIP", "conditions") if k in status}
        return kept
    return obj


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
        clique = {
            **common,
            "clique": str(labels.get(LABEL_CLIQUE_ID, "")),
            "daemons": list(obj.get("daemons") or []),
        }
        if CLIQUE_CHANNEL_FIELD in obj:  # channel isolation: the domain's channel in this clique
            clique[CLIQUE_CHANNEL_FIELD] = obj[CLIQUE_CHANNEL_FIELD]
        return clique
    if kind == KIND_CLAIM:
        return {**common, "node": allocated_node(obj)}
    return common


def allocated_node(claim: JsonObject) -> str:
    """The node a ResourceClaim is allocated to ("" while it is not allocated): the one name its allocation's
    node selector admits (a claim of node-local devices, as the scheduler writes it)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    terms = (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []
    for term in terms:
        for field in (term or {}).get("matchFields") or []:
            values = field.get("values") or []
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and len(values) == 1:
                return str(values[0])
    return ""


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
