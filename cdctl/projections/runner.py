"""The projection runner: folds new events into views and commits them with their positions, exactly once.

On start each projection resumes from its tracked position: its in-memory view is rebuilt from the latest
snapshot at or before that position plus the events between (not re-persisted), so start-up time is
bounded by the snapshot interval, not the log's length. On a compacted log that snapshot is at or after the
horizon (the compaction kept one at it); a projection without one is refused rather than folded from a log
missing its beginning. Then batches of events are folded against an
overlay and committed through the sink in one transaction; the overlay joins the live view only after the
commit succeeds, so a failure between fold and commit applies nothing and a retry applies each event once.
Components (plugin, controller, daemon) run one runner over their log and read `view(name)`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence

from cdctl.domain.errors import StoreError
from cdctl.domain.events import RecordedEvent
from cdctl.projections.base import Change, Key, Projection, Row, merge_change
from cdctl.projections.sinks import ViewSink, encode_snapshot, sink_for
from cdctl.store.base import EventStore
from cdctl.store.sqlite import SqliteEventStore

_DELETED: Row = {}


class Overlay(Mapping[Key, Row]):
    """Uncommitted changes over a committed view (a deleted key reads as absent)."""

    def __init__(self, base: Mapping[Key, Row]) -> None:
        self.base = base
        self.changes: dict[Key, Row] = {}

    def __getitem__(self, key: Key) -> Row:
        row = self.changes.get(key)
        if row is None:
            return self.base[key]
        if row is _DELETED:
            raise KeyError(key)
        return row

    def __iter__(self) -> Iterator[Key]:
        yield from (k for k, v in self.changes.items() if v is not _DELETED)
        yield from (k for k in self.base if k not in self.changes)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def apply(self, change: Change) -> None:
        if change.partial:
            return  # a partial change only ever touches the persisted table
        if change.retain:
            self.changes[change.key] = _DELETED if change.row is None else change.row
        elif change.key in self.base or change.key in self.changes:
            self.changes[change.key] = _DELETED


def fold_into(projection: Projection, view: dict[Key, Row], events: Sequence[RecordedEvent]) -> None:
    """Fold events into a view in place (replay and resume: nothing is persisted)."""
    for event in events:
        if not projection.wants(event):
            continue
        for change in projection.fold(view, event):
            if change.partial:
                continue
            if change.retain and change.row is not None:
                view[change.key] = change.row
            elif change.key in view:
                del view[change.key]


class ProjectionRunner:
    def __init__(
        self,
        store: EventStore,
        projections: Sequence[Projection],
        sink: ViewSink | None = None,
        snapshot_every: int = 50_000,
        batch_size: int = 2_000,
    ) -> None:
        self.store = store
        self.projections = list(projections)
        self.sink = sink if sink is not None else sink_for(store)
        self.snapshot_every = snapshot_every
        self.batch_size = batch_size
        self.views: dict[str, dict[Key, Row]] = {p.name: {} for p in self.projections}
        self.positions: dict[str, int] = {p.name: 0 for p in self.projections}

    def view(self, name: str) -> Mapping[Key, Row]:
        return self.views[name]

    @property
    def position(self) -> int:
        return min(self.positions.values(), default=self.store.head())

    async def start(self) -> None:
        """Resume every projection from its tracked position (snapshot + tail, nothing re-persisted)."""
        tracked = await self.sink.load_positions()
        horizon = await self.store.horizon() if isinstance(self.store, SqliteEventStore) else None
        starts: dict[str, int] = {}
        for projection in self.projections:
            position = tracked.get(projection.name, 0)
            snapshot = await self.sink.load_snapshot(projection.name, position)
            if snapshot is not None:
                starts[projection.name] = snapshot[0]
                self.views[projection.name] = dict(snapshot[1])
            else:
                starts[projection.name] = 0
            if horizon is not None and starts[projection.name] < horizon.position:
                raise StoreError(
                    f"projection {projection.name}: no snapshot at or after the log's horizon"
                    f" {horizon.position} (events up to it were compacted): it cannot be rebuilt"
                )
            self.positions[projection.name] = position
        after = min(starts.values(), default=0)
        target = max(self.positions.values(), default=0)
        while after < target:
            events = await self.store.read_all(after=after, limit=self.batch_size)
            if not events:
                break
            for projection in self.projections:
                lo, hi = starts[projection.name], self.positions[projection.name]
                fold_into(
                    projection, self.views[projection.name], [e for e in events if lo < e.position <= hi]
                )
            after = events[-1].position

    async def catch_up(self) -> int:
        """Apply every event committed before the call; return the position reached.

        Events committed meanwhile wait for the next call: chasing them would commit a view transaction per
        append while appends keep coming (defeating `run`'s batch pause) and never return under steady load.
        """
        target = self.store.head()
        while self.position < target:
            events = await self.store.read_all(after=self.position, limit=self.batch_size)
            if not events:
                break
            await self.apply(events)
        return self.position

    async def apply(self, events: Sequence[RecordedEvent]) -> None:
        overlays: dict[str, Overlay] = {}
        persisted: list[tuple[Projection, list[Change]]] = []
        positions: dict[str, int] = {}
        snapshots: dict[str, tuple[int, str]] = {}
        for projection in self.projections:
            name, start = projection.name, self.positions[projection.name]
            overlay = overlays[name] = Overlay(self.views[name])
            last: dict[Key, Change] = {}
            for event in events:
                if event.position <= start or not projection.wants(event):
                    continue
                for change in projection.fold(overlay, event):
                    overlay.apply(change)
                    if change.persist:
                        last[change.key] = merge_change(last.get(change.key), change)
            persisted.append((projection, list(last.values())))
            end = max(start, events[-1].position)
            positions[name] = end
            if end // self.snapshot_every > start // self.snapshot_every:
                snapshots[name] = (end, encode_snapshot(self._merged(name, overlay, copy=True)))
        await self.sink.commit(persisted, positions, snapshots)
        for name, overlay in overlays.items():  # only now, after the commit, do the views move
            self._merged(name, overlay, copy=False)
        self.positions.update(positions)

    def _merged(self, name: str, overlay: Overlay, copy: bool) -> dict[Key, Row]:
        view = dict(self.views[name]) if copy else self.views[name]
        for key, row in overlay.changes.items():
            if row is _DELETED:
                view.pop(key, None)
            else:
                view[key] = row
        return view

    async def run(self, batch_pause: float = 0.0) -> None:
        """Follow the log until cancelled: catch up, then wait for the next commit (no polling).

        `batch_pause` waits a little after each wake-up, so a burst of appends shares one view transaction.
        """
        while True:
            position = await self.catch_up()
            await self.store.wait_beyond(position)
            if batch_pause:
                await asyncio.sleep(batch_pause)
