"""Compaction's work on the file: the horizon, the record, the privileged removal in bounded batches, reclaim.

A compaction removes the events at positions first..horizon (a prefix of the log) and what hangs off them,
keeping a snapshot of each projection at the horizon (cdctl.projections.compaction folds it). The steps, each
a job of the single writer (so no append interleaves, and each is short):

1. `record`, in the transaction that appends the LogCompactionStarted event: a `compactions` row mirroring
   it (range, anchor hash, horizon time, reason, snapshot digest), the horizon snapshots, the regular
   snapshots below the horizon dropped (nothing could resume from them), and the tracked position of each
   snapshot-only projection raised to the horizon (it resumes from its horizon snapshot).
2. `remove_events`, one bounded batch a transaction: a grant row (the DELETE trigger of migration 0007 lets
   through only positions a grant covers, and a grant only positions a compaction record names), the last
   version of each stream that ends in the batch, the observations that can no longer recur, the events,
   the grant deleted again. No other transaction ever sees a grant.
3. `remove_rows`: the rows of the projections' tables that only removed events explain (history before the
   horizon), by position range or by key, never a row changed after the horizon.
4. `complete`: the row's completion time, in the transaction that appends LogCompacted.
5. `reclaim_step`: `PRAGMA incremental_vacuum` a bounded number of pages at a time (logs created with
   auto_vacuum=INCREMENTAL; an older log reuses its free pages instead of shrinking).

A crash between steps leaves a pending compaction (`completed_at` empty) that the next run finishes; the
chain is checked from the anchor meanwhile, so events still below the horizon are ignored.
Called by cdctl.projections.compaction; `read_horizon` also by cdctl.store.integrity and the readers.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from cdctl.domain.errors import StoreError
from cdctl.domain.events import RecordedEvent

# An observation whose resourceVersion has this prefix records the object's deletion
# (cdctl.controller.journal): the object cannot be listed again, so its observations can all go.
DELETED_OBSERVATION = "deleted/"


@dataclass(frozen=True, slots=True)
class Horizon:
    """The latest compaction: events up to `position` are removed (or being removed, while pending)."""

    record_position: int
    first_position: int
    position: int
    anchor_hash: str
    recorded_at: str
    reason: str
    snapshot_digest: str
    started_at: str
    completed_at: str

    @property
    def pending(self) -> bool:
        return not self.completed_at


@dataclass(frozen=True, slots=True)
class Plan:
    """What a compaction will record, decided before its record is written."""

    previous: int  # record_position of the horizon it was planned against (0: none)
    first: int
    horizon: int
    anchor_hash: str
    horizon_recorded_at: str
    reason: str
    snapshots: dict[str, str]  # projection name -> its view at the horizon (encoded)
    bump: tuple[str, ...]  # snapshot-only projections: their tracked position is raised to the horizon

    @property
    def digest(self) -> str:
        return snapshot_digest((name, self.horizon, state) for name, state in self.snapshots.items())


@dataclass(slots=True)
class Removed:
    """What removal batches took away."""

    events: int = 0
    observations: int = 0
    streams_ended: int = 0


def has_table(db: sqlite3.Connection, name: str) -> bool:
    found = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
    return found.fetchone() is not None


def read_horizon(db: sqlite3.Connection) -> Horizon | None:
    """The latest compaction's row, or None for a log never compacted (or older than migration 0007)."""
    if not has_table(db, "compactions"):
        return None
    row = db.execute(
        "SELECT record_position, first_position, horizon, anchor_hash, horizon_recorded_at, reason,"
        " snapshot_digest, started_at, completed_at FROM compactions ORDER BY record_position DESC LIMIT 1"
    ).fetchone()
    if row is None:
        return None
    return Horizon(
        int(row[0]), int(row[1]), int(row[2]), str(row[3]), str(row[4]), str(row[5]), str(row[6]),
        str(row[7]), str(row[8]),
    )  # fmt: skip


