"""The history commands on a collected file (`cdctl collect`): events, sql, replay and verify across sources.

cdctl.cli.history hands a collected file here (cdctl.store.collected.kind_of tells it from an event log).
Every line and row says its source (component/node or pod, and generation); events come merged by
recorded_at; `sql` reads the `events` view and the read models, each with a `source` column; `replay --at`
folds every source up to that instant (positions are per source: `--position` needs `--source`); `verify`
checks each source's chain run by run, keyed ones with the key among `--key-file`s whose check matches, and
each recorded head, then the read models. Exit codes as for an event log (1 verification failed).
`read_events(db, work)` runs a reading over either kind of file (history, timeline, explain).
"""

from __future__ import annotations

import asyncio
import fnmatch
import sqlite3
from collections.abc import Callable, Coroutine, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import click

from cdctl.cli.errors import fail, run
from cdctl.cli.output import print_document
from cdctl.domain.errors import InvalidInput, StoreError
from cdctl.projections import collected as views
from cdctl.projections.base import in_log_order
from cdctl.projections.lifecycle import lifecycle_projections
from cdctl.projections.replay import Rebuild
from cdctl.projections.timeline import EventSource, Line
from cdctl.store.collected import CollectedFile, Source, kind_of
from cdctl.store.sqlite import SqliteEventStore, row_to_event

T = TypeVar("T")

PAGE = 10_000


def open_file(db: Path) -> CollectedFile:
    return CollectedFile.open(db, read_only=True)


def read_events(db: Path, work: Callable[[EventSource], Coroutine[Any, Any, T]]) -> T:
    """Run `work` over the events of `db`, a collected file or an event log (each opened read-only)."""
    if kind_of(db) == "collected":
        with open_file(db) as file:
            return run(work(event_source(file)))

    async def from_log() -> T:
        async with await SqliteEventStore.open(db, read_only=True) as store:
            return await work(EventSource(lambda sql, params: store.query(sql, params), False, str(db)))

    return run(from_log())


