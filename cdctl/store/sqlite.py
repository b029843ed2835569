"""The SQLite event log: SQLAlchemy 2 async (Core) over aiosqlite, WAL, one writer task per file.

`SqliteEventStore.open(path, key=...)` checks the file is a cdctl log (or creates one, owner-only), applies
pending migrations, checks the hash chain from the latest snapshot to the end with the log's scheme (and its
key: cdctl.store.integrity), starts the writer and keeps a separate reader engine, so reads never block the
writer. The log file and its -wal/-shm are 0600 whatever the umask (SQLite gives the -wal/-shm the database
file's mode). A writable log
connects its reader at the first read: an IMEX daemon's journal only appends, and a second engine and
connection (with its thread) were a third of a daemon's start-up. Components open their
log once at start; the CLI opens files read-only with `open(path, read_only=True)`. A new log is created
with auto_vacuum=INCREMENTAL, so that compaction (cdctl.store.compaction, through `sync`) can give space back;
the writer caps the WAL file it leaves after a checkpoint at WAL_SIZE_LIMIT.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from cdctl.domain import hashchain
from cdctl.domain.errors import StoreError
from cdctl.domain.events import RecordedEvent, upcast
from cdctl.store import compaction, integrity, schema
from cdctl.store.base import EventStore, HeadNotifier, StreamAppend
from cdctl.store.driver import driver_of, fetchall, in_driver_thread
from cdctl.store.sealing import format_time
from cdctl.store.writer import SyncFn, WriteFn, Writer, locked_or_failed

PRAGMAS = (
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = FULL",  # an event is durable before the outside world is changed on its behalf
    "PRAGMA busy_timeout = 5000",
    "PRAGMA foreign_keys = ON",
)
READ_BUSY_TIMEOUT_MS = int(schema.READ_LOCK_WAIT_S * 1000)
WAL_SIZE_LIMIT = 64 << 20  # bytes a checkpointed WAL file is truncated to (compaction writes a lot at once)
FILE_MODE = 0o600  # the log names every tenant's claims and domains: owner-only
SIDE_FILES = ("-wal", "-shm", "-journal")
T = TypeVar("T")
SELECT_EVENTS = (
    "SELECT position, stream, version, type, schema_version, data, metadata, recorded_at, hash FROM events"
)


def row_to_event(row: Sequence[Any], path: str | Path = "event log") -> RecordedEvent:
    """A stored row as an upcast event; a row that does not decode is refused as tampered (naming it)."""
    position, stream, version, type_, schema_version, data, metadata, recorded_at, hash_ = row
    try:
        decoded = RecordedEvent(
            int(position),
            str(stream),
            int(version),
            str(type_),
            int(schema_version),
            hashchain.loads(data),
            hashchain.loads(metadata),
            datetime.fromisoformat(recorded_at),
            str(hash_),
            data,
        )
    except (ValueError, TypeError) as exc:  # orjson.JSONDecodeError is a ValueError
        what = "its data or metadata is not valid JSON" if "JSON" in type(exc).__name__ else f"{exc}"
        raise integrity.tampered(str(path), int(position), what) from None
    return upcast(decoded)


def create_private(path: Path) -> None:
    """Create the log file owner-only before SQLite does, or make an existing one (and its side files) so.

    SQLite creates -wal and -shm with the database file's mode and resets the umask's effect, so a 0600
    database keeps its side files 0600; side files left by an older cdctl are tightened here.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        pass
    except OSError as exc:
        raise StoreError(f"{path}: cannot create: {exc.strerror}") from exc
    else:
        try:
            os.fchmod(fd, FILE_MODE)  # the umask may have taken bits away (0o277 -> 0400)
        finally:
            os.close(fd)
    tighten(path)


def tighten(path: Path) -> None:
    """chmod 0600 the log and whichever side files exist, when they allow more."""
    for candidate in (path, *(path.with_name(path.name + suffix) for suffix in SIDE_FILES)):
        try:
            if candidate.stat().st_mode & 0o777 != FILE_MODE:
                candidate.chmod(FILE_MODE)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StoreError(f"{candidate}: cannot make it owner-only: {exc.strerror}") from exc