def horizon_snapshots(db: sqlite3.Connection) -> list[tuple[str, int, str]]:
    if not has_table(db, "horizon_snapshots"):
        return []
    rows = db.execute("SELECT name, position, state FROM horizon_snapshots ORDER BY name").fetchall()
    return [(str(name), int(position), str(state)) for name, position, state in rows]


def snapshot_digest(snapshots: Iterable[tuple[str, int, str]]) -> str:
    """SHA-256 over the horizon snapshots (name, position, state), in name order: recorded in the chain."""
    ordered = sorted([name, position, state] for name, position, state in snapshots)
    return hashlib.sha256(orjson.dumps(ordered)).hexdigest()


def live_bytes(db: sqlite3.Connection) -> int:
    """The bytes of the pages in use (free pages excluded): what the size bound counts."""
    pages = int(db.execute("PRAGMA page_count").fetchone()[0])
    free = int(db.execute("PRAGMA freelist_count").fetchone()[0])
    return (pages - free) * int(db.execute("PRAGMA page_size").fetchone()[0])


def first_held(db: sqlite3.Connection, horizon: Horizon | None) -> int:
    """The first position the chain holds: after the horizon, or the log's first event."""
    if horizon is not None:
        return horizon.position + 1
    row = db.execute("SELECT MIN(position) FROM events").fetchone()
    return int(row[0]) if row and row[0] is not None else 1


def aged_until(db: sqlite3.Connection, first: int, head: int, cutoff: str) -> int:
    """The last position of the longest prefix (from `first`) recorded before `cutoff`.

    A prefix, not every old event: after a clock stepped back, a young event stops it.
    """
    row = db.execute(
        "SELECT position FROM events WHERE position >= ? AND recorded_at >= ? ORDER BY position LIMIT 1",
        (first, cutoff),
    ).fetchone()
    return int(row[0]) - 1 if row is not None else head


def removed_facts(db: sqlite3.Connection, first: int, last: int) -> tuple[str, str]:
    """The hash of event `last` (the anchor) and the latest recorded_at among first..last."""
    anchor = db.execute("SELECT hash FROM events WHERE position = ?", (last,)).fetchone()
    latest = db.execute(
        "SELECT MAX(recorded_at) FROM events WHERE position BETWEEN ? AND ?", (first, last)
    ).fetchone()
    if anchor is None or latest is None or latest[0] is None:
        raise StoreError(f"event {last} is not in the log: cannot compact up to it")
    return str(anchor[0]), str(latest[0])


def tracked_positions(db: sqlite3.Connection) -> dict[str, int]:
    return {str(n): int(p) for n, p in db.execute("SELECT name, position FROM projection_positions")}


def record(db: sqlite3.Connection, recorded: list[RecordedEvent], plan: Plan, now: str) -> Horizon:
    """Step 1, in the transaction that appended the LogCompactionStarted event `recorded[0]`."""
    current = read_horizon(db)
    if (current.record_position if current is not None else 0) != plan.previous:
        raise StoreError("another compaction was recorded meanwhile; planning again")
    [event] = recorded
    db.execute(
        "INSERT INTO compactions (record_position, first_position, horizon, anchor_hash, horizon_recorded_at,"
        " reason, snapshot_digest, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (event.position, plan.first, plan.horizon, plan.anchor_hash, plan.horizon_recorded_at, plan.reason,
         plan.digest, now),
    )  # fmt: skip
    db.execute("DELETE FROM horizon_snapshots")
    db.executemany(
        "INSERT INTO horizon_snapshots (name, position, state) VALUES (?, ?, ?)",
        [(name, plan.horizon, state) for name, state in sorted(plan.snapshots.items())],
    )
    db.execute("DELETE FROM snapshots WHERE position < ?", (plan.horizon,))
    db.executemany(
        "INSERT INTO projection_positions (name, position) VALUES (?, ?)"
        " ON CONFLICT (name) DO UPDATE SET position = MAX(position, excluded.position)",
        [(name, plan.horizon) for name in plan.bump],
    )
    horizon = read_horizon(db)
    assert horizon is not None
    return horizon


