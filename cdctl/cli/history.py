"""`cdctl events | sql | replay | verify | history | streams`: read any event log file, never write it.

Operators' tools for post-mortems: tail and filter the log, run read-only SQL over the lifecycle views,
rebuild the projections as of any position or instant, check integrity, show one object's timeline (by
stream, uid, or kubectl-style name: cdctl.projections.timeline), and list the streams a log holds. Each also
reads a collected file (`cdctl collect`), across its sources (cdctl.cli.collected). These names and flags are
a contract. Thin: flags -> store/projections calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import click
from sqlalchemy.exc import DBAPIError

from cdctl.cli import collected
from cdctl.cli.errors import fail, guarded, parse_time, run
from cdctl.cli.options import db_option
from cdctl.cli.output import (
    Column,
    Printer,
    columns_of,
    output_option,
    print_document,
    print_items,
    summarize,
)
from cdctl.domain.errors import InvalidInput, StoreError, StoreLocked
from cdctl.domain.events import RecordedEvent
from cdctl.projections.lifecycle import lifecycle_projections
from cdctl.projections.replay import VerifyReport, replay, verify_chain, verify_projections
from cdctl.projections.sinks import SqliteSink
from cdctl.projections.timeline import LIMIT as TIMELINE_LIMIT
from cdctl.projections.timeline import Line, timeline
from cdctl.store.collected import kind_of
from cdctl.store.integrity import read_key_file
from cdctl.store.schema import load_migrations
from cdctl.store.sqlite import SELECT_EVENTS, SqliteEventStore, row_to_event

source_option = click.option(
    "--source", help="Collected file: only sources matching this glob (kubelet-plugin/*, daemon/NODE/*)."
)
FOLLOW_INTERVAL = 0.5


async def _open(db: Path) -> SqliteEventStore:
    return await SqliteEventStore.open(db, read_only=True)


def _is_collected(db: Path) -> bool:
    return kind_of(db) == "collected"


def _log_only(db: Path, **options: object) -> None:
    """Options that only a collected file takes, refused for an event log."""
    for name, value in options.items():
        if value is not None:
            raise InvalidInput(
                "command line", f"--{name}", f"{db} is one event log; --{name} is for collected files"
            )


async def _select_events(
    store: SqliteEventStore, after: int, stream: str | None, type_: str | None, since: str | None
) -> list[RecordedEvent]:
    sql = SELECT_EVENTS
    where, params = ["position > ?"], [after]
    if stream:
        where.append("stream GLOB ?")
        params.append(stream)  # type: ignore[arg-type]
    if type_:
        where.append("type GLOB ?")
        params.append(type_)  # type: ignore[arg-type]
    if since:
        where.append("recorded_at >= ?")
        params.append(since)  # type: ignore[arg-type]
    rows = await store.query(
        f"{sql} WHERE {' AND '.join(where)} ORDER BY position LIMIT 10000", tuple(params)
    )
    return [row_to_event(r, store.path) for r in rows]


@click.command()
@db_option
@click.option("--stream", help="Only this stream; glob patterns allowed (claim/*, domain/<uid>).")
@click.option("--type", "type_", help="Only events of this type; glob patterns allowed (Claim*, *Failed).")
@click.option("--since", help="Only events recorded at or after: ISO 8601, or an age like 15m, 2h, 1d.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing events as they are appended.")
@source_option
@click.option("--node", help="Collected file: only sources of this node.")
@output_option
@guarded
def events(
    db: Path,
    stream: str | None,
    type_: str | None,
    since: str | None,
    follow: bool,
    source: str | None,
    node: str | None,
    output: str,
) -> None:
    """List the events of an event log, oldest first (a collected file: every source's, by time)."""
    since_text = parse_time(since, "--since").isoformat(timespec="microseconds") if since else None
    if _is_collected(db):
        if follow:
            raise InvalidInput("command line", "--follow", f"{db} is a collected file: it does not grow")
        printer = Printer(output, event_columns(True), "events")
        with collected.open_file(db) as file:
            for page in collected.events_pages(file, stream, type_, since_text, source, node):
                printer.add(event_items(page, True))
        printer.close()
        return
    _log_only(db, source=source, node=node)
    printer = Printer(output, event_columns(False), "events", follow=follow)

    async def main() -> None:
        async with await _open(db) as store:
            after = 0
            while True:
                batch = await _select_events(store, after, stream, type_, since_text)
                if batch:
                    after = batch[-1].position
                    printer.add(event_items((Line("", e) for e in batch), False))
                    continue
                if not follow:
                    return
                await asyncio.sleep(FOLLOW_INTERVAL)  # another process writes the file: nothing to wake us

    run(main())
    printer.close()


def event_columns(with_source: bool) -> list[Column]:
    """An event's row: where and when, its type, a summary of its data; -o wide adds the actor and data."""
    columns = [
        Column("POSITION", lambda i: i["position"]),
        Column("TIME", lambda i: i["recorded_at"][:23] + "Z"),  # UTC to the millisecond, like a log line
        Column("STREAM", lambda i: i["stream"]),
        Column("VERSION", lambda i: i["version"]),
        Column("TYPE", lambda i: i["type"]),
        Column("SUMMARY", lambda i: summarize(i["data"])),
        Column("ACTOR", lambda i: _actor(i["metadata"]), wide=True),
        Column("DATA", lambda i: i["data"], wide=True),
    ]
    return [Column("SOURCE", lambda i: i["source"]), *columns] if with_source else columns


def _actor(metadata: dict[str, Any]) -> str:
    actor = metadata.get("actor") if isinstance(metadata, dict) else None
    if not isinstance(actor, dict):
        return ""
    return "/".join(str(actor[k]) for k in ("component", "pod") if actor.get(k))


def event_items(lines: Iterable[Line], with_source: bool) -> list[dict[str, Any]]:
    """Each event as `RecordedEvent.to_json()`, with its `source` in a collected file (docs/cli.md)."""
    return [({"source": line.source} if with_source else {}) | line.event.to_json() for line in lines]


@click.command()
@db_option
@click.argument("statement")
@output_option
@guarded
def sql(db: Path, statement: str, output: str) -> None:
    """Run one read-only SQL statement (the file is opened read-only; writes are refused).

    Views: claim_lifecycle, channel_allocations, checkpoint_transitions, domain_history, channel_assignments
    (the controller's IMEX channels under channel isolation), and events; in a
    collected file each has a `source` column, and `sources`, `ranges`, `fetches` and `collections` say what
    was collected.
    """
    if _is_collected(db):
        with collected.open_file(db) as file:
            names, found = collected.sql(file, statement)
        _print_rows(names, found, output, "rows")
        return

    async def main() -> tuple[list[str], list[Sequence[Any]]]:
        async with await _open(db) as store:
            try:
                return await store.query_with_columns(statement)
            except DBAPIError as exc:
                message = str(exc.orig)
                if "readonly" in message or "read-only" in message or "query_only" in message:
                    raise StoreError(f"{db}: cdctl sql is read-only; statement refused ({message})") from None
                if "locked" in message:
                    raise StoreLocked(f"{db}: event log is locked") from None
                raise InvalidInput("cdctl sql", "STATEMENT", message) from None

    columns, rows = run(main())
    _print_rows(columns, rows, output, "rows")


def _print_rows(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], output: str, noun: str, upper: bool = False
) -> None:
    """Rows of a query as objects keyed by column name; the headers are the names (sql: as written)."""
    print_items(
        output, columns_of(columns, upper), noun, [dict(zip(columns, row, strict=True)) for row in rows]
    )


