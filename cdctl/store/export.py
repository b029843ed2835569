"""Reading an event log for export: the NDJSON lines a component serves to `cdctl collect`.

A component (controller, kubelet plugin) serves its own log, and the plugin the IMEX daemons' logs on its
node, read-only over HTTP (cdctl.store.logserver). This module does the reading, on a read-only sqlite3
connection of its own (never the component's reader or writer), a page of `PAGE` rows per worker-thread
hop, so a log of a million events streams in bounded memory and never blocks the component.

The stream (format 1), one JSON object per line:
- `{"kind": "header", ...}`: the log's name, component, chain scheme (`scheme`, `keyed_from`, `key_check`),
  its first available event and its head (`first`, `head`: position and hash) when the request began, and
  the request as understood (`after`, `since`, `domains`). The stream ends at that head.
- `{"kind": "anchor", "position": P, "hash": H}` before every run of consecutive events: the hash of the
  event before the run (64 zeros before position 1), from which the run's links are recomputed. At a
  compaction's horizon it is the anchor the compaction recorded (cdctl.store.compaction); `hash` is null
  only where the log holds neither.
- `{"kind": "event", ...}`: the full envelope: position, stream, version, type, schema_version, `data` and
  `metadata` as the stored JSON text (strings, so the chain can be recomputed byte for byte), recorded_at
  (the stored text) and hash.
- `{"kind": "horizon", ...}` after the header, when the log was compacted and the stream starts at or before
  its horizon (not narrowed by domain): the horizon (`position`, `record_position`, `anchor_hash`,
  `recorded_at`, `snapshot_digest`) and `snapshots` (each projection's view there: `name`, `state`), so that a
  collected copy folds its read models from the horizon as the log does (claims live before it included).
- `{"kind": "end", "events": N, "last": {...}}`: the stream is complete; a stream without it was cut.

Narrowing: `since` starts at the first event recorded at or after that instant and keeps every event after
it (one contiguous run); `domains` keeps the streams that name one of the domain uids (the domain's own
stream, and every claim or node stream with an event that mentions it), so runs have gaps, each with its
anchor. `after` with `after_hash` resumes a collection: a log that does not hold that hash at that position
is another log (`ContinuityBroken`); an `after` before the log's first available event (compacted since)
resumes from that event with its anchor. `LogReader.domain_uids` finds the uids a ComputeDomain name had,
for a collection narrowed by name. Used by cdctl.store.logserver; tests/store cover it directly.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import orjson

from cdctl.domain import hashchain
from cdctl.domain.errors import StoreError
from cdctl.store import compaction, integrity, schema

FORMAT = 1
PAGE = 1000
READ_BUSY_TIMEOUT_MS = 2000
T = TypeVar("T")
_COLUMNS = "position, stream, version, type, schema_version, data, metadata, recorded_at, hash"


class ContinuityBroken(StoreError):
    """The log does not hold the (position, hash) a collection stopped at: it is another log."""


@dataclass(frozen=True, slots=True)
class LogRef:
    """A log a component serves: its name on the endpoint, whose log it is, and its file."""

    name: str  # "controller", "plugin", "daemon/<domain uid>"
    component: str  # controller | kubelet-plugin | daemon
    path: Path
    domain_uid: str = ""
    state: str = "live"  # live: being written; kept: a gone domain's daemon log


@dataclass(frozen=True, slots=True)
class Point:
    position: int
    hash: str

    def to_json(self) -> dict[str, Any]:
        return {"position": self.position, "hash": self.hash}


@dataclass(frozen=True, slots=True)
class Summary:
    """A log's chain scheme, its first available event and its head (None when empty)."""

    scheme: str
    keyed_from: int
    key_check: str
    first: Point | None
    head: Point | None

    def to_json(self) -> dict[str, Any]:
        return {
            "scheme": self.scheme,
            "keyed_from": self.keyed_from,
            "key_check": self.key_check,
            "first": self.first.to_json() if self.first else None,
            "head": self.head.to_json() if self.head else None,
        }


@dataclass(frozen=True, slots=True)
class ExportRequest:
    after: int = 0
    after_hash: str = ""
    since: str = ""  # stored-time text (cdctl.store.sealing.format_time); empty: no lower bound
    domains: tuple[str, ...] = ()
    limit: int | None = None  # at most this many events (a caller paging by requests)


@dataclass
class _Plan:
    after: int
    head: int
    streams: list[str] | None  # None: every stream
    compacted_from: int | None = None  # `after` was before the first available event
    sent: int = 0
    last: Point | None = None


