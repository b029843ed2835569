"""The kubelet plugin's view of the cluster over the API server: implements cdctl.plugin.ports.ClusterPort.

Called by the plugin's prepare path through that interface. What a Prepare reads comes from watched copies
(list+watch informers, cdctl.k8s.informer) where that is safe, so a Prepare with the readiness condition
already met makes the claim GET and the label write (when the label is missing), or only the latter with
`watch_claims`:

* ComputeDomains are followed and indexed by UID (a miss re-lists once, so a domain created a moment ago is
  found).
* ResourceClaims are followed only with `watch_claims` (off by default: a cluster-wide watch from every
  node); `cached_claim` answers only for the UID the kubelet asked for and the plugin decides whether that
  copy may be used (cdctl.plugin.driver); `get_claim` always reads fresh in the resource.k8s.io version the
  cluster serves.
* `get_pod` reads one Pod fresh: the owner of a daemon claim, in the driver namespace (the chart grants `get`
  on pods there only).
* The node's label is decided on the watched copy of the Node: no request when it already carries the right
  value; writes carry the copy's resourceVersion, so a stale copy answers 409 and the write re-reads
  (cdctl.k8s.nodes). The copy written is remembered (read-your-writes).
* Daemon readiness: this node's entry in the watched ComputeDomainClique `<uid>.<cliqueID>` of the driver
  namespace (gate ComputeDomainCliques), else in the watched domain's `status.nodes`. While those watches
  run, their "not ready" is the answer and `until_ready` returns when a watch event makes the copy say
  Ready, which ends the retriable wait early; without them the same order is read fresh.
* Channel isolation: the domain's channel is the `imexChannel` field of the same watched clique object
  (read fresh while that watch has not listed); under driver-managed IMEX the shared IMEX daemon's pod on
  this node (the chart's DaemonSet, cdctl.api.shareddaemon) is followed by a pod watch of the driver
  namespace narrowed to this node and that DaemonSet's labels, and its Ready condition is the answer.

API errors become RetriableError or PermanentError here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import structlog

from cdctl.api.cliquechannel import clique_channel
from cdctl.api.isolation import DEFAULT_CHANNEL_COUNT
from cdctl.api.refs import DomainInfo
from cdctl.api.shareddaemon import SHARED_DAEMON_SELECTOR
from cdctl.domain.computedomains import LABEL_CLIQUE_ID, clique_name
from cdctl.domain.errors import CdctlError, PermanentError, RetriableError
from cdctl.k8s import nodes
from cdctl.k8s.errors import KubeApiError, NotFoundError
from cdctl.k8s.informer import Change, Informer, Observation, is_stale
from cdctl.k8s.kube_events import EventRecorder
from cdctl.k8s.resources import (
    COMPUTE_DOMAIN_CLIQUES,
    COMPUTE_DOMAINS,
    NODES,
    PODS,
    resource_claims,
)
from cdctl.k8s.rest import JsonObject, KubeApi

log = structlog.get_logger("cdctl.k8s.plugincluster")
T = TypeVar("T")
READY = "Ready"
INFORMER_RESTART_S = 1.0


def domain_info(obj: JsonObject) -> DomainInfo:
    meta = obj.get("metadata") or {}
    return DomainInfo(str(meta.get("uid", "")), str(meta.get("name", "")), str(meta.get("namespace", "")))


def _uid(obj: JsonObject | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("uid", ""))


def _clique_status(clique: JsonObject | None, node: str) -> str | None:
    """The status of `node`'s daemon entry in a ComputeDomainClique; None when it has no entry."""
    for daemon in (clique or {}).get("daemons") or []:
        if daemon.get("nodeName") == node:
            return str(daemon.get("status"))
    return None


def pod_ready(pod: JsonObject | None) -> bool:
    """Whether a pod exists, is not being deleted and its Ready condition is True."""
    if not pod or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == READY and c.get("status") == "True" for c in conditions)


def _domain_ready(domain: JsonObject | None, node: str) -> bool:
    """Whether the ComputeDomain's status.nodes entry for `node` says Ready."""
    entries = ((domain or {}).get("status") or {}).get("nodes") or []
    return any(entry.get("name") == node and entry.get("status") == READY for entry in entries)


async def _mapped(what: str, call: Callable[[], Awaitable[T]]) -> T:
    try:
        return await call()
    except KubeApiError as exc:
        if exc.retriable:
            raise RetriableError(f"{what}: {exc}", delay=1.0) from exc
        raise PermanentError(f"{what}: {exc}") from exc


