"""A running ComputeDomain as the cluster shows it, and when each part of it changed.

- `domain_shape(rack, namespace, name)`: the domain's clique entries (node -> index, and the address each
  names), its `status.nodes` (node -> Ready/NotReady) and `status.status`, its live daemon pods (node -> pod
  IP) and the nodes labelled for it.
- `unsettled(shape, nodes)`: what keeps the domain from standing on those nodes, each with its own daemon
  Ready and listed under its own address (None when nothing does).
- `imex_starts(rack, address)`: how often the fake IMEX at that address (a daemon pod's IP) started
  (cdctl.sim.node.fakeimex counts every start).
- `CommitListener`: the base of what follows the API server's commit hook while in a `with` block (its
  `_note` sees every commit); `Timeline` here and cdctl.sim.rack.chaos.Witness are ones.
- `Timeline(rack, uid)`: from the API server's commit hook, when (monotonic seconds) each node's worker pod
  was created, turned Running or went away, its domain label came or went, its daemon pod was created, turned
  Ready or went away, its clique entry appeared, moved or went, and `status.nodes` listed it, called it
  Ready or dropped it. Tests assert the order of these per node and print the lags between them.
Used by the integration tests of a domain that changes shape and by bench/chaos.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from cdctl.domain.computedomains import LABEL_COMPUTE_DOMAIN
from cdctl.sim.apiserver.watch import StoredEvent
from cdctl.sim.controllers.daemonsets import pod_is_ready
from cdctl.sim.controllers.jobs import JOB_NAME_LABEL
from cdctl.sim.node import fakeimex
from cdctl.sim.rack.checks import CD_GROUP
from cdctl.sim.rack.launch import Rack

PODS = ("", "pods")
NODES = ("", "nodes")
CLIQUES = (CD_GROUP, "computedomaincliques")
DOMAINS = (CD_GROUP, "computedomains")


@dataclass(frozen=True)
class DomainShape:
    indices: dict[str, int]  # node -> index in its clique
    entry_addresses: dict[str, str]  # node -> the address its clique entry names
    status_nodes: dict[str, str]  # node -> Ready / NotReady, from status.nodes
    status: str
    daemons: dict[str, str]  # node -> IP of its live daemon pod
    ready_daemons: frozenset[str]  # nodes whose daemon pod is Ready
    labelled: frozenset[str]  # nodes labelled for the domain


def domain_shape(rack: Rack, namespace: str, name: str) -> DomainShape:
    store = rack.store
    cd = store.peek(store.type_of(*DOMAINS), namespace, name)
    uid = cd["metadata"]["uid"]
    status = cd.get("status") or {}
    indices: dict[str, int] = {}
    addresses: dict[str, str] = {}
    cliques, _ = store.list_objects(store.type_of(*CLIQUES), copies=False)
    for clique in cliques:
        if (clique["metadata"].get("labels") or {}).get(LABEL_COMPUTE_DOMAIN) == uid:
            for entry in clique.get("daemons") or []:
                indices[str(entry["nodeName"])] = int(entry["index"])
                addresses[str(entry["nodeName"])] = str(entry.get("ipAddress") or "")
    daemons: dict[str, str] = {}
    ready: set[str] = set()
    pods, _ = store.list_objects(store.type_of(*PODS), rack.settings.driver_namespace, copies=False)
    for pod in pods:
        if (pod["metadata"].get("labels") or {}).get(LABEL_COMPUTE_DOMAIN) != uid:
            continue
        if pod["metadata"].get("deletionTimestamp"):
            continue
        node = str(pod["spec"].get("nodeName") or "")
        daemons[node] = str((pod.get("status") or {}).get("podIP") or "")
        if pod_is_ready(pod):
            ready.add(node)
    nodes, _ = store.list_objects(store.type_of(*NODES), copies=False)
    labelled = {
        n["metadata"]["name"]
        for n in nodes
        if (n["metadata"].get("labels") or {}).get(LABEL_COMPUTE_DOMAIN) == uid
    }
    return DomainShape(
        indices,
        addresses,
        {str(n["name"]): str(n.get("status") or "NotReady") for n in status.get("nodes") or []},
        str(status.get("status") or ""),
        daemons,
        frozenset(ready),
        frozenset(labelled),
    )


def unsettled(shape: DomainShape, nodes: set[str]) -> str | None:
    """What keeps the domain from standing on exactly `nodes`, each with its own daemon Ready and in the
    clique under that daemon's address, Ready in `status.nodes` (None when nothing does). Until the
    controller has seen a replaced daemon go, the clique and the status can still show the old one, Ready."""
    if set(shape.status_nodes) != nodes or shape.status != "Ready":
        return f"domain {shape.status} on {sorted(shape.status_nodes)}, wanted {sorted(nodes)}"
    for node in sorted(nodes):
        address = shape.daemons.get(node, "")
        if node not in shape.ready_daemons or not address or shape.entry_addresses.get(node) != address:
            return (
                f"{node}: daemon at {address!r} Ready={node in shape.ready_daemons}, clique entry at "
                f"{shape.entry_addresses.get(node)!r}"
            )
        if shape.status_nodes[node] != "Ready":
            return f"{node}: {shape.status_nodes[node]} in status.nodes"
    return None


def imex_starts(rack: Rack, address: str) -> int:
    """How often the fake IMEX at `address` started."""
    registry = fakeimex.Registry(rack.cluster.fake_imex_env()[fakeimex.REGISTRY_ENV])
    return registry.start_counts(by="address").get(address, 0)


@dataclass(frozen=True)
class Change:
    at: float  # time.monotonic()
    node: str
    what: str  # e.g. "worker Running", "label removed", "daemon Ready", "index 2", "status Ready"


@dataclass
class CommitListener:
    """Inside `with`, `_note` is called with every commit of the rack's API server (before its watches)."""

    rack: Rack

    def __enter__(self) -> Self:
        self.rack.store.hub.listeners.append(self._note)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.rack.store.hub.listeners.remove(self._note)

    def _note(self, event: StoredEvent) -> None:
        raise NotImplementedError