class LogReader:
    """A read-only sqlite3 connection to one log, used from worker threads one call at a time."""

    def __init__(self, ref: LogRef) -> None:
        self.ref = ref
        path = ref.path
        if not path.is_file() or path.is_symlink():
            raise StoreError(f"{path}: not a regular file")
        schema.check_identity(path)
        try:
            self.db = sqlite3.connect(
                f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False, isolation_level=None
            )
            self.db.execute(f"PRAGMA busy_timeout = {READ_BUSY_TIMEOUT_MS}")
            self.db.execute("PRAGMA query_only = ON")
            version = int(self.db.execute("PRAGMA user_version").fetchone()[0])
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{path}: cannot read: {exc}") from exc
        if version == 0:
            self.db.close()
            raise StoreError(f"{path}: empty file, not a cdctl event log")

    def close(self) -> None:
        self.db.close()

    def summary(self) -> Summary:
        recorded = integrity.read_scheme(self.db)
        first = self.db.execute("SELECT position, hash FROM events ORDER BY position LIMIT 1").fetchone()
        head = self.db.execute("SELECT position, hash FROM events ORDER BY position DESC LIMIT 1").fetchone()
        return Summary(
            recorded.scheme,
            recorded.keyed_from,
            recorded.key_check,
            Point(int(first[0]), str(first[1])) if first else None,
            Point(int(head[0]), str(head[1])) if head else None,
        )

    def hash_at(self, position: int) -> str | None:
        """The hash of the event at `position` (64 zeros at 0); None when the log does not hold it."""
        if position == 0:
            return hashchain.GENESIS
        row = self.db.execute("SELECT hash FROM events WHERE position = ?", (position,)).fetchone()
        return str(row[0]) if row else None

    def anchor(self, position: int) -> str | None:
        """The hash a run after `position` is chained to: the log's own, else, at the horizon of the log's
        latest compaction, the anchor that compaction recorded (its event is gone); else None."""
        found = self.hash_at(position)
        if found is None:
            horizon = compaction.read_horizon(self.db)
            if horizon is not None and horizon.position == position:
                return horizon.anchor_hash
        return found

    def horizon_line(self, request: ExportRequest, plan: _Plan) -> bytes | None:
        """The horizon and its snapshots, for a stream that starts at or before a completed horizon."""
        if request.domains:
            return None  # the snapshots hold every domain's claims: a narrowed stream does not carry them
        horizon = compaction.read_horizon(self.db)
        if horizon is None or horizon.pending or plan.after > horizon.position:
            return None
        snapshots = compaction.horizon_snapshots(self.db)
        return _line(
            {
                "kind": "horizon",
                "position": horizon.position,
                "record_position": horizon.record_position,
                "anchor_hash": horizon.anchor_hash,
                "recorded_at": horizon.recorded_at,
                "snapshot_digest": horizon.snapshot_digest,
                "snapshots": [{"name": name, "state": state} for name, _, state in snapshots],
            }
        )

    def plan(self, request: ExportRequest, summary: Summary) -> _Plan:
        head = summary.head.position if summary.head else 0
        after = request.after
        compacted_from: int | None = None
        if after > 0 and request.after_hash:
            found = self.hash_at(after)
            first = summary.first.position if summary.first else head + 1
            if after > head:
                raise ContinuityBroken(
                    f"{self.ref.name}: the log ends at position {head}, before {after} collected earlier:"
                    " it is another log (recreated), or its end was cut"
                )
            if found is None and after < first:
                compacted_from = first  # compacted since the last collection: resume at its horizon
            elif found != request.after_hash.lower():
                raise ContinuityBroken(
                    f"{self.ref.name}: position {after} has another hash than the one collected earlier:"
                    " it is another log (recreated)"
                )
        if request.since:
            row = self.db.execute(
                "SELECT MIN(position) FROM events WHERE recorded_at >= ? AND position <= ?",
                (request.since, head),
            ).fetchone()
            after = max(after, int(row[0]) - 1) if row and row[0] is not None else head
        streams: list[str] | None = None
        if request.domains:
            streams = self._domain_streams(request.domains, head)
        return _Plan(after, head, streams, compacted_from)

    def _domain_streams(self, domains: Sequence[str], head: int) -> list[str]:
        """Streams that name one of `domains`: their own stream, or any event whose data mentions the uid."""
        found: set[str] = set()
        for uid in domains:
            rows = self.db.execute(
                "SELECT DISTINCT stream FROM events"
                " WHERE position <= ? AND (stream = ? OR instr(data, ?) > 0)",
                (head, f"domain/{uid}", uid),
            )
            found.update(str(r[0]) for r in rows)
        return sorted(found)

    def domain_uids(self, namespace: str, name: str) -> list[str]:
        """The uids of the ComputeDomains `namespace/name` this log observed (several: it was recreated)."""
        rows = self.db.execute(
            "SELECT DISTINCT stream FROM events WHERE stream GLOB 'domain/*'"
            " AND type = 'ComputeDomainObserved' AND instr(data, ?) > 0 AND json_valid(data)"
            " AND json_extract(data, '$.namespace') = ? AND json_extract(data, '$.name') = ?",
            (name, namespace, name),
        )
        return [str(r[0]).removeprefix("domain/") for r in rows]

    def page(self, plan: _Plan, limit: int) -> list[tuple[Any, ...]]:
        after = max(plan.after, plan.last.position if plan.last else 0)
        if plan.streams is None:
            sql = (
                f"SELECT {_COLUMNS} FROM events WHERE position > ? AND position <= ?"
                " ORDER BY position LIMIT ?"
            )
            params: tuple[Any, ...] = (after, plan.head, limit)
        else:
            sql = (
                f"SELECT {_COLUMNS} FROM events WHERE position > ? AND position <= ?"
                " AND stream IN (SELECT value FROM json_each(?)) ORDER BY position LIMIT ?"
            )
            params = (after, plan.head, orjson.dumps(plan.streams).decode(), limit)
        return self.db.execute(sql, params).fetchall()


