"""Compacting a component's event log under its retention policy: horizon, snapshot, removal, reclaim.

`compact(store, policy, projections)` is what a component's retention loop (cdctl.projections.retention)
runs. It finishes a compaction a crash left pending, then:
1. reads the log's facts (first and last position, live bytes, the prefix older than the age bound, the
   positions the persisted projections have folded) and chooses the horizon (cdctl.domain.retention);
2. folds each projection the component keeps (the lifecycle views, and the state it resumes from: the
   plugin's claim book, the controller's domain view) from its latest snapshot up to the horizon, in chunks
   so the event loop keeps serving;
3. appends LogCompactionStarted and, in the same transaction, the record, the horizon snapshots and the
   tracked positions (cdctl.store.compaction.record);
4. removes the events up to the horizon in bounded batches, then the table rows only they explained (a row
   the horizon view still holds stays), appends LogCompacted, and gives free pages back a few at a time.
Every step is a job of the single writer, so an append waits at most one batch; batches are sized to hold
the writer about BATCH_TARGET_S (`Batches`: halved after a slow one, doubled after a quick one, within a
cap). Called by the retention loop, the tests and bench/compaction.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from cdctl.domain.errors import StoreError
from cdctl.domain.events import Actor, NewEvent
from cdctl.domain.retention import (
    COMPACTION_STREAM,
    LogCompacted,
    LogCompactionStarted,
    LogFacts,
    RetentionPolicy,
    choose_horizon,
)
from cdctl.projections.base import Key, Projection, Row
from cdctl.projections.runner import fold_into
from cdctl.projections.sinks import SqliteSink, decode_snapshot, encode_snapshot
from cdctl.store import compaction
from cdctl.store.base import StreamAppend
from cdctl.store.sealing import format_time
from cdctl.store.sqlite import SqliteEventStore
from cdctl.store.writer import SyncFn

BATCH_TARGET_S = 0.03  # how long one removal batch should hold the writer (and so delay an append)
BATCH_EVENTS = 2_000  # at most this many events removed per writer transaction
BATCH_ROWS = 2_000  # at most this many table rows removed per writer transaction
RECLAIM_PAGES = 256  # at most this many pages given back per writer transaction (1 MiB at 4 KiB pages)
FOLD_CHUNK = 500  # events folded between two yields to the event loop
ACTOR = Actor("compaction")


@dataclass
class CompactionReport:
    """What one compaction did (also recorded in its LogCompacted event)."""

    record_position: int
    first: int
    horizon: int
    reason: str
    resumed: bool = False
    events_removed: int = 0
    rows_removed: dict[str, int] = field(default_factory=dict)
    observations_removed: int = 0
    streams_ended: int = 0
    batches: int = 0
    longest_batch_s: float = 0.0
    plan_s: float = 0.0  # choosing the horizon and folding the snapshot kept there (from the start)
    removed_s: float = 0.0  # events and rows removed, LogCompacted appended (from the start)
    duration_s: float = 0.0  # all of it, space given back included
    live_bytes_before: int = 0
    live_bytes_after: int = 0
    file_bytes_after: int = 0  # the file and its WAL
    pages_reclaimed: int = 0
    longest_reclaim_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "horizon": self.horizon, "first": self.first, "reason": self.reason, "resumed": self.resumed,
            "events_removed": self.events_removed, "rows_removed": self.rows_removed,
            "observations_removed": self.observations_removed, "streams_ended": self.streams_ended,
            "batches": self.batches, "longest_batch_s": round(self.longest_batch_s, 4),
            "duration_s": round(self.duration_s, 3), "live_bytes_before": self.live_bytes_before,
            "live_bytes_after": self.live_bytes_after, "file_bytes_after": self.file_bytes_after,
        }  # fmt: skip


class Batches:
    """The size of the next removal batch: halved after one that held the writer longer than the target,
    doubled (up to `cap`) after one that took under a third of it."""

    def __init__(self, cap: int, target_s: float = BATCH_TARGET_S) -> None:
        self.cap = max(cap, 1)
        self.size = min(self.cap, 128)
        self.target_s = target_s

    def took(self, seconds: float) -> None:
        if seconds > self.target_s:
            self.size = max(self.size // 2, 1)
        elif seconds < self.target_s / 3:
            self.size = min(self.size * 2, self.cap)


def _persisted(projections: Sequence[Projection], tables: set[str]) -> list[Projection]:
    """The projections whose table exists in the log: their rows are kept exactly once by a runner."""
    return [p for p in projections if p.table in tables]


async def _tables(store: SqliteEventStore) -> set[str]:
    rows = await store.query("SELECT name FROM sqlite_master WHERE type = 'table'")
    return {str(row[0]) for row in rows}


async def _facts(
    store: SqliteEventStore, policy: RetentionPolicy, persisted: Sequence[Projection], now: datetime
) -> tuple[LogFacts, compaction.Horizon | None]:
    cutoff = format_time(now - timedelta(seconds=policy.age_s)) if policy.age_s > 0 else ""
    names = [p.name for p in persisted]

    def read(db: Any) -> tuple[LogFacts, compaction.Horizon | None]:
        horizon = compaction.read_horizon(db)
        first = compaction.first_held(db, horizon)
        head = int(db.execute("SELECT COALESCE(MAX(position), 0) FROM events").fetchone()[0])
        tracked = compaction.tracked_positions(db)
        cap = min((tracked.get(name, 0) for name in names), default=head)
        aged = compaction.aged_until(db, first, head, cutoff) if cutoff else 0
        return LogFacts(first, head, compaction.live_bytes(db), aged, cap), horizon

    return await store.on_reader(read)


async def views_at(
    store: SqliteEventStore, projections: Sequence[Projection], target: int
) -> dict[str, dict[Key, Row]]:
    """Each projection's view after position `target`: its latest snapshot then the events up to `target`."""
    sink = SqliteSink(store)
    horizon = await store.horizon()
    bases: dict[str, int] = {}
    views: dict[str, dict[Key, Row]] = {}
    for projection in projections:
        snapshot = await sink.load_snapshot(projection.name, target)
        if snapshot is None and horizon is not None:
            raise StoreError(
                f"{store.path}: projection {projection.name} has no snapshot at or after the horizon"
                f" {horizon.position}: its state before it cannot be folded again"
            )
        bases[projection.name], rows = snapshot if snapshot is not None else (0, [])
        views[projection.name] = projection.restore_view(rows)
    after = min(bases.values(), default=target)
    while after < target:
        events = [e for e in await store.read_all(after=after, limit=FOLD_CHUNK) if e.position <= target]
        if not events:
            break
        for projection in projections:
            base = bases[projection.name]
            fold_into(projection, views[projection.name], [e for e in events if e.position > base])
        after = events[-1].position
        await asyncio.sleep(0)  # a chunk at a time: the component keeps serving meanwhile
    return views


