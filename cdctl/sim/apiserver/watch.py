"""Watch machinery of the simulated API server: a bounded event history and the watchers fed from it.

The object store (cdctl.sim.apiserver.store) appends one `StoredEvent` per write; the HTTP watch handler and
the in-process stand-ins open a `Watcher` from a resourceVersion. An RV older than the
retained window raises `Gone` (410).
Selector changes are translated as the API server does: an object entering a watcher's selection arrives as
ADDED, one leaving it as DELETED carrying the object as it was before (still matching the selection) with
the event's resourceVersion (the watch cache's cache_watcher.go does the same).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cdctl.sim.apiserver.errors import Gone

ObjectMatcher = Callable[[Mapping[str, Any]], bool]


@dataclass(frozen=True)
class StoredEvent:
    """One committed write: the object after it (before it, for DELETED) and the object before it.

    Both are the store's own objects, shared by every watcher: read them, never change them.

    `encoded` holds the watch lines already written for it, by (event type, served version), so that the
    same event going to many watches of one version is converted and serialized once."""

    resource_version: int
    type: str  # ADDED, MODIFIED, DELETED
    storage_key: tuple[str, str]  # (group, plural)
    namespace: str
    obj: dict[str, Any]
    previous: dict[str, Any] | None
    encoded: dict[tuple[str, str], bytes] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class WatchEvent:
    type: str
    obj: dict[str, Any]
    storage_key: tuple[str, str]
    encoded: dict[tuple[str, str], bytes] | None = field(default=None, compare=False, repr=False)


def _left_selection(event: StoredEvent) -> dict[str, Any]:
    """What a watch gets for an object that left its selection: the object before the write (so its labels
    still say why it was watched) at the write's resourceVersion. The lines are cached per event under
    DELETED, which only this translation produces for a MODIFIED event."""
    assert event.previous is not None
    meta = {**(event.previous.get("metadata") or {}), "resourceVersion": str(event.resource_version)}
    return {**event.previous, "metadata": meta}


class Watcher:
    """A queue of events for one watch; `None` in the queue means the server closed the watch."""

    def __init__(
        self,
        storage_key: tuple[str, str] | None,
        namespace: str | None,
        matcher: ObjectMatcher | None,
        droppable: bool = True,
    ) -> None:
        self.droppable = droppable
        self.storage_key = storage_key
        self.namespace = namespace
        self.matcher = matcher
        self.queue: asyncio.Queue[WatchEvent | None] = asyncio.Queue()
        self.closed = False

    def _selects(self, obj: Mapping[str, Any] | None) -> bool:
        return obj is not None and (self.matcher is None or self.matcher(obj))

    def offer(self, event: StoredEvent) -> None:
        if self.closed:
            return
        if self.storage_key is not None and event.storage_key != self.storage_key:
            return
        if self.namespace is not None and event.namespace != self.namespace:
            return
        now = self._selects(event.obj)
        before = self._selects(event.previous) if event.type == "MODIFIED" else now
        obj = event.obj
        if event.type == "MODIFIED" and now and not before:
            kind = "ADDED"
        elif event.type == "MODIFIED" and before and not now:
            kind = "DELETED"
            obj = _left_selection(event)
        elif now:
            kind = event.type
        else:
            return
        self.queue.put_nowait(WatchEvent(kind, obj, event.storage_key, event.encoded))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(None)

    async def next(self) -> WatchEvent | None:
        return await self.queue.get()


class WatchHub:
    """The retained history window plus the open watchers."""

    def __init__(self, window: int) -> None:
        self.window = window
        self._history: deque[StoredEvent] = deque()
        self._watchers: set[Watcher] = set()
        # By the kind they follow (None: every kind): a write is offered only to the watches of its kind. With
        # a watch or three per node, offering each write to every watch was a pass over hundreds per write.
        self._by_kind: dict[tuple[str, str] | None, set[Watcher]] = {}
        self.compacted_resource_version = 0
        # Called with every event, before the watchers: in-process routers
        # (cdctl.sim.node.kubelet.NodeRouter).
        self.listeners: list[Callable[[StoredEvent], None]] = []

    def publish(self, event: StoredEvent) -> None:
        self._history.append(event)
        while len(self._history) > self.window:
            dropped = self._history.popleft()
            self.compacted_resource_version = dropped.resource_version
        for listener in self.listeners:
            listener(event)
        for kind in (event.storage_key, None):
            for watcher in list(self._by_kind.get(kind, ())):
                watcher.offer(event)

    def compact(self) -> None:
        """Forget all history (as etcd compaction does); older watches then get 410."""
        if self._history:
            self.compacted_resource_version = self._history[-1].resource_version
        self._history.clear()

    def open(
        self,
        storage_key: tuple[str, str] | None,
        namespace: str | None,
        matcher: ObjectMatcher | None,
        since: int | None,
        droppable: bool = True,
    ) -> Watcher:
        """A watcher receiving every event after `since` (None: only future events).

        In-process stand-ins open theirs with `droppable=False`, so fault injection ends only client watches.
        """
        watcher = Watcher(storage_key, namespace, matcher, droppable)
        if since is not None:
            if since < self.compacted_resource_version:
                raise Gone(f"too old resource version: {since} ({self.compacted_resource_version + 1})")
            for event in self._history:
                if event.resource_version > since:
                    watcher.offer(event)
        self._watchers.add(watcher)
        self._by_kind.setdefault(storage_key, set()).add(watcher)
        return watcher

    def _forget(self, watcher: Watcher) -> None:
        self._watchers.discard(watcher)
        self._by_kind.get(watcher.storage_key, set()).discard(watcher)

    def release(self, watcher: Watcher) -> None:
        self._forget(watcher)
        watcher.closed = True

    def close_all(self) -> int:
        """End every open client watch (a fault, or a restart); returns how many were open."""
        watchers = [w for w in self._watchers if w.droppable]
        for watcher in watchers:
            self._forget(watcher)
            watcher.close()
        return len(watchers)

    @property
    def open_count(self) -> int:
        return len(self._watchers)