async def _hop(fn: Callable[..., T], *args: Any) -> T:
    """One call on a worker thread (the reader's connection is used by one call at a time)."""
    return await asyncio.to_thread(fn, *args)


def _line(value: dict[str, Any]) -> bytes:
    return orjson.dumps(value) + b"\n"


def header(ref: LogRef, summary: Summary, request: ExportRequest, extra: dict[str, Any]) -> bytes:
    return _line(
        {
            "kind": "header",
            "format": FORMAT,
            "log": ref.name,
            "component": ref.component,
            "domain_uid": ref.domain_uid,
            "state": ref.state,
            **summary.to_json(),
            "after": request.after,
            "since": request.since,
            "domains": list(request.domains),
            **extra,
        }
    )


def _encode_page(reader: LogReader, plan: _Plan, rows: list[tuple[Any, ...]]) -> bytes:
    out: list[bytes] = []
    previous = plan.last.position if plan.last else plan.after
    for row in rows:
        position, stream, version, type_, schema_version, data, metadata, recorded_at, hash_ = row
        if position != previous + 1 or plan.sent == 0:
            anchor = {"kind": "anchor", "position": position - 1, "hash": reader.anchor(position - 1)}
            out.append(_line(anchor))
        out.append(
            _line(
                {
                    "kind": "event", "position": position, "stream": stream, "version": version,
                    "type": type_, "schema_version": schema_version, "data": data, "metadata": metadata,
                    "recorded_at": recorded_at, "hash": hash_,
                }
            )
        )  # fmt: skip
        previous = position
        plan.sent += 1
        plan.last = Point(int(position), str(hash_))
    return b"".join(out)


async def export_lines(
    ref: LogRef, request: ExportRequest, extra: dict[str, Any] | None = None
) -> AsyncGenerator[bytes, None]:
    """The NDJSON stream of `ref` for `request`, a chunk (header, or a page of lines) at a time.

    Raises ContinuityBroken or StoreError before the first chunk, never after it: a failure mid-stream
    ends the iteration without the `end` line.
    """
    reader = await _hop(LogReader, ref)
    try:
        summary = await _hop(reader.summary)
        plan = await _hop(reader.plan, request, summary)
        fields = dict(extra or {})
        if plan.compacted_from is not None:
            fields["compacted_from"] = plan.compacted_from
        yield header(ref, summary, request, fields)
        horizon = await _hop(reader.horizon_line, request, plan)
        if horizon is not None:
            yield horizon
        budget = request.limit
        while budget is None or budget > 0:
            size = PAGE if budget is None else min(PAGE, budget)
            rows = await _hop(reader.page, plan, size)
            if not rows:
                break
            chunk = await _hop(_encode_page, reader, plan, rows)
            yield chunk
            if budget is not None:
                budget -= len(rows)
            if len(rows) < size:
                break
        more = budget is not None and budget <= 0 and (plan.last.position if plan.last else 0) < plan.head
        yield _line(
            {
                "kind": "end",
                "events": plan.sent,
                "last": plan.last.to_json() if plan.last else None,
                "head": summary.head.to_json() if summary.head else None,
                "more": more,
            }
        )
    finally:
        await _hop(reader.close)