@click.command("replay")
@db_option
@click.option("--at", "at", help="Rebuild as of this instant: ISO 8601, or an age like 15m, 2h, 1d.")
@click.option("--position", type=click.IntRange(min=0), help="Rebuild as of this log position.")
@source_option
@output_option
@guarded
def replay_command(db: Path, at: str | None, position: int | None, source: str | None, output: str) -> None:
    """Print the state the projections had at a point in the log (default: now).

    A collected file: every source's read models as of `--at`, with a `source` column (`--position` is per
    source: name one with `--source`). On a compacted log, a point before its horizon exits 5, naming the
    horizon (position and time).
    """
    if at is not None and position is not None:
        fail("--at and --position are exclusive: give one", 2)
    until = parse_time(at, "--at") if at else None
    if _is_collected(db):
        with collected.open_file(db) as file:
            tables = collected.replay(file, until, source, position)
        _print_replay({"position": position, "events": None, "tables": tables}, output, ("source",))
        return
    _log_only(db, source=source)

    async def main() -> Any:
        async with await _open(db) as store:
            return await replay(store, lifecycle_projections(), position=position, until=until)

    result = run(main())
    if output in ("table", "wide"):
        click.echo(f"state after position {result.position} ({result.events} events folded)\n")
    _print_replay(result.to_json(), output, ())


