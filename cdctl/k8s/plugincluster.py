"""The kubelet plugin's view of the cluster over the API server: implements cdctl.plugin.ports.ClusterPort.

Called by the plugin's prepare path through that interface. ResourceClaims are read fresh (GET) in the
resource.k8s.io version the cluster serves; ComputeDomains are followed by an informer indexed by UID (a
miss re-lists once, so a domain created a moment ago is found); daemon readiness reads the domain's
ComputeDomainClique `<uid>.<cliqueID>` in the driver namespace (gate ComputeDomainCliques; a watched copy
that says Ready answers without a request, anything else is read fresh) and falls back to `status.nodes` of
the ComputeDomain. The node's own label is decided on a watched copy of the Node (writes
carry its resourceVersion, so a stale copy answers 409 and the next attempt re-reads). API errors become
RetriableError or PermanentError here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import structlog

from cdctl.api.refs import DomainInfo
from cdctl.domain.errors import PermanentError, RetriableError
from cdctl.k8s import nodes
from cdctl.k8s.errors import KubeApiError, NotFoundError
from cdctl.k8s.informer import Change, Informer, Observation, is_stale
from cdctl.k8s.resources import COMPUTE_DOMAIN_CLIQUES, COMPUTE_DOMAINS, NODES, RESOURCE_GROUP, ResourceType
from cdctl.k8s.rest import JsonObject, KubeApi

log = structlog.get_logger("cdctl.k8s.plugincluster")
T = TypeVar("T")
READY = "Ready"


def resource_claims(version: str) -> ResourceType:
    return ResourceType(RESOURCE_GROUP, version, "resourceclaims", "ResourceClaim", True)


def domain_info(obj: JsonObject) -> DomainInfo:
    meta = obj.get("metadata") or {}
    return DomainInfo(str(meta.get("uid", "")), str(meta.get("name", "")), str(meta.get("namespace", "")))


async def _mapped(what: str, call: Callable[[], Awaitable[T]]) -> T:
    try:
        return await call()
    except KubeApiError as exc:
        if exc.retriable:
            raise RetriableError(f"{what}: {exc}", delay=1.0) from exc
        raise PermanentError(f"{what}: {exc}") from exc


class KubeClusterPort:
    """ClusterPort over the API server."""

    def __init__(
        self,
        api: KubeApi,
        *,
        resource_version: str,
        driver_namespace: str,
        node_uid: str,
        use_cliques: bool,
        component: str = "compute-domain-kubelet-plugin",
    ) -> None:
        self.api = api
        self.claims = resource_claims(resource_version)
        self.driver_namespace = driver_namespace
        self.node_uid = node_uid
        self.use_cliques = use_cliques
        self.component = component
        self._domains: dict[str, DomainInfo] = {}
        self._relist_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._nodes: dict[str, JsonObject] = {}  # the followed Node, newest copy seen or written
        self._cliques: dict[str, JsonObject] = {}  # watched ComputeDomainCliques of the driver namespace

    # ---- ComputeDomain index

    def start(self, node: str | None = None) -> None:
        """Follow ComputeDomains, and `node` (its labels are then decided from the watched copy)."""
        self._tasks.append(asyncio.create_task(self._follow_domains(), name="computedomain-informer"))
        if node:
            self._tasks.append(asyncio.create_task(self._follow_node(node), name="node-informer"))
        if self.use_cliques:
            self._tasks.append(asyncio.create_task(self._follow_cliques(), name="clique-informer"))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _remember_node(self, name: str, obj: JsonObject | None) -> None:
        if obj is None:
            return
        known = self._nodes.get(name)
        known_rv = str((known or {}).get("metadata", {}).get("resourceVersion", ""))
        if known is None or not is_stale(known_rv, str(obj.get("metadata", {}).get("resourceVersion", ""))):
            self._nodes[name] = obj

    async def _follow_node(self, node: str) -> None:
        informer = Informer(self.api, NODES, field_selector=f"metadata.name={node}")
        async for item in informer.observe():
            if isinstance(item, Observation):
                if item.change is Change.DELETED:
                    self._nodes.pop(node, None)
                else:
                    self._remember_node(node, item.obj)

    async def _follow_domains(self) -> None:
        informer = Informer(self.api, COMPUTE_DOMAINS)
        async for item in informer.observe():
            if isinstance(item, Observation):
                if item.change is Change.DELETED:
                    self._domains.pop(item.uid, None)
                else:
                    self._domains[item.uid] = domain_info(item.obj)

    async def _follow_cliques(self) -> None:
        informer = Informer(self.api, COMPUTE_DOMAIN_CLIQUES, namespace=self.driver_namespace)
        async for item in informer.observe():
            if isinstance(item, Observation):
                if item.change is Change.DELETED:
                    self._cliques.pop(item.name, None)
                else:
                    self._cliques[item.name] = item.obj

    async def _relist_domains(self) -> None:
        async with self._relist_lock:
            listing = await self.api.list_objects(COMPUTE_DOMAINS.collection_path())
            self._domains = {d.uid: d for d in (domain_info(i) for i in listing.get("items") or [])}

    async def get_compute_domain(self, uid: str) -> DomainInfo | None:
        if uid not in self._domains:
            await _mapped("listing ComputeDomains", self._relist_domains)
        return self._domains.get(uid)

    # ---- ClusterPort

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        path = self.claims.object_path(namespace, name)
        return await _mapped(f"reading ResourceClaim {namespace}/{name}", lambda: self.api.get_or_none(path))

    async def add_node_label(self, node: str, domain_uid: str) -> None:
        await _mapped(f"labelling node {node}", lambda: nodes.add_domain_label(self.api, node, domain_uid))

    async def remove_node_label(self, node: str, domain_uid: str) -> None:
        try:
            await _mapped(
                f"unlabelling node {node}", lambda: nodes.remove_domain_label(self.api, node, domain_uid)
            )
        except PermanentError as exc:
            if isinstance(exc.__cause__, NotFoundError):
                return  # the node is gone: nothing to unlabel
            raise

    async def daemon_ready(self, domain: DomainInfo, node: str, clique_id: str) -> bool:
        """Ready per the watched clique (no request), else a fresh read of the clique, else of the domain."""
        if self.use_cliques and clique_id:
            name = f"{domain.uid}.{clique_id}"
            for daemon in self._cliques.get(name, {}).get("daemons") or []:
                if daemon.get("nodeName") == node and daemon.get("status") == READY:
                    return True
            path = COMPUTE_DOMAIN_CLIQUES.object_path(self.driver_namespace, name)
            clique = await _mapped("reading ComputeDomainClique", lambda: self.api.get_or_none(path))
            for daemon in (clique or {}).get("daemons") or []:
                if daemon.get("nodeName") == node:
                    return bool(daemon.get("status") == READY)
        cd_path = COMPUTE_DOMAINS.object_path(domain.namespace, domain.name)
        cd = await _mapped("reading ComputeDomain", lambda: self.api.get_or_none(cd_path))
        for entry in ((cd or {}).get("status") or {}).get("nodes") or []:
            if entry.get("name") == node:
                return bool(entry.get("status") == READY)
        return False

    async def node_event(self, node: str, reason: str, message: str, warning: bool = True) -> None:
        try:
            await nodes.record_node_event(
                self.api, node=node, node_uid=self.node_uid, reason=reason, message=message, warning=warning,
                component=self.component,
            )  # fmt: skip
        except KubeApiError as exc:
            log.warning("could not record a Node event", reason=reason, error=str(exc))


async def connect(kubeconfig: str | None, qps: float, burst: int) -> KubeApi:
    """A KubeApi for the plugin (kubeconfig file, else in-cluster); close it with `disconnect`."""
    from cdctl.k8s.client import api_client

    return KubeApi(await api_client(kubeconfig), qps=qps, burst=burst)


async def disconnect(api: KubeApi) -> None:
    await api.client.close()
