"""Records what the controller observes and does as events in stream `domain/<uid>`, and folds them.

Informer observations are queued and written in batches (one `append_batch` per burst, each event carrying the
object's (uid, resourceVersion) so the store records it once), then folded into the `DomainView` and reported
to `on_change` (which enqueues the domain). The objects themselves are kept in an object cache for request
bodies. A write's response is ingested the same way (`observe_written`), so the controller reads its own
writes at once and the watch event that follows is a duplicate. Without a store the same events are folded
unrecorded. Used by cdctl.controller.manager (observations) and cdctl.controller.actions (actions).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from cdctl.controller.observations import domain_uid_of, to_event
from cdctl.controller.view import DomainView
from cdctl.domain.computedomains import domain_stream
from cdctl.domain.events import Actor, DomainEvent, NewEvent, ObservedVersion, decode
from cdctl.k8s.informer import Change, Observation, is_stale
from cdctl.k8s.resources import ResourceType
from cdctl.store.base import EventStore, StreamAppend

JsonObject = dict[str, Any]
CacheKey = tuple[str, str, str]  # plural, namespace, name


class Journal:
    def __init__(
        self, view: DomainView, store: EventStore | None, actor: Actor, on_change: Callable[[str], None]
    ) -> None:
        self.view = view
        self.store = store
        self.actor = actor
        self.on_change = on_change
        self._objects: dict[CacheKey, JsonObject] = {}
        self._versions: dict[str, str] = {}
        self._pending: list[tuple[Observation | None, asyncio.Future[None] | None]] = []
        self._wake = asyncio.Event()
        self.recorded = 0
        self.replayed = 0

    async def replay(self) -> int:
        """Fold the whole log into the view (at start, before the informers' first listing)."""
        if self.store is None:
            return 0
        position, count = 0, 0
        while True:
            events = await self.store.read_all(after=position, limit=5000)
            if not events:
                self.replayed = count
                return count
            for recorded in events:
                if recorded.stream.startswith("domain/"):
                    self.view.apply(decode(recorded))
                    count += 1
                position = recorded.position

    def cached(self, resource: ResourceType, namespace: str | None, name: str) -> JsonObject | None:
        """The last observed state of an object (the body a write starts from)."""
        return self._objects.get((resource.plural, namespace or "", name))

    def cached_of(self, resource: ResourceType) -> list[JsonObject]:
        return [obj for (plural, _, _), obj in self._objects.items() if plural == resource.plural]

    def observe(self, observation: Observation) -> None:
        """Queue an informer observation (recorded and folded by `run`)."""
        self._pending.append((observation, None))
        self._wake.set()

    async def observe_written(self, resource: ResourceType, obj: JsonObject, change: Change) -> None:
        """Ingest the object a write returned and wait until the view has it."""
        obj.setdefault("apiVersion", resource.api_version)
        obj.setdefault("kind", resource.kind)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((Observation(resource, change, obj), done))
        self._wake.set()
        await done

    async def flush(self) -> None:
        """Wait until everything observed so far is recorded and folded."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((None, done))
        self._wake.set()
        await done

    async def record(self, domain_uid: str, events: Sequence[DomainEvent]) -> None:
        """Append the controller's own events (intentions, outcomes) to the domain's stream and fold them."""
        await self._append([(domain_uid, event, None) for event in events])

    async def run(self) -> None:
        """Write queued observations in batches until cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, []
            try:
                await self._ingest(batch)
            finally:
                for _, done in batch:
                    if done is not None and not done.done():
                        done.set_result(None)

    def forget_missing(
        self, resource: ResourceType, namespace: str | None, present: Iterable[str], listed_at: str = ""
    ) -> None:
        """After a complete listing: objects the view still holds but the cluster no longer has are DELETED.

        Covers deletions that happened while the controller was down (replayed from the log, never listed).
        An object the view learnt of after the listing's resourceVersion `listed_at` (our own fresh write) is
        not judged by that listing.
        """
        present_uids = set(present)
        for state in self.view:
            for obj in list(state.objects.values()):
                if obj.kind != resource.kind or obj.uid in present_uids:
                    continue
                if listed_at and not is_stale(listed_at, obj.resource_version):
                    continue
                if namespace is not None and obj.namespace != namespace:
                    continue
                gone = {
                    "metadata": {
                        "name": obj.name,
                        "namespace": obj.namespace or None,
                        "uid": obj.uid,
                        "resourceVersion": obj.resource_version,
                        "labels": {"resource.nvidia.com/computeDomain": state.uid},
                    }
                }
                self._pending.append((Observation(resource, Change.DELETED, gone), None))
            if resource.kind == "ComputeDomain" and state.cd is not None and state.cd.uid not in present_uids:
                cd = state.cd
                gone = {
                    "metadata": {
                        "name": cd.name,
                        "namespace": cd.namespace,
                        "uid": cd.uid,
                        "resourceVersion": cd.resource_version,
                    }
                }
                self._pending.append((Observation(resource, Change.DELETED, gone), None))
        self._wake.set()

    async def _ingest(self, batch: list[tuple[Observation | None, asyncio.Future[None] | None]]) -> None:
        entries: list[tuple[str, DomainEvent, ObservedVersion | None]] = []
        for observation, _ in batch:
            if observation is None:
                continue
            key = (observation.resource.plural, observation.namespace or "", observation.name)
            if observation.change == Change.DELETED:
                current = self._objects.get(key)
                if current is not None and current.get("metadata", {}).get("uid") == observation.uid:
                    del self._objects[key]
                self._versions.pop(observation.uid, None)
            else:
                known = self._versions.get(observation.uid)
                if known is not None and is_stale(known, observation.resource_version):
                    continue
                self._versions[observation.uid] = observation.resource_version
                self._objects[key] = observation.obj
            uid = domain_uid_of(observation)
            if uid is None:
                continue
            observed = ObservedVersion(observation.uid, observation.resource_version)
            if observation.change == Change.DELETED:
                observed = ObservedVersion(observation.uid, f"deleted/{observation.resource_version}")
            entries.append((uid, to_event(observation, uid), observed))
        await self._append(entries)

    async def _append(self, entries: list[tuple[str, DomainEvent, ObservedVersion | None]]) -> None:
        if not entries:
            return
        if self.store is not None:
            streams: dict[str, list[NewEvent]] = {}
            for uid, event, observed in entries:
                streams.setdefault(domain_stream(uid), []).append(
                    NewEvent.of(event, actor=self.actor, observed=observed)
                )
            written = await self.store.append_batch(
                [StreamAppend(s, events) for s, events in streams.items()]
            )
            self.recorded += len(written)
            events = [decode(recorded) for recorded in written]
        else:
            events = [event for _, event, _ in entries]
        changed: dict[str, None] = {}
        for event in events:
            concerned = self.view.apply(event)
            if concerned is not None:
                changed[concerned] = None
        for concerned in changed:
            self.on_change(concerned)
