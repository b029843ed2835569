"""A collected file: many components' event logs in one SQLite file (schema: cdctl/store/collected.sql).

Written by `cdctl collect` (cdctl.collect) and read by the history commands. Every event keeps its source
(component, node, pod, log) and its original position and hash; `ranges` say which runs of positions each
source holds and the hash each run is chained to, so each source's chain is checked on its own
(`check_sources`), keyed or not, and against the heads each component served and published when it was
read (`fetches`). The file is `application_id` 'cdcc' (an event log is 'cdct'): `kind_of(path)` tells them
apart. Plain sqlite3, used from one thread at a time (the collector runs its writes on a worker thread).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from cdctl.domain import hashchain
from cdctl.domain.errors import StoreError
from cdctl.store import schema

APPLICATION_ID = int.from_bytes(b"cdcc", "big")
SCHEMA_VERSION = 1
SCHEMA_FILE = Path(__file__).with_name("collected.sql")
FILE_MODE = 0o600  # it holds every tenant's claims, as the logs it was collected from
EVENT_COLUMNS = ("position", "stream", "version", "type", "schema_version", "data", "metadata", "recorded_at")
EventRow = tuple[int, str, int, str, int, str, str, str, str]  # EVENT_COLUMNS + hash


def kind_of(path: Path) -> str:
    """'collected' for a collected file, else 'log': opening it as an event log says what is wrong with it
    (missing, a directory, another application's database)."""
    if not path.is_file():
        return "log"
    if path.stat().st_size == 0:
        return "log"  # an empty file: the event log's open says so
    try:
        with path.open("rb") as handle:
            if handle.read(len(schema.SQLITE_HEADER)) != schema.SQLITE_HEADER:
                schema.check_identity(path)  # raises: not an SQLite database
                return "log"
    except OSError as exc:
        raise StoreError(f"{path}: cannot read: {exc}") from exc
    application_id, _ = schema.read_identity(path)  # a locked file: StoreLocked, at once
    if application_id == APPLICATION_ID:
        return "collected"
    schema.check_identity(path)  # raises for another application's database
    return "log"


def now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True, slots=True)
class Source:
    id: int
    name: str
    component: str
    node: str
    pod: str
    log: str
    domain_uid: str
    generation: int
    scheme: str
    keyed_from: int
    key_check: str
    first_position: int | None
    first_hash: str | None

    @property
    def keyed(self) -> bool:
        return self.scheme == hashchain.KEYED


@dataclass(frozen=True, slots=True)
class Fetch:
    """What one run did with one source (a row of `fetches`)."""

    component: str
    node: str
    pod: str
    log: str
    status: str  # ok | skipped | cut
    error: str = ""
    source_id: int | None = None
    after_position: int = 0
    events: int = 0
    head: tuple[int, str] | None = None
    published: tuple[int, str] | None = None


@dataclass
class RangeState:
    """The run being extended while a stream is stored: its first and last positions and last hash."""

    first: int
    last: int
    last_hash: str


_SOURCE_COLUMNS = (
    "id, name, component, node, pod, log, domain_uid, generation, scheme, keyed_from, key_check,"
    " first_position, first_hash"
)