def _engine(path: Path, read_only: bool) -> AsyncEngine:
    if read_only:
        url = f"sqlite+aiosqlite:///{path.resolve().as_uri()}?mode=ro&uri=true"
    else:
        url = f"sqlite+aiosqlite:///{path}"
    engine = create_async_engine(url, poolclass=NullPool)

    @event.listens_for(engine.sync_engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        # We issue BEGIN IMMEDIATE ourselves: the driver must not open transactions behind our back.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in PRAGMAS[1:] if read_only else PRAGMAS:
            cursor.execute(pragma)
        if read_only:
            # Readers (the CLI, projections' reads) must never write, and should not wait long on a lock.
            cursor.execute("PRAGMA query_only = ON")
            cursor.execute(f"PRAGMA busy_timeout = {READ_BUSY_TIMEOUT_MS}")
        else:
            cursor.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
        cursor.close()

    return engine


class SqliteEventStore(EventStore):
    def __init__(self, path: Path, read_only: bool) -> None:
        self.path = path
        self.read_only = read_only
        self._notifier = HeadNotifier()
        self._write_engine: AsyncEngine | None = None
        self._write_conn: AsyncConnection | None = None
        self._writer: Writer | None = None
        self._read_engine: AsyncEngine | None = None
        self._reader: AsyncConnection | None = None
        self._read_driver: Any = None
        self._reader_lock = asyncio.Lock()
        self._closed = False
        self.schema_version = 0
        self.key: bytes | None = None
        self.scheme = hashchain.ChainScheme()
        self._read_tip_hash = hashchain.GENESIS
        self.checked_at_open = 0  # events whose links the open check recomputed
        self.append_observers: list[Callable[[float], None]] = []  # seconds each append took (metrics)

    @classmethod
    async def open(
        cls, path: str | Path, *, read_only: bool = False, create: bool = True, key: bytes | None = None
    ) -> SqliteEventStore:
        """Open (a writer: create, migrate, check, and key) the log at `path`.

        A writer refuses a log that fails its check from the latest snapshot on (`LogTampered`), a keyed log
        without its key or with another key, and adopts `key` for an unkeyed log (keyed from its head on).
        A read-only open checks nothing: `cdctl verify` does, and inspecting a suspect file must work.
        """
        path = Path(path)
        if path.exists():
            if path.is_dir():
                raise StoreError(f"{path}: is a directory, not an event log")
            schema.check_identity(path)
        elif read_only or not create:
            raise StoreError(f"{path}: no such event log")
        elif not path.parent.is_dir():
            raise StoreError(f"{path}: directory {path.parent} does not exist")
        if not read_only:
            create_private(path)
        store = cls(path, read_only)
        store.key = key
        try:
            await store._start()
        except (OperationalError, sqlite3.OperationalError) as exc:
            await store.close()
            raise locked_or_failed(exc, str(path)) from exc
        except BaseException:
            await store.close()
            raise
        return store

    async def _start(self) -> None:
        if not self.read_only:
            self._write_engine = _engine(self.path, read_only=False)
            self._write_conn = await self._write_engine.connect()
            await self._migrate(self._write_conn)
            version = (await self._write_conn.exec_driver_sql("PRAGMA user_version")).scalar_one()
            self.schema_version = int(version)
            driver = await driver_of(self._write_conn)
            path, key = str(self.path), self.key
            self.scheme, self.checked_at_open = await in_driver_thread(
                driver, lambda db: integrity.open_check(db, key, path)
            )
            self._writer = Writer(self._write_conn, self._notifier, path, self.scheme)
            await self._writer.start()
            tighten(self.path)
            return
        reader = await self._read_connection()
        version = (await reader.exec_driver_sql("PRAGMA user_version")).scalar_one()
        self.schema_version = int(version)
        if version == 0:
            raise StoreError(f"{self.path}: empty file, not a cdctl event log")
        last = "SELECT position, hash FROM events ORDER BY position DESC LIMIT 1"
        rows = await fetchall(self._read_driver, last)
        if rows:
            self._read_tip_hash = str(rows[0][1])
            self._notifier.advance(int(rows[0][0]))

    async def _read_connection(self) -> AsyncConnection:
        """The reader, connected at the first read."""
        if self._reader is not None:
            return self._reader
        async with self._reader_lock:
            if self._closed:
                raise StoreError(f"{self.path}: event log is closed")
            if self._reader is None:
                self._read_engine = self._read_engine or _engine(self.path, read_only=True)
                reader = await self._read_engine.connect()
                self._read_driver = await driver_of(reader)
                self._reader = reader
            return self._reader

    async def _migrate(self, conn: AsyncConnection) -> None:
        current = (await conn.exec_driver_sql("PRAGMA user_version")).scalar_one()
        todo = schema.pending(int(current), schema.load_migrations())
        if not todo:
            return
        raw = await conn.get_raw_connection()
        driver = raw.driver_connection
        assert driver is not None
        if int(current) == 0 and not await driver.execute_fetchall("SELECT 1 FROM sqlite_master"):
            # Only an empty file can take a vacuum mode without rewriting it: a new log gets the one that
            # lets compaction give pages back a few at a time.
            await driver.execute("PRAGMA auto_vacuum = INCREMENTAL")
            await driver.execute("VACUUM")
        for migration in todo:
            try:
                await driver.executescript(schema.migration_script(migration))
            except Exception as exc:
                await driver.execute("ROLLBACK") if driver.in_transaction else None
                raise StoreError(f"{self.path}: migration {migration.name} failed: {exc}") from exc

    async def on_reader(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn(sqlite3 connection)` on the reader's thread in one hop (long checks: `cdctl verify`)."""
        await self._read_connection()
        try:
            return await in_driver_thread(self._read_driver, fn)
        except sqlite3.OperationalError as exc:
            raise locked_or_failed(exc, str(self.path)) from exc

    def chain_head(self) -> tuple[int, str]:
        """The last committed (position, hash): what a component publishes so a cut tail can be detected."""
        if self._writer is not None:
            return self._writer.tip
        return self._notifier.head, self._read_tip_hash

    def _require_writer(self) -> Writer:
        if self._writer is None:
            raise StoreError(f"{self.path}: opened read-only")
        return self._writer

    async def append_batch(self, appends: Sequence[StreamAppend]) -> list[RecordedEvent]:
        writer = self._require_writer()
        if not self.append_observers:
            return await writer.append(appends)
        started = time.perf_counter()
        recorded = await writer.append(appends)
        elapsed = time.perf_counter() - started
        for observe in self.append_observers:
            observe(elapsed)
        return recorded

    def events_kept(self) -> int:
        """Events in the file: from the first position compaction kept to the head (a writer's count)."""
        writer = self._require_writer()
        head = writer.tip[0]
        return head - writer.first + 1 if writer.first and head >= writer.first else 0

    def size_bytes(self) -> int:
        """The file and its write-ahead log on disk, in bytes (what `eventLog.retention.size` bounds)."""
        total = 0
        for path in (self.path, self.path.with_name(self.path.name + "-wal")):
            with contextlib.suppress(FileNotFoundError):
                total += path.stat().st_size
        return total

    async def write(self, fn: WriteFn) -> Any:
        """Run `fn(connection)` in the writer's transaction (projection views, snapshots)."""
        return await self._require_writer().write(fn)

    async def sync(
        self, appends: Sequence[StreamAppend], fn: SyncFn, *, transaction: bool = True
    ) -> tuple[list[RecordedEvent], Any]:
        """Append `appends` and run `fn(sqlite3 connection, recorded)` in one writer transaction, one hop."""
        return await self._require_writer().sync(appends, fn, transaction=transaction)

    async def horizon(self) -> compaction.Horizon | None:
        """The latest compaction (events up to its position are gone), or None."""
        if self.schema_version < 7:
            return None
        return await self.on_reader(compaction.read_horizon)

    async def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """A read on the reader connection (never blocks the writer), in one thread hop."""
        if self._read_driver is None:
            await self._read_connection()
        try:
            return await fetchall(self._read_driver, sql, tuple(params))
        except sqlite3.OperationalError as exc:
            raise locked_or_failed(exc, str(self.path)) from exc

    async def query_with_columns(self, sql: str) -> tuple[list[str], list[Sequence[Any]]]:
        """One statement on the reader, with its column names; database errors are left to the caller."""
        reader = await self._read_connection()
        try:
            result = await reader.exec_driver_sql(sql)
            if not result.returns_rows:
                return [], []
            return list(result.keys()), [tuple(r) for r in result.all()]
        finally:
            await reader.rollback()

    async def read_stream(self, stream: str, from_version: int = 1) -> list[RecordedEvent]:
        rows = await self.query(
            f"{SELECT_EVENTS} WHERE stream = ? AND version >= ? ORDER BY version", (stream, from_version)
        )
        return [row_to_event(r, self.path) for r in rows]

    async def read_all(
        self, after: int = 0, limit: int | None = None, until: datetime | None = None
    ) -> list[RecordedEvent]:
        sql, params = f"{SELECT_EVENTS} WHERE position > ?", [after]
        if until is not None:
            sql += " AND recorded_at <= ?"
            params.append(format_time(until))  # type: ignore[arg-type]
        sql += " ORDER BY position"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [row_to_event(r, self.path) for r in await self.query(sql, tuple(params))]

    async def stream_version(self, stream: str) -> int:
        sql = "SELECT COALESCE(MAX(version), 0) FROM events WHERE stream = ?"
        if self.schema_version >= 7:  # a stream compacted away keeps its last version there
            sql = f"SELECT MAX(({sql}), COALESCE((SELECT version FROM stream_versions WHERE stream = ?), 0))"
            rows = await self.query(sql, (stream, stream))
        else:
            rows = await self.query(sql, (stream,))
        return int(rows[0][0])

    def head(self) -> int:
        return self._notifier.head

    async def wait_beyond(self, position: int) -> int:
        return await self._notifier.wait_beyond(position)

    async def close(self) -> None:
        async with self._reader_lock:
            self._closed = True
        if self._writer is not None:
            await self._writer.stop()
            self._writer = None
        for conn in (self._reader, self._write_conn):
            if conn is not None:
                await conn.close()
        self._reader = self._write_conn = self._read_driver = None
        for engine in (self._read_engine, self._write_engine):
            if engine is not None:
                await engine.dispose()
        self._read_engine = self._write_engine = None
