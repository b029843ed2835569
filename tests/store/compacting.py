"""Logs to compact, and compaction up to a chosen point: helpers for the retention tests.

Used by tests/store/test_compaction.py, tests/projections/test_compaction.py and the component tests. The age
bound is what moves the horizon here: `compact_through` compacts as if the clock stood one age past the
event after the wanted position, so every earlier commit is older than the bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

from cdctl.domain.retention import RetentionPolicy
from cdctl.projections.base import Projection
from cdctl.projections.compaction import CompactionReport, compact
from cdctl.projections.lifecycle import lifecycle_projections
from cdctl.projections.runner import ProjectionRunner
from cdctl.store import SqliteEventStore
from tests.projections.helpers import prepare, unprepare

AGE = RetentionPolicy(age_s=60, size_bytes=0)


async def claims(store: SqliteEventStore, first: int, count: int, keep_every: int = 3) -> None:
    """Prepare `count` claims (channel = number % 4); unprepare all but every `keep_every`-th."""
    for n in range(first, first + count):
        await prepare(store, f"c{n}", channel=n % 4)
        if n % keep_every:
            await unprepare(store, f"c{n}")


async def plugin_log(path: Path, count: int = 20, key: bytes | None = None) -> None:
    """A node's log: claims, with the lifecycle views projected (and snapshotted every 7 events)."""
    async with await SqliteEventStore.open(path, key=key) as store:
        runner = ProjectionRunner(store, lifecycle_projections(), snapshot_every=7)
        await runner.start()
        await claims(store, 0, count)
        await runner.catch_up()


async def compact_through(
    store: SqliteEventStore,
    position: int,
    projections: Sequence[Projection] | None = None,
    **options: int,
) -> CompactionReport | None:
    """Compact the commits before the one holding `position + 1` (so up to `position`, at a commit edge)."""
    [(recorded_at,)] = await store.query("SELECT recorded_at FROM events WHERE position = ?", (position + 1,))
    now = datetime.fromisoformat(recorded_at) + timedelta(seconds=AGE.age_s)
    chosen = lifecycle_projections() if projections is None else projections
    return await compact(store, AGE, chosen, now=now, **options)