@dataclass
class Timeline(CommitListener):
    """Per node, what changed about the domain `uid` and when (`changes`, in commit order)."""

    uid: str
    workers_namespace: str
    changes: list[Change] = field(default_factory=list)

    def first(self, node: str, what: str, after: float = 0.0) -> float | None:
        """When `node` first saw `what` at or after `after`; None if it has not."""
        return next((c.at for c in self.changes if c.node == node and c.what == what and c.at >= after), None)

    def of(self, node: str) -> list[str]:
        return [c.what for c in self.changes if c.node == node]

    def _add(self, node: str, what: str) -> None:
        if node:
            self.changes.append(Change(time.monotonic(), node, what))

    def _note(self, event: StoredEvent) -> None:
        if event.storage_key == PODS:
            self._pod(event)
        elif event.storage_key == NODES:
            self._node(event)
        elif event.storage_key == CLIQUES:
            self._clique(event)
        elif event.storage_key == DOMAINS and event.obj["metadata"].get("uid") == self.uid:
            self._status(event)

    def _pod(self, event: StoredEvent) -> None:
        obj, before = event.obj, event.previous
        labels = obj["metadata"].get("labels") or {}
        if event.namespace == self.workers_namespace and JOB_NAME_LABEL in labels:
            kind = "worker"
        elif labels.get(LABEL_COMPUTE_DOMAIN) == self.uid:
            kind = "daemon"
        else:
            return
        node = str((obj.get("spec") or {}).get("nodeName") or "")
        was_node = str(((before or {}).get("spec") or {}).get("nodeName") or "")
        if event.type == "DELETED":
            self._add(node, f"{kind} gone")
            return
        if obj["metadata"].get("deletionTimestamp") and not (before or {}).get("metadata", {}).get(
            "deletionTimestamp"
        ):
            self._add(node, f"{kind} terminating")  # deleted: its kubelet ends it, then removes it
        if node and node != was_node:
            self._add(node, f"{kind} bound")
        if kind == "worker":
            running = (obj.get("status") or {}).get("phase") == "Running"
            was = ((before or {}).get("status") or {}).get("phase") == "Running"
            if running and not was:
                self._add(node, "worker Running")
        else:
            ready, was_ready = pod_is_ready(obj), before is not None and pod_is_ready(before)
            if ready != was_ready:
                self._add(node, "daemon Ready" if ready else "daemon NotReady")

    def _node(self, event: StoredEvent) -> None:
        now = (event.obj["metadata"].get("labels") or {}).get(LABEL_COMPUTE_DOMAIN) == self.uid
        was = ((event.previous or {}).get("metadata", {}).get("labels") or {}).get(
            LABEL_COMPUTE_DOMAIN
        ) == self.uid
        if event.type == "DELETED":
            now = False
        if now != was:
            self._add(event.obj["metadata"]["name"], "label added" if now else "label removed")

    @staticmethod
    def _entries(obj: dict[str, Any] | None) -> dict[str, int]:
        return {str(e["nodeName"]): int(e["index"]) for e in (obj or {}).get("daemons") or []}

    def _clique(self, event: StoredEvent) -> None:
        if (event.obj["metadata"].get("labels") or {}).get(LABEL_COMPUTE_DOMAIN) != self.uid:
            return
        now = {} if event.type == "DELETED" else self._entries(event.obj)
        was = self._entries(event.previous) if event.type != "ADDED" else {}
        if event.type == "DELETED":
            was = self._entries(event.obj)
        for node in sorted(set(now) | set(was)):
            if node not in now:
                self._add(node, "index gone")
            elif was.get(node) != now[node]:
                self._add(node, f"index {now[node]}")

    def _status(self, event: StoredEvent) -> None:
        def nodes(obj: dict[str, Any] | None) -> dict[str, str]:
            listed = ((obj or {}).get("status") or {}).get("nodes") or []
            return {str(n["name"]): str(n.get("status") or "NotReady") for n in listed}

        now = {} if event.type == "DELETED" else nodes(event.obj)
        was = nodes(event.previous)
        for node in sorted(set(now) | set(was)):
            if node not in now:
                self._add(node, "status unlisted")
            elif was.get(node) != now[node]:
                self._add(node, f"status {now[node]}")
