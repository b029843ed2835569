"""The read models of a collected file, per source, and its verification.

A collected file (cdctl.store.collected) holds many logs. Its read models are the event log's
(`claim_lifecycle`, `channel_allocations`, `checkpoint_transitions`, `domain_history`), each with a leading
`source` column, so a query spans every node: `rebuild(file, sources)` folds each source's events through the
projections its component keeps (the plugins the claim models, the controller `domain_history`) and replaces
that source's rows. A daemon's log feeds none of them, so a daemon cannot put claims in another node's
lifecycle by writing claim events into its own log. `replay(file, until)` folds every source up to an instant;
`verify(file, keys)` checks every source's chain run by run and its recorded heads
(cdctl.store.collected.check_source) and that rebuilt read models equal the stored ones. Used by
`cdctl collect` (after storing) and by the history commands on a collected file.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from cdctl.domain.events import RecordedEvent
from cdctl.projections.base import Change, Key, Projection, Router, Row, in_log_order
from cdctl.projections.lifecycle import lifecycle_projections
from cdctl.projections.replay import Rebuild
from cdctl.store.collected import CollectedFile, Source, SourceCheck, check_source
from cdctl.store.sealing import format_time
from cdctl.store.sqlite import row_to_event

PAGE = 5000
FLUSH_EVENTS = 20_000  # events folded between two writes of the pending rows
# Which read models each component's log feeds.
MODELS_OF = {
    "kubelet-plugin": ("claim_lifecycle", "channel_allocations", "checkpoint_transitions"),
    "controller": ("domain_history",),
}


def projections_for(component: str) -> list[Projection]:
    wanted = MODELS_OF.get(component, ())
    return [p for p in lifecycle_projections() if p.name in wanted]


def _create_sql(projection: Projection) -> str:
    columns = ", ".join(f'"{c}"' for c in ("source", *projection.columns))
    key = ", ".join(f'"{c}"' for c in ("source", *projection.key_columns))
    return f'CREATE TABLE "{projection.table}" ({columns}, PRIMARY KEY ({key}))'


# migrations/0008's view per source: which ComputeDomain held which IMEX channel (a controller's log).
CHANNEL_ASSIGNMENTS = """
CREATE VIEW IF NOT EXISTS channel_assignments AS
SELECT s.name AS source,
       json_extract(a.data, '$.clique_id') AS clique, json_extract(a.data, '$.channel') AS channel,
       json_extract(a.data, '$.domain_uid') AS domain_uid, json_extract(a.data, '$.namespace') AS namespace,
       json_extract(a.data, '$.name') AS name, json_extract(a.data, '$.node') AS node,
       json_extract(a.data, '$.claim') AS claim, json_extract(a.data, '$.source') AS how,
       a.recorded_at AS assigned_at, r.recorded_at AS released_at,
       a.position AS assigned_position, r.position AS released_position
FROM source_events AS a JOIN sources AS s ON s.id = a.source_id
LEFT JOIN source_events AS r ON r.source_id = a.source_id AND r.position = (
    SELECT min(x.position) FROM source_events AS x
    WHERE x.source_id = a.source_id AND x.stream = a.stream AND x.type = 'ImexChannelReleased'
      AND x.position > a.position
      AND json_extract(x.data, '$.domain_uid') = json_extract(a.data, '$.domain_uid')
      AND json_extract(x.data, '$.channel') = json_extract(a.data, '$.channel'))
WHERE a.type = 'ImexChannelAssigned' AND a.stream GLOB 'channels/*'
"""


def ensure_read_models(file: CollectedFile) -> bool:
    """Create the read-model tables, or recreate those whose columns changed; True when any was (re)made,
    in which case every source must be rebuilt. The `channel_assignments` view needs no rebuild."""
    file.db.execute(CHANNEL_ASSIGNMENTS)
    made = False
    for projection in lifecycle_projections():
        found = [row[1] for row in file.query(f'PRAGMA table_info("{projection.table}")')]
        if found == ["source", *projection.columns]:
            continue
        file.db.execute(f'DROP TABLE IF EXISTS "{projection.table}"')
        file.db.execute(_create_sql(projection))
        made = True
    return made


def source_events(
    file: CollectedFile, source: Source, until: datetime | None = None
) -> Iterable[RecordedEvent]:
    """The source's events in position order, upcast, a page at a time (up to `until` when given)."""
    after, limit = 0, format_time(until) if until is not None else None
    while True:
        rows = file.source_events(source.id, after, PAGE)
        if not rows:
            return
        for row in rows:
            if limit is not None and row[7] > limit:
                continue
            yield row_to_event(row, f"{file.path} ({source.name})")
        after = rows[-1][0]


def fold(file: CollectedFile, source: Source, until: datetime | None = None) -> dict[str, dict[Key, Row]]:
    """The read-model tables of one source, rebuilt from its events."""
    projections = projections_for(source.component)
    if not projections:
        return {}
    rebuild = Rebuild(projections)
    rebuild.feed(source_events(file, source, until))
    return rebuild.tables