def event_source(file: CollectedFile) -> EventSource:
    async def query(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        try:
            return await asyncio.to_thread(file.query, sql, params)
        except sqlite3.OperationalError as exc:
            raise StoreError(f"{file.path}: {exc}") from None

    return EventSource(query, collected=True, where=str(file.path))


def select_sources(file: CollectedFile, pattern: str | None, node: str | None = None) -> list[Source]:
    sources = [s for s in file.sources() if pattern is None or fnmatch.fnmatchcase(s.name, pattern)]
    sources = [s for s in sources if node is None or s.node == node]
    if pattern is not None and not sources:
        names = ", ".join(s.name for s in file.sources()) or "none"
        raise InvalidInput("command line", "--source", f"{pattern!r} matches no source (sources: {names})")
    return sources


def events_pages(
    file: CollectedFile,
    stream: str | None,
    type_: str | None,
    since: str | None,
    source: str | None,
    node: str | None,
) -> Iterator[list[Line]]:
    """Events of the chosen sources, merged by recorded_at, a page at a time."""
    where: list[str] = ["1"]
    params: list[Any] = []
    if source is not None or node is not None:
        ids = [s.id for s in select_sources(file, source, node)]
        where.append(f"source_id IN ({','.join('?' * len(ids)) or 'NULL'})")
        params += ids
    for column, value, op in (
        ("stream", stream, "GLOB"),
        ("type", type_, "GLOB"),
        ("recorded_at", since, ">="),
    ):
        if value:
            where.append(f"{column} {op} ?")
            params.append(value)
    after: tuple[Any, ...] = ("", "", 0)
    while True:
        rows = file.query(
            "SELECT source, position, stream, version, type, schema_version, data, metadata, recorded_at,"
            f" hash FROM events WHERE {' AND '.join(where)} AND (recorded_at, source, position) > (?, ?, ?)"
            f" ORDER BY recorded_at, source, position LIMIT {PAGE}",
            [*params, *after],
        )
        if not rows:
            return
        yield [Line(str(r[0]), row_to_event(r[1:], f"{file.path} ({r[0]})")) for r in rows]
        after = (rows[-1][8], rows[-1][0], rows[-1][1])


def sql(file: CollectedFile, statement: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    try:
        return file.query_with_columns(statement)
    except sqlite3.DatabaseError as exc:
        message = str(exc)
        if "readonly" in message or "read-only" in message or "query_only" in message:
            raise StoreError(f"{file.path}: cdctl sql is read-only; statement refused ({message})") from None
        raise InvalidInput("cdctl sql", "STATEMENT", message) from None


def replay(
    file: CollectedFile, until: datetime | None, source: str | None, position: int | None
) -> dict[str, list[dict[str, Any]]]:
    sources = select_sources(file, source)
    if position is not None:
        if source is None or len(sources) != 1:
            raise InvalidInput(
                "command line", "--position",
                "positions are per source in a collected file: name one with --source (or use --at)",
            )  # fmt: skip
        limit = position
        tables: dict[str, list[dict[str, Any]]] = {p.name: [] for p in lifecycle_projections()}
        rebuilt = Rebuild(views.projections_for(sources[0].component))
        rebuilt.feed(e for e in views.source_events(file, sources[0]) if e.position <= limit)
        for name, table in rebuilt.tables.items():
            tables[name] = [{"source": sources[0].name, **table[k]} for k in in_log_order(table)]
        return tables
    return views.replay(file, until, sources)


def verify(file: CollectedFile, keys: Sequence[bytes], output: str = "table") -> None:
    report = views.verify(file, keys)
    if not report.checks:
        fail(f"{file.path}: a collected file without sources: nothing to verify", 1)
    if output not in ("table", "wide"):
        print_document(output, verify_document(report))
        failed = [c for c in report.checks if not c.ok]
        if failed or not report.ok:
            fail(f"{file.path}: verification failed for {len(failed)} of {len(report.checks)} sources", 1)
        return
    for check in report.checks:
        state = "ok" if check.ok else "FAILED"
        heads = f", {check.heads_held} recorded head{'s' if check.heads_held != 1 else ''} held"
        chain = "keyed hash chain" if check.source.keyed else "hash chain"
        click.echo(
            f"{state}: {check.source.name}: {check.events} events in {check.ranges} run"
            f"{'s' if check.ranges != 1 else ''}, {chain}{heads}"
        )
        for note in check.notes:
            click.echo(f"  note: {note}")
        for problem in check.problems:
            click.echo(f"cdctl: verify: {check.source.name}: {problem}", err=True)
    failed = [c for c in report.checks if not c.ok]
    if failed:
        first = failed[0]
        fail(
            f"{file.path}: verification failed for {len(failed)} of {len(report.checks)} sources; first:"
            f" {first.source.name} at position {first.first_bad_position}",
            1,
        )
    click.echo(f"ok: {len(report.checks)} sources, {report.events} events, chains and read models intact")


def verify_document(report: views.CollectedReport) -> dict[str, Any]:
    """verify's JSON shape for a collected file: one entry per source (docs/cli.md)."""
    sources = [
        {
            "source": c.source.name, "ok": c.ok, "events": c.events, "keyed": c.source.keyed,
            "heads_held": c.heads_held, "first_bad_position": c.first_bad_position, "problems": c.problems,
            "notes": c.notes, "horizon": None, "runs": c.ranges,
        }
        for c in report.checks
    ]  # fmt: skip
    return {"ok": report.ok, "events": report.events, "sources": sources, "problems": report.problems}


def streams_rows(file: CollectedFile, pattern: str | None) -> tuple[list[str], list[tuple[Any, ...]]]:
    where, params = ("WHERE stream GLOB ?", [pattern]) if pattern else ("", [])
    rows = file.query(
        "SELECT source, stream, COUNT(*), MIN(recorded_at), MAX(recorded_at) FROM events"
        f" {where} GROUP BY source, stream ORDER BY source, stream",
        params,
    )
    return ["source", "stream", "events", "first", "last"], rows
