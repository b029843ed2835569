"""Routes each committed write of the simulated API server to the kubelets of the nodes it concerns.

`NodeRouter` is created by cdctl.sim.rack.cluster for its kubelets (cdctl.sim.node.kubelet); each kubelet
attaches a queue for its node and is woken by what concerns it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cdctl.sim.apiserver.claimrefs import allocated_node
from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.apiserver.watch import StoredEvent, Watcher, WatchEvent


def concerned_nodes(obj: Mapping[str, Any]) -> set[str]:
    """The nodes a write of `obj` concerns: a pod or slice bound there (spec.nodeName), a claim allocated
    there."""
    nodes = {str((obj.get("spec") or {}).get("nodeName") or ""), str(allocated_node(dict(obj)) or "")}
    return nodes - {""}


class NodeRouter:
    """Hands each committed write to the kubelets of the nodes it concerns (a pod bound there, a slice or an
    allocated claim there; before or after the write), deciding that once per write: with a watch of its own
    each of 144 kubelets judged every write of the cluster. Created by cdctl.sim.rack.cluster for its
    kubelets."""

    def __init__(self, store: ObjectStore) -> None:
        self._queues: dict[str, Watcher] = {}
        store.hub.listeners.append(self._route)

    def attach(self, node: str) -> Watcher:
        watcher = Watcher(None, None, None, droppable=False)
        self._queues[node] = watcher
        return watcher

    def detach(self, node: str) -> None:
        self._queues.pop(node, None)

    def _route(self, event: StoredEvent) -> None:
        nodes = concerned_nodes(event.obj)
        if event.previous is not None:
            nodes |= concerned_nodes(event.previous)
        for node in nodes:
            watcher = self._queues.get(node)
            if watcher is not None:
                watcher.queue.put_nowait(WatchEvent(event.type, event.obj, event.storage_key))