class CollectedFile:
    """One collected file, open for writing (`create`/`open`) or reading (`read_only=True`)."""

    def __init__(self, path: Path, db: sqlite3.Connection, read_only: bool) -> None:
        self.path = path
        self.db = db
        self.read_only = read_only

    @classmethod
    def open(cls, path: Path, *, read_only: bool = False, create: bool = False) -> CollectedFile:
        exists = path.exists() and not (create and path.is_file() and path.stat().st_size == 0)
        if exists and kind_of(path) != "collected":
            raise StoreError(f"{path}: an event log or another file, not a collected file")
        if not exists and (read_only or not create):
            raise StoreError(f"{path}: no such collected file")
        if not exists and not path.parent.is_dir():
            raise StoreError(f"{path}: directory {path.parent} does not exist")
        try:
            if read_only:
                db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
                db.execute("PRAGMA query_only = ON")
            else:
                if not exists:
                    path.touch(mode=FILE_MODE)
                    path.chmod(FILE_MODE)  # whatever the umask, or the mode of an empty file given
                db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
                db.execute("PRAGMA journal_mode = WAL")
                db.execute("PRAGMA synchronous = NORMAL")
            db.execute("PRAGMA busy_timeout = 5000")
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{path}: cannot open: {exc}") from exc
        if version > SCHEMA_VERSION:
            db.close()
            raise StoreError(f"{path}: collected file schema {version} is newer than this cdctl's: upgrade")
        if version == 0:
            if read_only:
                db.close()
                raise StoreError(f"{path}: empty file, not a collected file")
            script = SCHEMA_FILE.read_text()
            db.executescript(f"BEGIN IMMEDIATE;\n{script}\nPRAGMA user_version = {SCHEMA_VERSION};\nCOMMIT;")
        return cls(path, db, read_only)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> CollectedFile:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ---- collections and sources ------------------------------------------------------------------------
    def collections(self) -> list[dict[str, Any]]:
        cursor = self.db.execute("SELECT * FROM collections ORDER BY id")
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def begin_collection(
        self, server: str, namespace: str, since: str, domains: Sequence[str], nodes: Sequence[str]
    ) -> int:
        cursor = self.db.execute(
            "INSERT INTO collections (started_at, server, namespace, since, domains, nodes)"
            " VALUES (?,?,?,?,?,?)",
            (now_text(), server, namespace, since, _json(sorted(domains)), _json(sorted(nodes))),
        )
        return int(cursor.lastrowid or 0)

    def finish_collection(self, collection: int, outcome: str) -> None:
        self.db.execute(
            "UPDATE collections SET finished_at = ?, outcome = ? WHERE id = ?",
            (now_text(), outcome, collection),
        )

    def sources(self) -> list[Source]:
        rows = self.db.execute(f"SELECT {_SOURCE_COLUMNS} FROM sources ORDER BY name").fetchall()
        return [Source(*row) for row in rows]

    def add_source(
        self,
        *,
        component: str,
        node: str,
        pod: str,
        log: str,
        domain_uid: str,
        scheme: tuple[str, int, str],
        first: tuple[int, str] | None,
    ) -> Source:
        """A new source, or the next generation of the one with the same name (its log was recreated)."""
        base = source_name(component, node, pod, log, domain_uid)
        generation = 1 + int(
            self.db.execute(
                "SELECT COALESCE(MAX(generation), 0) FROM sources WHERE name = ? OR name GLOB ?",
                (base, f"{base}#*"),
            ).fetchone()[0]
        )
        name = base if generation == 1 else f"{base}#{generation}"
        cursor = self.db.execute(
            "INSERT INTO sources (name, component, node, pod, log, domain_uid, generation, scheme,"
            " keyed_from, key_check, first_position, first_hash) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (name, component, node, pod, log, domain_uid, generation, *scheme,
             first[0] if first else None, first[1] if first else None),
        )  # fmt: skip
        return self.source(int(cursor.lastrowid or 0))

    def source(self, source_id: int) -> Source:
        row = self.db.execute(f"SELECT {_SOURCE_COLUMNS} FROM sources WHERE id = ?", (source_id,)).fetchone()
        if row is None:
            raise StoreError(f"{self.path}: no source {source_id}")
        return Source(*row)

    def update_source(
        self, source_id: int, *, pod: str, scheme: tuple[str, int, str], first: tuple[int, str] | None
    ) -> None:
        """The pod it was read through this time, its chain scheme (an unkeyed log may adopt a key), and its
        first event if it had none when first seen (an empty log)."""
        self.db.execute(
            "UPDATE sources SET pod = ?, scheme = ?, keyed_from = ?, key_check = ?,"
            " first_position = COALESCE(first_position, ?), first_hash = COALESCE(first_hash, ?)"
            " WHERE id = ?",
            (pod, *scheme, first[0] if first else None, first[1] if first else None, source_id),
        )

    def last_point(self, source_id: int) -> tuple[int, str] | None:
        row = self.db.execute(
            "SELECT position, hash FROM source_events WHERE source_id = ? ORDER BY position DESC LIMIT 1",
            (source_id,),
        ).fetchone()
        return (int(row[0]), str(row[1])) if row else None

    def hash_at(self, source_id: int, position: int) -> str | None:
        row = self.db.execute(
            "SELECT hash FROM source_events WHERE source_id = ? AND position = ?", (source_id, position)
        ).fetchone()
        return str(row[0]) if row else None

    # ---- storing a stream -------------------------------------------------------------------------------
    def open_range(self, source_id: int) -> RangeState | None:
        """The source's last run, which a stream continuing at its end extends."""
        row = self.db.execute(
            "SELECT first_position, last_position FROM ranges WHERE source_id = ?"
            " ORDER BY first_position DESC LIMIT 1",
            (source_id,),
        ).fetchone()
        if row is None:
            return None
        return RangeState(int(row[0]), int(row[1]), self.hash_at(source_id, int(row[1])) or "")

    def store_batch(
        self, source_id: int, items: Iterable[tuple[str, Any]], current: RangeState | None
    ) -> tuple[RangeState | None, int]:
        """Store a batch of a stream's items in one transaction: ("anchor", (position, hash)) starts a run,
        ("event", EventRow) is stored and extends it. Returns the run being extended and how many events
        were stored. An anchor that contradicts what the file holds raises StoreError."""
        rows: list[tuple[Any, ...]] = []
        extended: dict[int, int] = {}  # run's first position -> its new last position
        opened: list[tuple[int, int, int, str | None]] = []
        pending_anchor: tuple[int, str | None] | None = None
        for kind, value in items:
            if kind == "anchor":
                position, hash_ = int(value[0]), value[1]
                if current is not None and position == current.last:
                    if hash_ is not None and hash_ != current.last_hash:
                        raise StoreError(
                            f"{self.path}: the source's hash at position {position} is not the one"
                            " collected before: its log was rewritten"
                        )
                    pending_anchor = None
                else:
                    pending_anchor, current = (position, hash_), None
                continue
            row: EventRow = value
            position = row[0]
            rows.append((source_id, *row))
            if current is not None and position == current.last + 1:
                current.last, current.last_hash = position, row[8]
                extended[current.first] = position
            else:
                chained = pending_anchor is not None and pending_anchor[0] == position - 1
                anchor = pending_anchor[1] if pending_anchor and chained else None
                opened.append((source_id, position, position, anchor))
                current, pending_anchor = RangeState(position, position, row[8]), None
        new_runs = {run[1]: index for index, run in enumerate(opened)}
        for first, last in list(extended.items()):
            if first in new_runs:  # a run opened in this batch: insert it with its last position
                index = new_runs[first]
                opened[index] = (*opened[index][:2], last, opened[index][3])
                del extended[first]
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.executemany(
                "INSERT INTO source_events (source_id, position, stream, version, type, schema_version,"
                " data, metadata, recorded_at, hash) VALUES (?,?,?,?,?,?,?,?,?,?)",
                rows,
            )
            self.db.executemany(
                "INSERT INTO ranges (source_id, first_position, last_position, anchor_hash) VALUES (?,?,?,?)",
                opened,
            )
            self.db.executemany(
                "UPDATE ranges SET last_position = ? WHERE source_id = ? AND first_position = ?",
                [(last, source_id, first) for first, last in extended.items()],
            )
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return current, len(rows)

    def record_fetch(self, collection: int, fetch: Fetch) -> None:
        head = fetch.head or (None, None)
        published = fetch.published or (None, None)
        self.db.execute(
            "INSERT INTO fetches (collection_id, source_id, component, node, pod, log, status, error,"
            " after_position, events, head_position, head_hash, published_position, published_hash,"
            " fetched_at)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (collection, fetch.source_id, fetch.component, fetch.node, fetch.pod, fetch.log, fetch.status,
             fetch.error, fetch.after_position, fetch.events, *head, *published, now_text()),
        )  # fmt: skip

    # ---- reading ----------------------------------------------------------------------------------------
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.db.execute(sql, tuple(params)).fetchall()

    def query_with_columns(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        cursor = self.db.execute(sql)
        if cursor.description is None:
            return [], []
        return [d[0] for d in cursor.description], cursor.fetchall()

    def source_events(self, source_id: int, after: int = 0, limit: int = 5000) -> list[EventRow]:
        rows = self.db.execute(
            f"SELECT {', '.join(EVENT_COLUMNS)}, hash FROM source_events WHERE source_id = ? AND position > ?"
            " ORDER BY position LIMIT ?",
            (source_id, after, limit),
        ).fetchall()
        return [tuple(r) for r in rows]


def source_name(component: str, node: str, pod: str, log: str, domain_uid: str) -> str:
    """How a source is named: controller/<pod>, kubelet-plugin/<node>, daemon/<node>/<domain uid>."""
    if component == "controller":
        return f"controller/{pod}"
    if component == "daemon":
        return f"daemon/{node}/{domain_uid or log.removeprefix('daemon/')}"
    return f"{component}/{node}"


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


# ---- verification ---------------------------------------------------------------------------------------
@dataclass
class SourceCheck:
    """The verdict on one source: its chain run by run, and the heads recorded for it."""

    source: Source
    events: int = 0
    ranges: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    first_bad_position: int | None = None
    heads_held: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def bad(self, position: int, problem: str) -> None:
        self.problems.append(f"position {position}: {problem}")
        if self.first_bad_position is None or position < self.first_bad_position:
            self.first_bad_position = position


def _scheme_for(source: Source, keys: Sequence[bytes]) -> hashchain.ChainScheme | str:
    """The chain scheme to check `source` with, or why it cannot be (a keyed source without its key)."""
    if not source.keyed:
        return hashchain.ChainScheme()
    for key in keys:
        if hashchain.key_check(key) == source.key_check:
            return hashchain.ChainScheme(key, source.keyed_from)
    given = "none of the keys given (--key-file) is its key" if keys else "pass its key with --key-file"
    return f"keyed (HMAC-SHA256 after position {source.keyed_from}): {given}"


def check_source(file: CollectedFile, source: Source, keys: Sequence[bytes]) -> SourceCheck:
    """Recompute `source`'s chain run by run from each run's anchor, and compare every recorded head."""
    check = SourceCheck(source)
    scheme = _scheme_for(source, keys)
    if isinstance(scheme, str):
        check.problems.append(scheme)
        return check
    ranges = file.query(
        "SELECT first_position, last_position, anchor_hash FROM ranges WHERE source_id = ?"
        " ORDER BY first_position",
        (source.id,),
    )
    check.ranges = len(ranges)
    link, canonical, loads = scheme.link, hashchain.canonical_bytes, orjson.loads
    for first, last, anchor in ranges:
        previous: str | None = anchor
        expected = first
        if anchor is None:
            check.notes.append(f"run {first}-{last} starts without an anchor: its first link is unchecked")
        for row in file.db.execute(
            f"SELECT {', '.join(EVENT_COLUMNS)}, hash FROM source_events"
            " WHERE source_id = ? AND position >= ? AND position <= ? ORDER BY position",
            (source.id, first, last),
        ):
            position, stream, version, type_, schema_version, data, metadata, recorded_at, stored = row
            if position != expected:
                check.bad(expected, f"missing from the collected run {first}-{last}")
                break
            expected += 1
            check.events += 1
            if previous is not None:
                payload = canonical(
                    position, stream, version, type_, schema_version, data, metadata, recorded_at
                )
                if link(position, previous, payload) != stored:
                    check.bad(position, "hash mismatch (this event, or one before it, was edited)")
                    break
            for name, text in (("data", data), ("metadata", metadata)):
                try:
                    loads(text)
                except orjson.JSONDecodeError:
                    check.bad(position, f"its {name} is not valid JSON")
            previous = stored
        else:
            if expected != last + 1:
                check.bad(expected, f"missing from the collected run {first}-{last}")
    _check_heads(file, source, check, [(int(f), int(la)) for f, la, _ in ranges])
    return check


def _check_heads(
    file: CollectedFile, source: Source, check: SourceCheck, ranges: list[tuple[int, int]]
) -> None:
    """Every head the component served or published, where the file holds that position, must match it."""
    rows = file.query(
        "SELECT f.head_position, f.head_hash, f.published_position, f.published_hash, f.status, c.domains"
        " FROM fetches AS f JOIN collections AS c ON c.id = f.collection_id"
        " WHERE f.source_id = ? ORDER BY f.id",
        (source.id,),
    )
    last = ranges[-1][1] if ranges else 0
    for head_position, head_hash, published_position, published_hash, status, domains in rows:
        for what, position, hash_ in (
            ("served", head_position, head_hash),
            ("published", published_position, published_hash),
        ):
            if position is None or position == 0:
                continue
            held = any(first <= position <= end for first, end in ranges)
            if held:
                if file.hash_at(source.id, position) != hash_:
                    check.bad(position, f"differs from the head {position}:{hash_} the component {what}")
                else:
                    check.heads_held += 1
            elif position > last and status == "ok" and what == "served" and domains == "[]":
                check.bad(last + 1, f"the collection ends at {last}, before the served head {position}")
            else:
                check.notes.append(f"{what} head {position} is outside the collected runs (narrowed)")