async def compact(
    store: SqliteEventStore,
    policy: RetentionPolicy,
    projections: Sequence[Projection],
    *,
    actor: Actor = ACTOR,
    now: datetime | None = None,
    batch_events: int = BATCH_EVENTS,
    batch_rows: int = BATCH_ROWS,
) -> CompactionReport | None:
    """Compact the log if the policy says so (finishing a pending compaction first); None if nothing due."""
    started = time.perf_counter()
    tables = await _tables(store)
    persisted = _persisted(projections, tables)
    now = now or datetime.now(UTC)
    pending = await store.horizon()
    if pending is not None and pending.pending:
        report = CompactionReport(pending.record_position, pending.first_position, pending.position,
                                  pending.reason, resumed=True)  # fmt: skip
        return await _remove(store, persisted, pending, report, actor, started, batch_events, batch_rows)
    facts, previous = await _facts(store, policy, persisted, now)
    horizon, reason = choose_horizon(facts, policy)
    if not horizon:
        return None
    views = await views_at(store, projections, horizon)
    anchor, latest = await store.on_reader(lambda db: compaction.removed_facts(db, facts.first, horizon))
    if previous is not None:
        latest = max(latest, previous.recorded_at)
    plan = compaction.Plan(
        previous=previous.record_position if previous is not None else 0,
        first=facts.first,
        horizon=horizon,
        anchor_hash=anchor,
        horizon_recorded_at=latest,
        reason=reason,
        snapshots={p.name: encode_snapshot(p.snapshot_view(views[p.name])) for p in projections},
        bump=tuple(p.name for p in projections if p not in persisted),
    )
    record = LogCompactionStarted(
        first_position=plan.first, last_position=horizon, events=horizon - plan.first + 1,
        anchor_hash=anchor, horizon_recorded_at=latest, reason=reason, retention_age_s=policy.age_s,
        retention_size_bytes=policy.size_bytes, live_bytes=facts.live_bytes, snapshot_digest=plan.digest,
        snapshots=sorted(plan.snapshots),
    )  # fmt: skip
    stamp = format_time(datetime.now(UTC))
    _, recorded = await store.sync(
        [StreamAppend(COMPACTION_STREAM, [NewEvent.of(record, actor=actor)])],
        lambda db, events: compaction.record(db, events, plan, stamp),
    )
    report = CompactionReport(
        recorded.record_position, plan.first, horizon, reason, live_bytes_before=facts.live_bytes
    )
    report.plan_s = time.perf_counter() - started
    return await _remove(store, persisted, recorded, report, actor, started, batch_events, batch_rows)