def _print_replay(document: dict[str, Any], output: str, first: tuple[str, ...]) -> None:
    """Replay's one document (docs/cli.md); as a table, one titled block per read model, rows in log order."""
    if output not in ("table", "wide"):
        print_document(output, document)
        return
    projections = {p.name: p for p in lifecycle_projections()}
    for index, (name, rows) in enumerate(document["tables"].items()):
        click.echo(f"{chr(10) if index else ''}{name}:")
        columns = columns_of((*first, *projections[name].columns), summarized=("detail",))
        print_items(output, columns, f"{name} rows", rows)


def parse_head(value: str) -> tuple[int, str]:
    """`POSITION:HASH`, as a component publishes its log's head (metrics, daemon log lines)."""
    position, _, hash_ = value.partition(":")
    hash_ = hash_.strip().lower()
    if not position.strip().isdigit() or len(hash_) != 64 or any(c not in "0123456789abcdef" for c in hash_):
        raise InvalidInput(
            "command line", "--expect-head", f"{value!r} is not POSITION:HASH (a position and 64 hex digits)"
        )
    return int(position), hash_


@click.command()
@db_option
@click.option(
    "--key-file", "key_files", envvar="CDCTL_LOG_KEY_FILE", type=click.Path(path_type=Path), multiple=True,
    help="The log's key, for a keyed log (env CDCTL_LOG_KEY_FILE; the chart's Secret). A collected file:"
    " repeatable, each keyed source is checked with the key that is its own.",
)  # fmt: skip
@click.option(
    "--expect-head", "expect_heads", multiple=True, metavar="POSITION:HASH",
    help="A head the component published (metrics cdctl_event_log_head_info); the log must still hold it.",
)  # fmt: skip
@output_option
@guarded
def verify(db: Path, key_files: tuple[Path, ...], expect_heads: tuple[str, ...], output: str) -> None:
    """Check the hash chain (keyed or not), published heads, and that rebuilt projections match.

    Without a published head, a log cut at its end still verifies: compare with a head recorded outside the
    file (`--expect-head`, repeatable) to detect it. A collected file: every source's chain run by run, the
    heads each component served and published when it was collected, and the read models.
    """
    keys = [read_key_file(path, "--key-file") for path in key_files]
    if _is_collected(db):
        if expect_heads:
            raise InvalidInput(
                "command line",
                "--expect-head",
                "a collected file records each source's heads; verify checks them",
            )
        with collected.open_file(db) as file:
            collected.verify(file, keys, output)
        return
    if len(keys) > 1:
        raise InvalidInput("command line", "--key-file", f"{db} is one event log: give one key")
    heads = [parse_head(value) for value in expect_heads]
    key = keys[0] if keys else None

    async def main() -> VerifyReport:
        report = VerifyReport()
        async with await _open(db) as store:
            latest = len(load_migrations())
            if store.schema_version < latest:
                raise StoreError(
                    f"{db}: schema version {store.schema_version}, older than this cdctl's {latest}:"
                    " its views cannot be compared; verify it with the cdctl that wrote it,"
                    " or let a writer migrate it first"
                )
            await verify_chain(store, report, key, heads)
            if report.ok:
                await verify_projections(store, lifecycle_projections(), SqliteSink(store), report)
        return report

    report = run(main())
    if output not in ("table", "wide"):
        print_document(output, _verify_document(db, report, key is not None, len(heads)))
    elif not report.ok:
        for problem in report.problems:
            click.echo(f"cdctl: verify: {problem}", err=True)
    if not report.ok:
        fail(f"{db}: verification failed; first bad position {report.first_bad_position}", 1)
    if output not in ("table", "wide"):
        return
    chain = "keyed hash chain (HMAC-SHA256)" if key is not None else "hash chain"
    matched = f", {len(heads)} published head{'s' if len(heads) != 1 else ''} held" if heads else ""
    for note in report.notes:
        click.echo(f"cdctl: verify: {note}", err=True)
    horizon = report.horizon
    compacted = (
        f"; compacted up to position {horizon.position} (recorded up to {horizon.recorded_at}), the chain"
        f" checked from its anchor{' (compaction still in progress)' if horizon.pending else ''}"
        if horizon is not None
        else ""
    )
    click.echo(
        f"ok: {report.events} events, {chain} intact{matched},"
        f" {len(lifecycle_projections())} projections match{compacted}"
    )


