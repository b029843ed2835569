"""Replay and verification: the projections' folds run in memory over a log, up to any point.

`replay` rebuilds what each projection's table held at a position or an instant (for post-mortems:
`cdctl replay --at`). `verify` recomputes the hash chain (with the log's key, and against heads published
outside the file) and rebuilds every projection up to its tracked position, and compares with what the file
stores (`cdctl verify`). Both read through the store's readers, so they work on a file a live component is
writing. On a compacted log both start from the snapshots kept at the horizon: the chain from its anchor,
the views from the horizon views (and the table rows they hold); a point before the horizon is refused
(`CompactedAway`, exit 5). A table row the rebuild meets only through partial changes after the horizon
(its history row went with the compaction) is compared on the columns those changes set.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cdctl.domain.errors import CompactedAway, LogTampered, clip
from cdctl.domain.events import RecordedEvent
from cdctl.projections.base import Key, Projection, Router, Row, apply_to_table, in_log_order
from cdctl.projections.sinks import ViewSink, decode_snapshot
from cdctl.store import compaction, integrity
from cdctl.store.base import EventStore
from cdctl.store.sealing import format_time
from cdctl.store.sqlite import SqliteEventStore

BATCH = 5_000


class Partial(dict[str, Any]):
    """A table row the rebuild knows only the partially changed columns of (its row predates the horizon)."""


class Rebuild:
    """Folds events into each projection's live view and table image, from nothing or from a horizon."""

    def __init__(
        self,
        projections: Sequence[Projection],
        start: dict[str, dict[Key, Row]] | None = None,
        position: int = 0,
    ) -> None:
        self.projections = list(projections)
        start = start if start is not None else {}
        self.views: dict[str, dict[Key, Row]] = {
            p.name: dict(start.get(p.name, {})) for p in self.projections
        }
        self.tables: dict[str, dict[Key, Row]] = {
            p.name: p.table_image(self.views[p.name]) for p in self.projections
        }
        self.from_horizon = position > 0
        self.position = position
        self.router = Router(self.projections)

    def feed(self, events: Iterable[RecordedEvent], upto: dict[str, int] | None = None) -> None:
        route, views, tables = self.router.route, self.views, self.tables
        for event in events:
            for projection in route(event):
                if upto is not None and event.position > upto.get(projection.name, 0):
                    continue
                view, table = views[projection.name], tables[projection.name]
                for change in projection.fold(view, event):
                    key, row, persist, retain, partial = change
                    if partial:
                        pass
                    elif retain:
                        if row is None:
                            view.pop(key, None)
                        else:
                            view[key] = row
                    elif key in view:
                        del view[key]
                    if not persist:
                        pass
                    elif partial and self.from_horizon and isinstance(table.get(key, Partial()), Partial):
                        table[key] = Partial({**table.get(key, {}), **(row or {})})
                    else:
                        apply_to_table(table, change)
            self.position = event.position


@dataclass
class ReplayResult:
    position: int
    events: int
    tables: dict[str, list[Row]]

    def to_json(self) -> dict[str, Any]:
        return {"position": self.position, "events": self.events, "tables": self.tables}


async def horizon_start(
    store: EventStore,
) -> tuple[compaction.Horizon | None, dict[str, dict[Key, Row]]]:
    """The log's horizon and the views kept there (none for a log never compacted)."""
    if not isinstance(store, SqliteEventStore):
        return None, {}
    horizon = await store.horizon()
    if horizon is None:
        return None, {}
    kept = await store.on_reader(compaction.horizon_snapshots)
    return horizon, {name: dict(decode_snapshot(state)) for name, _, state in kept}


def before_horizon(store: EventStore, horizon: compaction.Horizon, asked: str) -> CompactedAway:
    path = getattr(store, "path", "event log")
    return CompactedAway(
        f"{path}: {asked} is before the log's horizon: compaction removed positions"
        f" {horizon.first_position}..{horizon.position} (recorded up to {horizon.recorded_at}; reason"
        f" {horizon.reason}, at {horizon.started_at}, record at position {horizon.record_position});"
        f" the earliest point kept is --position {horizon.position} or --at {horizon.recorded_at}"
    )


async def replay(
    store: EventStore,
    projections: Sequence[Projection],
    *,
    position: int | None = None,
    until: datetime | None = None,
) -> ReplayResult:
    """The projections' tables as they were after `position` (or at instant `until`).

    On a compacted log the fold starts at the horizon, from the views kept there; a point before it raises
    CompactedAway naming the horizon.
    """
    horizon, start = await horizon_start(store)
    after, count = 0, 0
    if horizon is not None:
        if position is not None and position < horizon.position:
            raise before_horizon(store, horizon, f"position {position}")
        if until is not None and format_time(until) < horizon.recorded_at:
            raise before_horizon(store, horizon, f"instant {format_time(until)}")
        after = horizon.position
    rebuild = Rebuild(projections, start, after)
    while True:
        events = await store.read_all(after=after, limit=BATCH, until=until)
        if position is not None:
            events = [e for e in events if e.position <= position]
        if not events:
            break
        rebuild.feed(events)
        count += len(events)
        after = events[-1].position
    tables = {
        name: [table[k] for k in in_log_order(table) if not isinstance(table[k], Partial)]
        for name, table in rebuild.tables.items()
    }
    return ReplayResult(rebuild.position, count, tables)