async def _timed_sync(store: SqliteEventStore, report: CompactionReport, batches: Batches, fn: Any) -> Any:
    began = time.perf_counter()
    _, result = await store.sync([], lambda db, _events: fn(db))
    took = time.perf_counter() - began
    batches.took(took)
    report.batches += 1
    report.longest_batch_s = max(report.longest_batch_s, took)
    return result


async def _remove(
    store: SqliteEventStore,
    persisted: Sequence[Projection],
    horizon: compaction.Horizon,
    report: CompactionReport,
    actor: Actor,
    started: float,
    batch_events: int,
    batch_rows: int,
) -> CompactionReport:
    last = horizon.position
    low = await store.on_reader(compaction.lowest_position)
    sizes = Batches(batch_events)
    while low is not None and low <= last:
        high = min(low + sizes.size - 1, last)
        removed: compaction.Removed = await _timed_sync(
            store, report, sizes, lambda db, lo=low, hi=high: compaction.remove_events(db, lo, hi, last)
        )
        report.events_removed += removed.events
        report.observations_removed += removed.observations
        report.streams_ended += removed.streams_ended
        low = high + 1
    kept = {
        name: dict(decode_snapshot(state))
        for name, _, state in await store.on_reader(compaction.horizon_snapshots)
    }
    for projection in persisted:
        report.rows_removed[projection.table] = await _remove_rows(
            store, projection, kept.get(projection.name, {}), last, report, batch_rows
        )
    if not report.live_bytes_before:
        report.live_bytes_before = await store.on_reader(compaction.live_bytes)
    report.duration_s = time.perf_counter() - started
    done = LogCompacted(
        record_position=horizon.record_position, last_position=last, events_removed=report.events_removed,
        rows_removed=report.rows_removed, observations_removed=report.observations_removed,
        streams_ended=report.streams_ended, duration_s=round(report.duration_s, 3), batches=report.batches,
        longest_batch_s=round(report.longest_batch_s, 4), live_bytes_before=report.live_bytes_before,
        live_bytes_after=await store.on_reader(compaction.live_bytes),
    )  # fmt: skip
    stamp = format_time(datetime.now(UTC))
    await store.sync(
        [StreamAppend(COMPACTION_STREAM, [NewEvent.of(done, actor=actor)])],
        lambda db, _events: compaction.complete(db, horizon.record_position, stamp),
    )
    report.removed_s = time.perf_counter() - started
    await _reclaim(store, report)
    report.live_bytes_after = await store.on_reader(compaction.live_bytes)
    report.file_bytes_after = store.size_bytes()
    report.duration_s = time.perf_counter() - started
    return report


async def _remove_rows(
    store: SqliteEventStore,
    projection: Projection,
    view: dict[Key, Row],
    horizon: int,
    report: CompactionReport,
    batch: int,
) -> int:
    """The rows of `projection`'s table last changed at or before the horizon that its view does not hold."""
    table, keys = projection.table, projection.key_columns
    removed = 0
    sizes = Batches(batch)
    if keys == ("position",):  # a history table: every row is one event's
        lowest = await store.query(f"SELECT MIN(position) FROM {table}")
        low = int(lowest[0][0]) if lowest and lowest[0][0] is not None else horizon + 1
        while low <= horizon:
            high = min(low + sizes.size - 1, horizon)
            removed += await _timed_sync(
                store,
                report,
                sizes,
                lambda db, lo=low, hi=high: compaction.remove_rows_by_position(db, table, lo, hi),
            )
            low = high + 1
        return removed
    held = set(projection.table_image(view))
    found = await store.on_reader(lambda db: compaction.rows_at_or_below(db, table, keys, horizon))
    gone = [key for key in found if key not in held]
    start = 0
    while start < len(gone):
        chunk = gone[start : start + sizes.size]
        removed += await _timed_sync(
            store,
            report,
            sizes,
            lambda db, c=chunk: compaction.remove_rows_by_key(db, table, keys, c, horizon),
        )
        start += len(chunk)
    return removed


async def _reclaim(store: SqliteEventStore, report: CompactionReport) -> None:
    """Give free pages back in steps (a log created with incremental auto_vacuum); others reuse them."""
    if await store.on_reader(compaction.auto_vacuum) != 2:
        return
    free = await store.on_reader(lambda db: int(db.execute("PRAGMA freelist_count").fetchone()[0]))
    sizes = Batches(RECLAIM_PAGES)

    def step(pages: int) -> SyncFn:
        return lambda db, _events: compaction.reclaim_step(db, pages)

    while free > 0:
        began = time.perf_counter()
        _, left = await store.sync([], step(sizes.size), transaction=False)
        took = time.perf_counter() - began
        sizes.took(took)
        report.longest_reclaim_s = max(report.longest_reclaim_s, took)
        report.pages_reclaimed += max(free - int(left), 0)
        if int(left) >= free:
            break
        free = int(left)
