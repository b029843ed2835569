"""Records what the controller observes and does as events in stream `domain/<uid>`, and projects them.

Informer observations are queued and written in batches (one `append_batch` per burst, each event carrying the
object's (uid, resourceVersion) so the store records it once). Each batch the store wrote is folded into the
controller's projection (cdctl.controller.view, the pure fold of the cdctl.projections contract) before
`on_change` enqueues the domains concerned; observations of one object all pass through the one ingest
loop, so they fold in log order. With a log file, the shared ProjectionRunner keeps its `domain_history`
table (for `cdctl sql` and `cdctl verify`) exactly once, in the background, from the events as appended.
The objects themselves are kept in an object cache for request bodies. A write's response is ingested the
same way (`observe_written`), with the write's outcome in the same append, so the controller reads its own
writes at once and the watch event that follows is a duplicate (whose object then replaces the answer's in
the cache: the informer holds that copy anyway, so one copy of each object is kept); a write that removed
the last finalizer of an object being deleted is ingested as its deletion (the API server deletes it in that
same write), so the watch's MODIFIED and DELETED that follow are both duplicates. Without a log file the
events go to an in-memory store (tests and demos: it only grows). With a log file the projection is
snapshotted every `SNAPSHOT_EVERY` events, and `replay` starts from the latest snapshot.
Used by cdctl.controller.manager (observations) and cdctl.controller.actions (actions).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from cdctl.asynctasks import wait_at_most
from cdctl.controller.channelview import ChannelBook, ChannelProjection
from cdctl.controller.observations import domain_uid_of, kept_form, to_event
from cdctl.controller.view import OBSERVATIONS, DomainProjection, DomainView
from cdctl.domain.computedomains import domain_stream
from cdctl.domain.events import Actor, DomainEvent, NewEvent, ObservedVersion, RecordedEvent
from cdctl.k8s.informer import Change, Observation, is_stale
from cdctl.k8s.resources import ResourceType
from cdctl.projections.base import Key, Projection, Row
from cdctl.projections.lifecycle import DomainHistory
from cdctl.projections.runner import ProjectionRunner, fold_into
from cdctl.projections.sinks import SqliteSink, encode_snapshot
from cdctl.store.base import EventStore, StreamAppend
from cdctl.store.memory import InMemoryEventStore
from cdctl.store.sqlite import SqliteEventStore

JsonObject = dict[str, Any]
HISTORY_QUIET_S = 1.0
SNAPSHOT_EVERY = 50_000
TOMBSTONES = 10_000
HISTORY_BATCH = 2_000  # appended events kept for the history table: written once this many wait
CacheKey = tuple[str, str, str]  # plural, namespace, name


@dataclass(slots=True)
class _Pending:
    """An observation waiting to be recorded, with its waiter and the outcome of the write it answers."""

    observation: Observation | None
    done: asyncio.Future[None] | None = None
    outcome: tuple[str, DomainEvent] | None = None  # (domain uid, event), appended just before it
    events: Sequence[tuple[str, DomainEvent]] = ()  # (domain uid, event) recorded in order (`record_queued`)


class Journal:
    def __init__(self, store: EventStore | None, actor: Actor, on_change: Callable[[str], None]) -> None:
        self.store: EventStore = store if store is not None else InMemoryEventStore()
        self.projection = DomainProjection()
        self.rows: dict[Key, Row] = {}
        self.view = DomainView(lambda: self.rows)
        # Under channel isolation: per clique, who holds which channel (empty otherwise: nothing to fold).
        self.channel_projection = ChannelProjection()
        self.channel_rows: dict[Key, Row] = {}
        self.channels = ChannelBook(lambda: self.channel_rows)
        # The queryable history of the log file (`cdctl sql`, `cdctl verify`), kept by the shared runner.
        self._sink = SqliteSink(self.store) if isinstance(self.store, SqliteEventStore) else None
        self._snapshot_at = 0
        self.from_snapshot = 0
        self.history = (
            ProjectionRunner(self.store, [DomainHistory()]) if isinstance(store, SqliteEventStore) else None
        )
        self.actor = actor
        self.on_change = on_change
        self._objects: dict[CacheKey, JsonObject] = {}
        self._versions: dict[str, str] = {}
        self._tombstones: OrderedDict[str, str] = OrderedDict()  # uid -> resourceVersion of its deletion
        # object uid -> the domains whose views hold it: an object that leaves a domain (its label removed or
        # changed, as a Node's at teardown) is recorded as gone from it (`_left_domains`)
        self._holders: dict[str, set[str]] = {}
        # (object uid, domain uid) recorded as gone that way: the watch's own DELETED for the same change
        # (an object leaving a label selection comes as it was before, with the old label) is a duplicate
        self._left: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._pending: list[_Pending] = []
        self._wake = asyncio.Event()
        self.recorded = 0
        self._last_append = 0.0
        self._unrecorded: list[RecordedEvent] = []  # appended here, not yet in the history table
        self._history_due = asyncio.Event()
        self.replayed = 0

    async def replay(self) -> int:
        """Rebuild the projections before the informers' first listing: each from its latest snapshot, then
        the log after it. Returns the log position reached."""
        if self.history is not None:
            await self.history.start()
        starts = {}
        for projection, rows in self._projections():
            starts[projection.name] = await self._restore(projection, rows)
        self.from_snapshot = starts[self.projection.name]
        position = min(starts.values())
        while events := await self.store.read_all(after=position, limit=5000):
            for projection, rows in self._projections():
                start = starts[projection.name]
                fold_into(projection, rows, [e for e in events if e.position > start] if start else events)
            position = events[-1].position
        self.replayed = self._snapshot_at = max(position, *starts.values())
        self._holders = {}
        for state in self.view:
            for obj in state.objects.values():
                self._holders.setdefault(obj.uid, set()).add(state.uid)
        return self.replayed

    def _projections(self) -> list[tuple[Projection, dict[Key, Row]]]:
        return [(self.projection, self.rows), (self.channel_projection, self.channel_rows)]

    async def _restore(self, projection: Projection, rows: dict[Key, Row]) -> int:
        """Load `projection`'s latest snapshot into `rows`; the position it stands for (0: none)."""
        if self._sink is None:
            return 0
        tracked = (await self._sink.load_positions()).get(projection.name, 0)
        snapshot = await self._sink.load_snapshot(projection.name, tracked)
        if snapshot is None:
            return 0
        position, restored = snapshot
        rows.clear()
        rows.update(restored)
        return position

    async def _snapshot_if_due(self, position: int) -> None:
        """Every `SNAPSHOT_EVERY` events, store the projection with its position (bounds start-up time)."""
        if self._sink is None or position // SNAPSHOT_EVERY <= self._snapshot_at // SNAPSHOT_EVERY:
            return
        self._snapshot_at = position
        views = self._projections()
        await self._sink.commit(
            [],
            {p.name: position for p, _ in views},
            {p.name: (position, encode_snapshot(rows)) for p, rows in views},
        )

    def cached(self, resource: ResourceType, namespace: str | None, name: str) -> JsonObject | None:
        """The last observed state of an object (the body a write starts from)."""
        return self._objects.get((resource.plural, namespace or "", name))

    def cached_of(self, resource: ResourceType) -> list[JsonObject]:
        return [obj for (plural, _, _), obj in self._objects.items() if plural == resource.plural]

    def observe(self, observation: Observation) -> None:
        """Queue an informer observation (recorded and folded by `run`)."""
        self._pending.append(_Pending(observation))
        self._wake.set()

    async def observe_written(
        self,
        resource: ResourceType,
        obj: JsonObject,
        change: Change,
        outcome: tuple[str, DomainEvent] | None = None,
        *,
        wait: bool = True,
    ) -> None:
        """Ingest the object a write returned and wait until the view has it (unless not `wait`: then a
        later `record_queued` or `flush` waits for it). `outcome` (domain uid, event), the write's own
        outcome, is appended just before it, in the same append."""
        obj = kept_form(resource.kind, obj)
        obj.setdefault("apiVersion", resource.api_version)
        obj.setdefault("kind", resource.kind)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(Observation(resource, change, obj), done, outcome))
        self._wake.set()
        if wait:
            await done

    async def flush(self) -> None:
        """Wait until everything observed so far is recorded and folded."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(None, done))
        self._wake.set()
        await done

    async def record(self, domain_uid: str, events: Sequence[DomainEvent]) -> None:
        """Append the controller's own events (intentions, outcomes) to the domain's stream and fold them."""
        await self._append([(domain_uid, event, None) for event in events])

    async def record_in(self, stream: str, events: Sequence[DomainEvent]) -> None:
        """Append the controller's own events to a stream of no domain (`channels/<clique>`) and fold them."""
        await self._append_streams({stream: [NewEvent.of(event, actor=self.actor) for event in events]})

    async def record_queued(self, domain_uid: str, events: Sequence[DomainEvent]) -> None:
        """`record`, in order behind what was queued before it (a write's outcome not waited for), in the
        same append: one commit for the last write's outcome and the next write's intention."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(None, done, events=[(domain_uid, event) for event in events]))
        self._wake.set()
        await done

    async def run(self) -> None:
        """Write queued observations in batches, and keep the history table, until cancelled."""
        async with asyncio.TaskGroup() as group:
            if self.history is not None:
                group.create_task(self._keep_history(self.history))
            group.create_task(self._write_observations())

    async def _keep_history(self, history: ProjectionRunner) -> None:
        """Follow the log with the history table when the journal has been quiet for `HISTORY_QUIET_S`, or
        once `HISTORY_BATCH` events wait.

        Keeping the table costs about as much CPU per event as deciding on it, so a burst (a thousand domains
        created at once) is handled first and recorded in the table a little later. The events this journal
        appended are folded as they were returned (reading them back from the file cost as much again);
        what it did not append itself, or no longer holds, is read back.
        """
        while True:
            await self.store.wait_beyond(history.position)
            await self._quiet_or_due()
            self._history_due.clear()
            held, self._unrecorded = self._unrecorded, []
            held = sorted((e for e in held if e.position > history.position), key=lambda e: e.position)
            if held and all(e.position == history.position + 1 + i for i, e in enumerate(held)):
                await history.apply(held)
            else:
                await history.catch_up()

    async def _quiet_or_due(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._history_due.is_set():
            quiet_for = loop.time() - self._last_append
            if quiet_for >= HISTORY_QUIET_S:
                return
            with contextlib.suppress(TimeoutError):
                await wait_at_most(self._history_due.wait(), HISTORY_QUIET_S - quiet_for)

    async def _write_observations(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, []
            try:
                await self._ingest(batch)
            finally:
                for pending in batch:
                    if pending.done is not None and not pending.done.done():
                        pending.done.set_result(None)

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
                gone = _gone(resource, obj.name, obj.namespace, obj.uid, obj.resource_version, state.uid)
                self._pending.append(_Pending(gone))
            if resource.kind == "ComputeDomain" and state.cd is not None and state.cd.uid not in present_uids:
                cd = state.cd
                meta = {"name": cd.name, "namespace": cd.namespace, "uid": cd.uid,
                        "resourceVersion": cd.resource_version}  # fmt: skip
                self._pending.append(_Pending(Observation(resource, Change.DELETED, {"metadata": meta})))
        self._wake.set()

    async def _ingest(self, batch: list[_Pending]) -> None:
        entries: list[tuple[str, DomainEvent, ObservedVersion | None]] = []
        for pending in batch:
            observation = pending.observation
            entries.extend((uid, event, None) for uid, event in pending.events)
            if pending.outcome is not None:
                entries.append((*pending.outcome, None))
            if observation is None:
                continue
            key = (observation.resource.plural, observation.namespace or "", observation.name)
            if observation.change == Change.DELETED:
                if observation.uid in self._tombstones:
                    continue  # its deletion is recorded already (a write's answer said so before the watch)
                current = self._objects.get(key)
                if current is not None and current.get("metadata", {}).get("uid") == observation.uid:
                    del self._objects[key]
                self._versions.pop(observation.uid, None)
                self._tombstones[observation.uid] = observation.resource_version
                if len(self._tombstones) > TOMBSTONES:
                    self._tombstones.popitem(last=False)
            else:
                known = self._versions.get(observation.uid) or self._tombstones.get(observation.uid)
                if known is not None and is_stale(known, observation.resource_version):
                    if known == observation.resource_version:
                        self._share(key, observation)
                    continue  # a duplicate, or a write's response arriving after the object's deletion
                self._versions[observation.uid] = observation.resource_version
                self._objects[key] = observation.obj
            uid = domain_uid_of(observation)
            for left in self._left_domains(observation, uid):
                gone = _gone(observation.resource, observation.name, observation.namespace, observation.uid,
                             observation.resource_version, left)  # fmt: skip
                entries.append((left, to_event(gone, left), None))
                self._left[(observation.uid, left)] = observation.resource_version
                if len(self._left) > TOMBSTONES:
                    self._left.popitem(last=False)
            if uid is None:
                continue
            if (
                observation.change == Change.DELETED
                and self._left.pop((observation.uid, uid), None) is not None
            ):
                continue  # recorded as gone from this domain already, when its label went
            observed = ObservedVersion(observation.uid, observation.resource_version)
            if observation.change == Change.DELETED:
                observed = ObservedVersion(observation.uid, f"deleted/{observation.resource_version}")
            entries.append((uid, to_event(observation, uid), observed))
        await self._append(entries)

    def _left_domains(self, observation: Observation, uid: str | None) -> list[str]:
        """The domains an object no longer belongs to: its domain label was removed or changed (a Node at
        teardown, seen in the answer to our own PATCH, or moved on to the next domain). Each view would
        hold the object for good, and the domain's row with it, long after the domain is gone (found by
        bench/soak.py: a controller restarted after 2,600 lifecycles replayed 2,562 rows of deleted
        domains, 50 MiB)."""
        if observation.resource.kind == "ComputeDomain":
            return []
        holders = self._holders.pop(observation.uid, set())
        if uid is not None and observation.change != Change.DELETED:
            self._holders[observation.uid] = {uid}
        return sorted(holders - {uid}) if uid is not None else sorted(holders)

    def _share(self, key: CacheKey, duplicate: Observation) -> None:
        """The watch's copy of the version cached from a write's answer: cache the watch's (the informer
        keeps it anyway), so one copy of each object is held, not two."""
        cached = self._objects.get(key)
        if cached is None or cached is duplicate.obj:
            return
        if (cached.get("metadata") or {}).get("uid") != duplicate.uid:
            return
        duplicate.obj.setdefault("apiVersion", duplicate.resource.api_version)
        duplicate.obj.setdefault("kind", duplicate.resource.kind)
        self._objects[key] = duplicate.obj

    async def _append(self, entries: list[tuple[str, DomainEvent, ObservedVersion | None]]) -> None:
        if not entries:
            return
        streams: dict[str, list[NewEvent]] = {}
        for uid, event, observed in entries:
            streams.setdefault(domain_stream(uid), []).append(
                NewEvent.of(event, actor=self.actor, observed=observed)
            )
        await self._append_streams(streams)

    async def _append_streams(self, streams: dict[str, list[NewEvent]]) -> None:
        self._last_append = asyncio.get_running_loop().time()
        written = await self.store.append_batch([StreamAppend(s, events) for s, events in streams.items()])
        self.recorded += len(written)
        if self.history is not None and written:
            if len(self._unrecorded) >= 2 * HISTORY_BATCH:
                self._unrecorded.clear()  # the table fell behind: it reads these back from the file
            self._unrecorded.extend(written)
            if len(self._unrecorded) >= HISTORY_BATCH:
                self._history_due.set()
        fold_into(self.projection, self.rows, written)
        fold_into(self.channel_projection, self.channel_rows, written)
        if written:
            await self._snapshot_if_due(written[-1].position)
        changed = list(dict.fromkeys(e.stream[len("domain/") :] for e in written if e.type in OBSERVATIONS))
        for uid in changed:
            self.on_change(uid)


def _gone(
    resource: ResourceType, name: str, namespace: str | None, uid: str, resource_version: str, domain_uid: str
) -> Observation:
    """A deletion of the object as domain `domain_uid` sees it (labelled with it, so it lands in its view)."""
    meta = {
        "name": name,
        "namespace": namespace or None,
        "uid": uid,
        "resourceVersion": resource_version,
        "labels": {"resource.nvidia.com/computeDomain": domain_uid},
    }
    return Observation(resource, Change.DELETED, {"metadata": meta})
