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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cdctl.domain.events import RecordedEvent
from cdctl.projections.base import Key, Projection, Row
from cdctl.projections.lifecycle import lifecycle_projections
from cdctl.projections.replay import Rebuild
from cdctl.store.collected import CollectedFile, Source, SourceCheck, check_source
from cdctl.store.sealing import format_time
from cdctl.store.sqlite import row_to_event

PAGE = 5000
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


def ensure_read_models(file: CollectedFile) -> bool:
    """Create the read-model tables, or recreate those whose columns changed; True when any was (re)made,
    in which case every source must be rebuilt."""
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


def rebuild(file: CollectedFile, sources: Sequence[Source]) -> int:
    """Replace the read-model rows of `sources` by ones rebuilt from their events; returns rows written."""
    written = 0
    by_name = {p.name: p for p in lifecycle_projections()}
    for source in sources:
        tables = fold(file, source)
        file.db.execute("BEGIN IMMEDIATE")
        try:
            for projection in by_name.values():
                file.db.execute(f'DELETE FROM "{projection.table}" WHERE source = ?', (source.name,))
            for name, table in tables.items():
                projection = by_name[name]
                marks = ", ".join("?" * (len(projection.columns) + 1))
                file.db.executemany(
                    f'INSERT INTO "{projection.table}" VALUES ({marks})',
                    [(source.name, *(row.get(c) for c in projection.columns)) for row in table.values()],
                )
                written += len(table)
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
            rows = [{"source": source.name, **table[key]} for key in sorted(table, key=repr)]
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
    """Every source's chain and heads, then its stored read-model rows against ones rebuilt from events."""
    report = CollectedReport()
    by_name = {p.name: p for p in lifecycle_projections()}
    for source in file.sources():
        check = check_source(file, source, keys)
        report.checks.append(check)
        if not check.ok:
            continue
        for name, rebuilt in fold(file, source).items():
            projection = by_name[name]
            stored = _stored_rows(file, projection, source)
            for key in sorted(set(stored) | set(rebuilt), key=repr):
                if stored.get(key) != rebuilt.get(key):
                    check.bad(
                        int((rebuilt.get(key) or stored.get(key) or {}).get("position") or 0),
                        f"{name}: row {list(key)} differs from the one rebuilt from its events",
                    )
                    break
    return report


def _stored_rows(file: CollectedFile, projection: Projection, source: Source) -> dict[Key, Row]:
    columns = ", ".join(f'"{c}"' for c in projection.columns)
    rows = file.query(f'SELECT {columns} FROM "{projection.table}" WHERE source = ?', (source.name,))
    out: dict[Key, Row] = {}
    for values in rows:
        row: dict[str, Any] = dict(zip(projection.columns, values, strict=True))
        out[projection.row_key(row)] = row
    return out