def lowest_position(db: sqlite3.Connection) -> int | None:
    row = db.execute("SELECT MIN(position) FROM events").fetchone()
    return int(row[0]) if row and row[0] is not None else None


def remove_events(db: sqlite3.Connection, low: int, high: int, horizon: int) -> Removed:
    """Step 2: one batch, events low..high (all at or below `horizon`), in the caller's transaction."""
    if high > horizon:
        raise StoreError(f"compaction batch {low}..{high} goes past the horizon {horizon}")
    db.execute("INSERT INTO compaction_grant (upto) VALUES (?)", (high,))
    ended = [
        (str(stream), int(version), int(position))
        for stream, version, position in db.execute(
            "SELECT stream, MAX(version), MAX(position) FROM events WHERE position BETWEEN ? AND ?"
            " GROUP BY stream",
            (low, high),
        ).fetchall()
        if db.execute(
            "SELECT 1 FROM events WHERE stream = ? AND version > ? LIMIT 1", (stream, version)
        ).fetchone()
        is None
    ]
    db.executemany(
        "INSERT OR REPLACE INTO stream_versions (stream, version, position) VALUES (?, ?, ?)", ended
    )
    # An observation can recur only as an object's latest state: keep the latest of each object still there.
    observations = db.execute(
        "DELETE FROM observed_versions WHERE position BETWEEN ? AND ? AND (resource_version LIKE ?"
        " OR EXISTS (SELECT 1 FROM observed_versions later WHERE later.uid = observed_versions.uid"
        " AND later.position > observed_versions.position))",
        (low, high, DELETED_OBSERVATION + "%"),
    ).rowcount
    events = db.execute("DELETE FROM events WHERE position BETWEEN ? AND ?", (low, high)).rowcount
    db.execute("DELETE FROM compaction_grant")
    return Removed(events, observations, len(ended))


def rows_at_or_below(
    db: sqlite3.Connection, table: str, key_columns: Sequence[str], horizon: int
) -> list[tuple[Any, ...]]:
    """The keys of `table`'s rows last changed at or before the horizon (a reader's query)."""
    columns = ", ".join(key_columns)
    rows = db.execute(f"SELECT {columns} FROM {table} WHERE position <= ?", (horizon,)).fetchall()
    return [tuple(row) for row in rows]


def remove_rows_by_position(db: sqlite3.Connection, table: str, low: int, high: int) -> int:
    """Step 3 for a history table keyed by position: its rows low..high."""
    return db.execute(f"DELETE FROM {table} WHERE position BETWEEN ? AND ?", (low, high)).rowcount


def remove_rows_by_key(
    db: sqlite3.Connection,
    table: str,
    key_columns: Sequence[str],
    keys: Sequence[tuple[Any, ...]],
    horizon: int,
) -> int:
    """Step 3 by key: a row changed after the horizon (re-created, or updated since) stays."""
    where = " AND ".join(f"{column} = ?" for column in key_columns)
    removed = 0
    for key in keys:
        removed += db.execute(
            f"DELETE FROM {table} WHERE {where} AND position <= ?", (*key, horizon)
        ).rowcount
    return removed


def complete(db: sqlite3.Connection, record_position: int, now: str) -> None:
    """Step 4, in the transaction that appends LogCompacted."""
    db.execute(
        "UPDATE compactions SET completed_at = ? WHERE record_position = ? AND completed_at = ''",
        (now, record_position),
    )


def auto_vacuum(db: sqlite3.Connection) -> int:
    """0 none (free pages are reused), 1 full, 2 incremental (compaction gives pages back)."""
    return int(db.execute("PRAGMA auto_vacuum").fetchone()[0])


def reclaim_step(db: sqlite3.Connection, pages: int) -> int:
    """Step 5: give up to `pages` free pages back to the file system; the free pages left.

    Outside any transaction: `executescript` runs the pragma to completion in its own.
    """
    db.executescript(f"BEGIN IMMEDIATE; PRAGMA incremental_vacuum({int(pages)}); COMMIT;")
    return int(db.execute("PRAGMA freelist_count").fetchone()[0])