def _verify_document(db: Path, report: VerifyReport, keyed: bool, heads: int) -> dict[str, Any]:
    """verify's JSON shape (docs/cli.md): the same for an event log (one source) and a collected file."""
    horizon = report.horizon
    source = {
        "source": str(db), "ok": report.ok, "events": report.events, "keyed": keyed,
        "heads_held": heads if report.ok else 0, "first_bad_position": report.first_bad_position,
        "problems": report.problems, "notes": report.notes, "runs": 1,
        "horizon": None if horizon is None else {
            "position": horizon.position, "recorded_at": horizon.recorded_at, "pending": horizon.pending,
        },
    }  # fmt: skip
    return {"ok": report.ok, "events": report.events, "sources": [source], "problems": []}


@click.command()
@db_option
@click.argument("subject")
@click.option("--since", help="Only events recorded at or after: ISO 8601, or an age like 15m, 2h, 1d.")
@click.option("--until", help="Only events recorded at or before: ISO 8601, or an age.")
@output_option
@guarded
def history(db: Path, subject: str, since: str | None, until: str | None, output: str) -> None:
    """One object's timeline, in time order (a collected file: across its sources, each line's source).

    SUBJECT is what kubectl calls it: computedomain/NAMESPACE/NAME, resourceclaim/NAMESPACE/NAME or
    node/NAME (a name given to a recreated object lists its uids: pick one); or a stream (claim/<uid>,
    domain/<uid>, plugin/<node>), or a bare uid or node name. A domain's or claim's timeline is every stream
    that names its uid: the controller's decisions, the plugins' prepares, the daemons' IMEX restarts.
    """
    bounds = [
        parse_time(value, option).isoformat(timespec="microseconds") if value else ""
        for value, option in ((since, "--since"), (until, "--until"))
    ]
    said, lines = collected.read_events(db, lambda events: timeline(events, subject, *bounds))
    if not lines:
        raise InvalidInput("cdctl history", "SUBJECT", f"no events for {subject!r} in {db}")
    click.echo(said, err=True)  # what SUBJECT resolved to; stderr, so JSON on stdout stays clean
    if len(lines) >= TIMELINE_LIMIT:
        click.echo(f"showing the first {TIMELINE_LIMIT} events: narrow with --since and --until", err=True)
    with_source = _is_collected(db)
    print_items(output, event_columns(with_source), "events", event_items(lines, with_source))


@click.command()
@db_option
@click.option("--stream", help="Only streams matching this glob (claim/*, domain/<uid>).")
@output_option
@guarded
def streams(db: Path, stream: str | None, output: str) -> None:
    """What a log holds: each stream with its event count and first and last times (a collected file: per
    source)."""
    if _is_collected(db):
        with collected.open_file(db) as file:
            columns, rows = collected.streams_rows(file, stream)
    else:

        async def main() -> list[tuple[Any, ...]]:
            async with await _open(db) as store:
                where, params = ("WHERE stream GLOB ?", (stream,)) if stream else ("", ())
                return await store.query(
                    "SELECT stream, COUNT(*), MIN(recorded_at), MAX(recorded_at) FROM events"
                    f" {where} GROUP BY stream ORDER BY stream",
                    params,
                )

        columns, rows = ["stream", "events", "first", "last"], run(main())
    _print_rows(columns, rows, output, "streams", upper=True)