class TableWriter:
    """One source's folded rows written to SQLite as they come: the changes since the last `flush` are
    pending, and only the projections' live views stay in memory, so rebuilding a source of a million events
    holds its live claims, not its history rows. Tables have a leading `source` column (`_create_sql`)."""

    def __init__(self, db: sqlite3.Connection, source: str, projections: Sequence[Projection]) -> None:
        self.db = db
        self.source = source
        self.by_name = {p.name: p for p in projections}
        self.pending: dict[str, dict[Key, Row | None]] = {p.name: {} for p in projections}
        self.updates: dict[str, list[tuple[Key, Row]]] = {p.name: [] for p in projections}
        self.written = 0

    def apply(self, projection: Projection, change: Change) -> None:
        pending = self.pending[projection.name]
        if not change.partial:
            pending[change.key] = change.row
        elif change.key in pending:
            earlier = pending[change.key]
            if earlier is not None:
                pending[change.key] = {**earlier, **(change.row or {})}
        else:  # a row flushed before (or none: then the update touches nothing, as in a table image)
            self.updates[projection.name].append((change.key, change.row or {}))

    def flush(self) -> None:
        for name, projection in self.by_name.items():
            table, keys = f'"{projection.table}"', " AND ".join(f'"{c}" = ?' for c in projection.key_columns)
            for key, row in self.updates[name]:
                columns = ", ".join(f'"{c}" = ?' for c in row)
                self.db.execute(
                    f"UPDATE {table} SET {columns} WHERE source = ? AND {keys}",
                    (*row.values(), self.source, *key),
                )
            marks = ", ".join("?" * (len(projection.columns) + 1))
            pending = self.pending[name]
            self.db.executemany(
                f"DELETE FROM {table} WHERE source = ? AND {keys}",
                [(self.source, *key) for key, row in pending.items() if row is None],
            )
            rows = [
                (self.source, *(row.get(c) for c in projection.columns))
                for row in pending.values()
                if row is not None
            ]
            self.db.executemany(f"INSERT OR REPLACE INTO {table} VALUES ({marks})", rows)
            self.written += len(rows)
            pending.clear()
            self.updates[name].clear()


def fold_into(db: sqlite3.Connection, file: CollectedFile, source: Source) -> int:
    """Fold `source`'s events and write its read-model rows into `db`'s tables (its old rows there are
    replaced); returns the rows written."""
    projections = projections_for(source.component)
    for projection in lifecycle_projections():
        db.execute(f'DELETE FROM "{projection.table}" WHERE source = ?', (source.name,))
    if not projections:
        return 0
    writer = TableWriter(db, source.name, projections)
    router = Router(projections)
    views: dict[str, dict[Key, Row]] = {p.name: {} for p in projections}
    for count, event in enumerate(source_events(file, source), 1):
        for projection in router.route(event):
            view = views[projection.name]
            for change in projection.fold(view, event):
                if not change.partial:
                    if change.retain and change.row is not None:
                        view[change.key] = change.row
                    else:
                        view.pop(change.key, None)
                if change.persist:
                    writer.apply(projection, change)
        if count % FLUSH_EVENTS == 0:
            writer.flush()
    writer.flush()
    return writer.written


def rebuild(file: CollectedFile, sources: Sequence[Source]) -> int:
    """Replace the read-model rows of `sources` by ones rebuilt from their events (one transaction per
    source); returns the rows written."""
    written = 0
    for source in sources:
        file.db.execute("BEGIN IMMEDIATE")
        try:
            written += fold_into(file.db, file, source)
            file.db.execute("COMMIT")
        except BaseException:
            file.db.execute("ROLLBACK")
            raise
    return written


def replay(
    file: CollectedFile, until: datetime | None = None, sources: Sequence[Source] = ()
) -> dict[str, list[Row]]:
    """Every read model as of `until` (default: the end), over `sources` (default: all), with `source`."""
    tables: dict[str, list[Row]] = {p.name: [] for p in lifecycle_projections()}
    for source in sources or file.sources():
        for name, table in fold(file, source, until).items():
            rows = [{"source": source.name, **table[key]} for key in in_log_order(table)]
            tables[name].extend(rows)
    return tables


@dataclass
class CollectedReport:
    checks: list[SourceCheck] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # read-model mismatches, per source

    @property
    def ok(self) -> bool:
        return not self.problems and all(c.ok for c in self.checks)

    @property
    def events(self) -> int:
        return sum(c.events for c in self.checks)


def verify(file: CollectedFile, keys: Sequence[bytes]) -> CollectedReport:
    """Every source's chain and heads, then its stored read-model rows against ones rebuilt from its events
    (into a scratch database beside, compared in SQL: memory stays bounded by the live views)."""
    report = CollectedReport()
    with tempfile.TemporaryDirectory(prefix="cdctl-verify-") as scratch:
        db = sqlite3.connect(Path(scratch) / "rebuilt.db", isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode = OFF")
            db.execute("PRAGMA synchronous = OFF")
            for projection in lifecycle_projections():
                db.execute(_create_sql(projection))
            db.execute("ATTACH DATABASE ? AS stored", (f"{file.path.resolve().as_uri()}?mode=ro",))
            for source in file.sources():
                check = check_source(file, source, keys)
                report.checks.append(check)
                if check.ok:
                    db.execute("BEGIN")
                    fold_into(db, file, source)
                    db.execute("COMMIT")
                    _compare(db, source, check)
        finally:
            db.close()
    return report


def _compare(db: sqlite3.Connection, source: Source, check: SourceCheck) -> None:
    for projection in lifecycle_projections():
        columns = ", ".join(f'"{c}"' for c in projection.columns)
        table = f'"{projection.table}"'
        for left, right, which in (("stored", "main", "stored"), ("main", "stored", "rebuilt")):
            found = db.execute(
                f"SELECT {columns} FROM {left}.{table} WHERE source = ?"
                f" EXCEPT SELECT {columns} FROM {right}.{table} WHERE source = ? LIMIT 1",
                (source.name, source.name),
            ).fetchone()
            if found is not None:
                row = dict(zip(projection.columns, found, strict=True))
                key = [row[c] for c in projection.key_columns]
                other = "rebuilt from its events" if which == "stored" else "stored"
                check.bad(
                    int(row.get("position") or 0),
                    f"{projection.name}: {which} row {key} has no equal {other}",
                )
                return