class KubeClusterPort:
    """ClusterPort over the API server, with watched copies of what Prepare reads."""

    def __init__(
        self,
        api: KubeApi,
        *,
        resource_version: str,
        driver_namespace: str,
        node_uid: str,
        use_cliques: bool,
        watch_claims: bool = False,
        component: str = "compute-domain-kubelet-plugin",
        channel_count: int = DEFAULT_CHANNEL_COUNT,
    ) -> None:
        self.api = api
        self.claims = resource_claims(resource_version)
        self.driver_namespace = driver_namespace
        self.node_uid = node_uid
        self.use_cliques = use_cliques
        self.watch_claims = watch_claims
        self.component = component
        self._node_events: EventRecorder | None = None
        self._domains: dict[str, DomainInfo] = {}
        self._domain_objs: dict[str, JsonObject] = {}  # watched ComputeDomains by UID (for status.nodes)
        self._relist_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._nodes: dict[str, JsonObject] = {}  # the followed Node, newest copy seen or written
        self._cliques: dict[str, JsonObject] = {}  # watched ComputeDomainCliques of the driver namespace
        self._claims: dict[tuple[str, str], JsonObject] = {}  # watched ResourceClaims by (namespace, name)
        self.channel_count = channel_count
        self._daemon_pods: dict[str, JsonObject] = {}  # the shared IMEX daemon's pods on this node
        self._synced: set[str] = set()  # informers that completed a first listing
        self._changed = asyncio.Condition()

    # ---- watched copies

    def start(
        self, node: str | None = None, clique_id: str | None = None, shared_daemon_node: str | None = None
    ) -> None:
        """Follow ComputeDomains, ResourceClaims (unless `watch_claims` is off), ComputeDomainCliques of the
        driver namespace (gate on) and `node` (its label is then decided on the watched copy).

        With this node's `clique_id` known, only that clique's objects are followed (by the cliqueID label
        every clique carries): the node only ever asks about `<domainUID>.<its cliqueID>`, and a multi-rack
        domain's clique writes then reach one rack's plugins instead of every node's. With
        `shared_daemon_node`, the shared IMEX daemon's pods on that node are followed too."""
        self._follow("computedomain", lambda: Informer(self.api, COMPUTE_DOMAINS), self._domain_seen)
        if node:
            self._follow(
                "node",
                lambda: Informer(self.api, NODES, field_selector=f"metadata.name={node}"),
                self._node_seen,
            )
        if self.use_cliques:
            self._follow(
                "clique",
                lambda: Informer(
                    self.api,
                    COMPUTE_DOMAIN_CLIQUES,
                    namespace=self.driver_namespace,
                    label_selector=f"{LABEL_CLIQUE_ID}={clique_id}" if clique_id else None,
                ),
                self._clique_seen,
            )
        if self.watch_claims:
            self._follow("resourceclaim", lambda: Informer(self.api, self.claims), self._claim_seen)
        if shared_daemon_node:
            self._follow(
                "shareddaemon",
                lambda: Informer(
                    self.api, PODS, namespace=self.driver_namespace, label_selector=SHARED_DAEMON_SELECTOR,
                    field_selector=f"spec.nodeName={shared_daemon_node}",
                ),
                self._daemon_pod_seen,
            )  # fmt: skip

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def until(self, condition: Callable[[], bool]) -> None:
        """Wait until `condition()` holds, re-checked after each watched change (tests, diagnostics)."""
        async with self._changed:
            await self._changed.wait_for(condition)

    def synced(self, *informers: str) -> bool:
        """Whether each named informer (computedomain, node, clique, resourceclaim) has listed once."""
        return all(name in self._synced for name in informers)

    def _follow(
        self, name: str, informer: Callable[[], Informer], seen: Callable[[Observation], None]
    ) -> None:
        """Follow with a fresh informer; one that fails unexpectedly (a bug, an undecodable answer) leaves
        copies that can no longer be trusted: they are dropped (reads go to the API server meanwhile) and a
        new informer lists again after a pause."""

        async def run() -> None:
            while True:
                try:
                    async for item in informer().observe():
                        if isinstance(item, Observation):
                            seen(item)
                        else:
                            self._synced.add(name)
                        async with self._changed:
                            self._changed.notify_all()
                except Exception:
                    log.exception(
                        "informer failed; its copies are dropped until it lists again", informer=name
                    )
                    self._synced.discard(name)
                    self._forget(name)
                    async with self._changed:
                        self._changed.notify_all()
                    await asyncio.sleep(INFORMER_RESTART_S)

        self._tasks.append(asyncio.create_task(run(), name=f"{name}-informer"))

    def _forget(self, name: str) -> None:
        caches: dict[str, list[dict[Any, Any]]] = {
            "computedomain": [self._domains, self._domain_objs],
            "node": [self._nodes],
            "clique": [self._cliques],
            "resourceclaim": [self._claims],
            "shareddaemon": [self._daemon_pods],
        }
        for cache in caches[name]:
            cache.clear()

    def _domain_seen(self, item: Observation) -> None:
        if item.change is Change.DELETED:
            self._domains.pop(item.uid, None)
            self._domain_objs.pop(item.uid, None)
        else:
            self._domains[item.uid] = domain_info(item.obj)
            self._domain_objs[item.uid] = item.obj

    def _node_seen(self, item: Observation) -> None:
        if item.change is not Change.DELETED:
            self._remember_node(item.name, item.obj)
        elif _uid(self._nodes.get(item.name)) == item.uid:  # a re-list reports a recreated node first
            del self._nodes[item.name]

    def _clique_seen(self, item: Observation) -> None:
        if item.change is not Change.DELETED:
            self._cliques[item.name] = item.obj
        elif _uid(self._cliques.get(item.name)) == item.uid:
            del self._cliques[item.name]

    def _daemon_pod_seen(self, item: Observation) -> None:
        if item.change is not Change.DELETED:
            self._daemon_pods[item.name] = item.obj
        elif _uid(self._daemon_pods.get(item.name)) == item.uid:
            del self._daemon_pods[item.name]

    def _claim_seen(self, item: Observation) -> None:
        key = (item.namespace or "", item.name)
        if item.change is not Change.DELETED:
            self._claims[key] = item.obj
        elif _uid(self._claims.get(key)) == item.uid:
            del self._claims[key]

    def _remember_node(self, name: str, obj: JsonObject | None) -> None:
        if obj is None:
            return
        known = self._nodes.get(name)
        known_rv = str((known or {}).get("metadata", {}).get("resourceVersion", ""))
        if known is None or not is_stale(known_rv, str(obj.get("metadata", {}).get("resourceVersion", ""))):
            self._nodes[name] = obj

    async def _relist_domains(self) -> None:
        async with self._relist_lock:
            listing = await self.api.list_objects(COMPUTE_DOMAINS.collection_path())
            items = listing.get("items") or []
            self._domains = {d.uid: d for d in (domain_info(i) for i in items)}
            self._domain_objs = {_uid(i): i for i in items}

    def cached_domain(self, uid: str) -> DomainInfo | None:
        """The watched ComputeDomain with this UID (no request)."""
        return self._domains.get(uid)

    def cached_node(self, name: str) -> JsonObject | None:
        """The newest copy of the followed Node seen on the watch or written here (no request)."""
        return self._nodes.get(name)

    async def get_compute_domain(self, uid: str) -> DomainInfo | None:
        if uid not in self._domains:
            await _mapped("listing ComputeDomains", self._relist_domains)
        return self._domains.get(uid)

    # ---- ClusterPort

    def cached_claim(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        """The watched copy of the claim if it has this UID; None on a miss or another UID (no request)."""
        obj = self._claims.get((namespace, name))
        return obj if obj is not None and _uid(obj) == uid else None

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        path = self.claims.object_path(namespace, name)
        return await _mapped(f"reading ResourceClaim {namespace}/{name}", lambda: self.api.get_or_none(path))

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        path = PODS.object_path(namespace, name)
        return await _mapped(f"reading Pod {namespace}/{name}", lambda: self.api.get_or_none(path))

    async def add_node_label(self, node: str, domain_uid: str) -> None:
        known = self._nodes.get(node)
        written = await _mapped(
            f"labelling node {node}", lambda: nodes.add_domain_label(self.api, node, domain_uid, known)
        )
        self._remember_node(node, written)

    async def remove_node_label(self, node: str, domain_uid: str) -> None:
        known = self._nodes.get(node)
        try:
            written = await _mapped(
                f"unlabelling node {node}",
                lambda: nodes.remove_domain_label(self.api, node, domain_uid, known),
            )
        except PermanentError as exc:
            if isinstance(exc.__cause__, NotFoundError):
                return  # the node is gone: nothing to unlabel
            raise
        self._remember_node(node, written)

    def watched_ready(self, domain: DomainInfo, node: str, clique_id: str) -> bool:
        """Ready per the watched clique's entry for `node` (gate on, a clique ID), else per the watched
        domain's status.nodes: the same order as the live reads of `daemon_ready`."""
        if self.use_cliques and clique_id:
            status = _clique_status(self._cliques.get(f"{domain.uid}.{clique_id}"), node)
            if status is not None:
                return status == READY
        return _domain_ready(self._domain_objs.get(domain.uid), node)

    def readiness_watched(self, clique_id: str) -> bool:
        following = ("computedomain", "clique") if self.use_cliques and clique_id else ("computedomain",)
        return self.synced(*following)

    async def until_ready(self, domain: DomainInfo, node: str, clique_id: str) -> None:
        await self.until(lambda: self.watched_ready(domain, node, clique_id))

    async def daemon_ready(self, domain: DomainInfo, node: str, clique_id: str) -> bool:
        """Ready per the watched copies (no request). While those watches are listed and running, "not
        ready" is their answer too: the waiting Prepare is woken by the change that makes it Ready
        (`until_ready`), and re-reading a 144-node domain on every retry of every node only loads the API
        server. Without them (not listed yet, or an informer that failed), it is read fresh: the clique,
        else the domain."""
        if self.watched_ready(domain, node, clique_id):
            return True
        if self.readiness_watched(clique_id):
            return False
        if self.use_cliques and clique_id:
            path = COMPUTE_DOMAIN_CLIQUES.object_path(self.driver_namespace, f"{domain.uid}.{clique_id}")
            clique = await _mapped("reading ComputeDomainClique", lambda: self.api.get_or_none(path))
            status = _clique_status(clique, node)
            if status is not None:
                return status == READY
        cd_path = COMPUTE_DOMAINS.object_path(domain.namespace, domain.name)
        cd = await _mapped("reading ComputeDomain", lambda: self.api.get_or_none(cd_path))
        return _domain_ready(cd, node)

    # ---- channel isolation

    def _clique_path(self, domain: DomainInfo, clique_id: str) -> str:
        return COMPUTE_DOMAIN_CLIQUES.object_path(self.driver_namespace, clique_name(domain.uid, clique_id))

    def watched_channel(self, domain: DomainInfo, clique_id: str) -> int | None:
        """The channel on the watched clique object (no request)."""
        name = clique_name(domain.uid, clique_id)
        return clique_channel(self._cliques.get(name), name, self.channel_count)

    async def clique_channel(self, domain: DomainInfo, clique_id: str) -> int | None:
        channel = self.watched_channel(domain, clique_id)
        if channel is not None or self.readiness_watched(clique_id):
            return channel
        path = self._clique_path(domain, clique_id)
        clique = await _mapped("reading ComputeDomainClique", lambda: self.api.get_or_none(path))
        return clique_channel(clique, clique_name(domain.uid, clique_id), self.channel_count)

    async def until_channel(self, domain: DomainInfo, clique_id: str) -> None:
        def assigned() -> bool:
            try:
                return self.watched_channel(domain, clique_id) is not None
            except CdctlError:
                return True  # a bad value: let the retry say so

        await self.until(assigned)

    def _daemon_ready_watched(self) -> bool:
        return any(pod_ready(p) for p in self._daemon_pods.values())

    async def shared_daemon_ready(self, node: str) -> bool:
        if self._daemon_ready_watched():
            return True
        if self.shared_daemon_watched():
            return False
        listing = await _mapped(
            "listing the shared IMEX daemon's pods",
            lambda: self.api.list_objects(
                PODS.collection_path(self.driver_namespace),
                labelSelector=SHARED_DAEMON_SELECTOR,
                fieldSelector=f"spec.nodeName={node}",
            ),
        )
        return any(pod_ready(p) for p in listing.get("items") or [])

    def shared_daemon_watched(self) -> bool:
        return self.synced("shareddaemon")

    async def until_shared_daemon_ready(self, node: str) -> None:
        await self.until(self._daemon_ready_watched)

    async def node_event(self, node: str, reason: str, message: str, warning: bool = True) -> None:
        """An Event on the Node (namespace default); repeats aggregate into one (cdctl.k8s.kube_events)."""
        if self._node_events is None:
            self._node_events = EventRecorder(self.api, self.component, node, host=node)
        obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "uid": self.node_uid}}
        await self._node_events.post(obj, "Warning" if warning else "Normal", reason, message)


async def connect(kubeconfig: str | None, qps: float, burst: int) -> KubeApi:
    """A KubeApi for the plugin (kubeconfig file, else in-cluster); close it with `disconnect`."""
    from cdctl.k8s.client import api_client

    return KubeApi(await api_client(kubeconfig), qps=qps, burst=burst)


async def disconnect(api: KubeApi) -> None:
    await api.client.close()
