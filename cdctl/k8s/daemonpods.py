"""The IMEX daemon's view of the cluster: its own pod's clique label, and the peers the controller lists.

Called by cdctl.daemon.app. Within the daemon's RBAC (pods get/patch in its namespace; ComputeDomainCliques
or ComputeDomains get/list/watch): `label_own_pod` merge-patches `resource.nvidia.com/computeDomain.cliqueID`
onto the pod; `follow_clique` yields the entries of ComputeDomainClique `<uid>.<cliqueID>` every time it
changes (no entries while it does not exist); `follow_domain_status` yields, for the ComputeDomainCliques gate
off, the domain's `status.nodes` and `spec.numNodes`, ignoring an object of the same name with another UID.
Both follow one object through an Informer with a `metadata.name` field selector. Nothing here writes a
clique or a domain status: the controller keeps them. `follow_shared_peers` is the shared IMEX daemon's
(channel isolation, driver-managed; cdctl.api.shareddaemon): its peers are the pods of the chart's
DaemonSet labelled with its clique, each with an IP, one per node, listed in node-name order, so every
daemon of the clique writes the same node list; it reads pods only (pods get/list/watch, and the patch of
its own label, in its namespace).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

from cdctl.api.shareddaemon import SHARED_DAEMON_SELECTOR
from cdctl.domain.computedomains import LABEL_CLIQUE_ID, STATUS_NOT_READY, DaemonEntry, clique_name
from cdctl.domain.imex import PeerListing
from cdctl.k8s.client import api_client
from cdctl.k8s.informer import Change, Informer, Observation
from cdctl.k8s.resources import COMPUTE_DOMAIN_CLIQUES, COMPUTE_DOMAINS, PODS
from cdctl.k8s.rest import JsonObject, KubeApi


@asynccontextmanager
async def daemon_api(kubeconfig: str | None) -> AsyncIterator[KubeApi]:
    """A KubeApi for the daemon (kubeconfig file, else in-cluster), closed on exit."""
    client = await api_client(kubeconfig)
    try:
        yield KubeApi(client)
    finally:
        await client.close()


async def label_own_pod(api: KubeApi, namespace: str, name: str, clique_id: str) -> JsonObject:
    """Set the clique label on the daemon's own pod (an empty clique ID is a label with an empty value)."""
    patch = {"metadata": {"labels": {LABEL_CLIQUE_ID: clique_id}}}
    return await api.merge_patch(PODS.object_path(namespace, name), patch)


def _clique_entries(daemons: object) -> tuple[DaemonEntry, ...]:
    items = daemons if isinstance(daemons, list) else []
    return tuple(DaemonEntry.from_clique_json(item) for item in items if isinstance(item, dict))


async def follow_clique(
    api: KubeApi, namespace: str, domain_uid: str, clique_id: str
) -> AsyncIterator[PeerListing]:
    name = clique_name(domain_uid, clique_id)
    informer = Informer(
        api, COMPUTE_DOMAIN_CLIQUES, namespace=namespace, field_selector=f"metadata.name={name}"
    )
    async for item in informer.observe():
        if not isinstance(item, Observation) or item.name != name:
            continue
        if item.change is Change.DELETED:
            yield PeerListing(())
            continue
        yield PeerListing(_clique_entries(item.obj.get("daemons")))


async def follow_domain_status(
    api: KubeApi, namespace: str, name: str, domain_uid: str
) -> AsyncIterator[PeerListing]:
    informer = Informer(api, COMPUTE_DOMAINS, namespace=namespace, field_selector=f"metadata.name={name}")
    async for item in informer.observe():
        if not isinstance(item, Observation) or item.name != name or item.uid != domain_uid:
            continue
        if item.change is Change.DELETED:
            yield PeerListing(())
            continue
        status = item.obj.get("status") or {}
        spec = item.obj.get("spec") or {}
        nodes = tuple(
            DaemonEntry.from_status_json(node) for node in status.get("nodes") or [] if isinstance(node, dict)
        )
        yield PeerListing(nodes, int(spec.get("numNodes") or 0))


def shared_peer_entries(pods: Iterable[JsonObject], clique_id: str) -> tuple[DaemonEntry, ...]:
    """The shared daemons of `clique_id`: pods with that clique label, an IP and a node, not being
    deleted, one per node (the oldest name first), ordered by node name."""
    by_node: dict[str, JsonObject] = {}
    for pod in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("name", ""))):
        meta = pod.get("metadata") or {}
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        ip = str((pod.get("status") or {}).get("podIP") or "")
        if (meta.get("labels") or {}).get(LABEL_CLIQUE_ID) != clique_id or meta.get("deletionTimestamp"):
            continue
        if node and ip and node not in by_node:
            by_node[node] = pod
    return tuple(
        DaemonEntry(node, str(by_node[node]["status"]["podIP"]), clique_id, index, STATUS_NOT_READY)
        for index, node in enumerate(sorted(by_node))
    )


async def follow_shared_peers(api: KubeApi, namespace: str, clique_id: str) -> AsyncIterator[PeerListing]:
    """Every change of the clique's shared daemon pods, as the listing of them all."""
    selector = f"{SHARED_DAEMON_SELECTOR},{LABEL_CLIQUE_ID}={clique_id}"
    informer = Informer(api, PODS, namespace=namespace, label_selector=selector)
    pods: dict[str, JsonObject] = {}
    async for item in informer.observe():
        if not isinstance(item, Observation):
            continue
        if item.change is Change.DELETED:
            pods.pop(item.name, None)
        else:
            pods[item.name] = item.obj
        yield PeerListing(shared_peer_entries(pods.values(), clique_id))