@dataclass
class VerifyReport:
    events: int = 0
    first_bad_position: int | None = None
    problems: list[str] = field(default_factory=list)
    horizon: compaction.Horizon | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


async def verify_chain(
    store: SqliteEventStore,
    report: VerifyReport,
    key: bytes | None = None,
    expect_heads: Sequence[tuple[int, str]] = (),
) -> None:
    """Recompute the whole chain with the log's scheme (and `key`), then compare published heads.

    A keyed log without its key, or with another key, raises StoreError (not a verification failure). A
    published head (position, hash) the log no longer holds, or holds with another hash, is reported: that
    is how a log cut at its end, or rewritten along with its chain, is told apart from the log as it was.
    """
    path = str(store.path)

    def check(db: sqlite3.Connection) -> tuple[int, dict[int, str]]:
        recorded = integrity.read_scheme(db)
        scheme = integrity.resolve_scheme(recorded, key, path, option="--key-file", adopt=False)
        report.horizon = integrity.check_compaction(db, path)
        start, start_hash = integrity.chain_start(report.horizon)
        checked = integrity.check_chain(db, scheme, start, start_hash, path)
        wanted = [position for position, _ in expect_heads]
        found = {
            int(position): str(hash_)
            for position, hash_ in db.execute(
                f"SELECT position, hash FROM events WHERE position IN ({','.join('?' * len(wanted))})", wanted
            )
        }
        return checked, found

    try:
        report.events, found = await store.on_reader(check)
    except LogTampered as exc:
        report.first_bad_position = exc.position
        report.problems.append(f"position {exc.position}: {exc.reason}")
        return
    head = store.head()
    for position, expected in expect_heads:
        if report.horizon is not None and position <= report.horizon.position:
            report.notes.append(
                f"published head {position} is at or below the horizon: compacted, not checked"
            )
            continue
        if position not in found:
            problem = f"the log ends at position {head}, before the published head {position}"
            problem += ": events were deleted"
        elif found[position] != expected:
            problem = f"its hash differs from the published head {position}:{expected}"
            problem += " (the log was rewritten)"
        else:
            continue
        bad = min(position, head + 1)
        report.problems.append(f"position {bad}: {problem}")
        if report.first_bad_position is None or bad < report.first_bad_position:
            report.first_bad_position = bad


async def verify_projections(
    store: SqliteEventStore, projections: Sequence[Projection], sink: ViewSink, report: VerifyReport
) -> None:
    upto = await sink.load_positions()
    horizon, start = await horizon_start(store)
    after = horizon.position if horizon is not None else 0
    for projection in projections:
        if horizon is not None and upto.get(projection.name, 0) and projection.name not in start:
            report.problems.append(
                f"projection {projection.name}: no snapshot kept at the horizon {after}: cannot rebuild it"
            )
    rebuild = Rebuild(projections, start, after)
    limit = max(upto.values(), default=0)
    while after < limit:
        events = await store.read_all(after=after, limit=BATCH)
        if not events:
            break
        rebuild.feed(events, upto)
        after = events[-1].position
    for projection in projections:
        stored = {projection.row_key(r): r for r in await sink.table_rows(projection)}
        rebuilt = rebuild.tables[projection.name]
        if horizon is not None and horizon.pending:  # rows the unfinished compaction is about to remove
            held = projection.table_image(start.get(projection.name, {}))
            for key in [k for k, r in stored.items() if r["position"] <= horizon.position and k not in held]:
                del stored[key]
        for key in sorted(set(stored) | set(rebuilt), key=repr):
            if _same(stored.get(key), rebuilt.get(key)):
                continue
            culprit = (rebuilt.get(key) or stored.get(key) or {}).get("position")
            where = f"position {culprit}" if culprit is not None else "unknown position"
            report.problems.append(
                f"projection {projection.name}: row {list(key)} differs from the rebuilt one ({where}; "
                f"{_difference(stored.get(key), rebuilt.get(key))})"
            )
            if culprit is not None and (
                report.first_bad_position is None or culprit < report.first_bad_position
            ):
                report.first_bad_position = int(culprit)
            break


def _difference(stored: Row | None, rebuilt: Row | None) -> str:
    """What a verify problem says of one row: the side it is missing from, or each column that differs."""
    if stored is None:
        return "missing from the table"
    if rebuilt is None:
        return "not in the rebuilt table"
    columns = [c for c in dict.fromkeys([*stored, *rebuilt]) if stored.get(c) != rebuilt.get(c)]
    return "; ".join(f"{c}: table {_shown(stored.get(c))}, rebuilt {_shown(rebuilt.get(c))}" for c in columns)


def _shown(value: Any) -> str:
    return clip(repr(str(value) if isinstance(value, str) else value), 80)  # an enum member as its value


def _same(stored: Row | None, rebuilt: Row | None) -> bool:
    """A partial row matches a stored row that agrees on its columns, or none (its history went first)."""
    if isinstance(rebuilt, Partial):
        return stored is None or all(stored.get(column) == value for column, value in rebuilt.items())
    return stored == rebuilt
