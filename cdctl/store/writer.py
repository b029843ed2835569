"""The single writer task of an SQLite event log: it alone owns the write connection.

Appends and other write jobs (projection updates, snapshots) are queued to it. It takes whatever is queued
(group commit), seals appends against the log's tip, and commits them in one `BEGIN IMMEDIATE` transaction;
each caller's future resolves only after the commit is durable, then subscribers are woken. A conflicting
append fails alone; a failed commit fails its group and the tip is reloaded from the file. A sync job runs a
function on the driver's thread in one hop, alone in its own transaction, after the append it carries if any
(compaction's record and its bounded batches: cdctl.store.compaction); being queued like any append, it
never interleaves with one. A job whose caller was cancelled still runs; its outcome is dropped, and the
writer goes on. Used by cdctl.store.sqlite.SqliteEventStore.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection

from cdctl.domain.errors import CdctlError, StoreError, StoreLocked
from cdctl.domain.events import RecordedEvent
from cdctl.domain.hashchain import GENESIS, ChainScheme
from cdctl.store import schema
from cdctl.store.base import HeadNotifier, StreamAppend
from cdctl.store.driver import driver_of, in_driver_thread
from cdctl.store.sealing import Chain, SealedEvent, seal, utc_now

WriteFn = Callable[[AsyncConnection], Awaitable[Any]]
SyncFn = Callable[[sqlite3.Connection, list[RecordedEvent]], Any]

_INSERT_EVENT = (
    "INSERT INTO events (position, stream, version, type, schema_version, data, metadata, recorded_at, hash)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_OBSERVED = "INSERT INTO observed_versions (uid, resource_version, position) VALUES (?, ?, ?)"
_MAX_GROUP = 512
_Outcome = list[SealedEvent] | Exception


@dataclass(slots=True)
class _Job:
    appends: Sequence[StreamAppend] | None
    write: WriteFn | None
    sync: SyncFn | None = None
    transaction: bool = True
    done: asyncio.Future[Any] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


def locked_or_failed(exc: OperationalError | sqlite3.OperationalError, path: str) -> CdctlError:
    reason = str(exc.orig) if isinstance(exc, OperationalError) else str(exc)
    if schema.is_locked(exc):
        return StoreLocked(f"{path}: event log is locked by another writer")
    return StoreError(f"{path}: write failed: {reason}")


class Writer:
    def __init__(
        self, conn: AsyncConnection, notifier: HeadNotifier, path: str, scheme: ChainScheme | None = None
    ) -> None:
        self._conn = conn
        self._notifier = notifier
        self._path = path
        self._queue: asyncio.Queue[_Job | None] = asyncio.Queue()
        self._scheme = scheme or ChainScheme()
        self._chain = Chain(0, GENESIS, self._scheme)
        self.tip: tuple[int, str] = (0, GENESIS)  # the last committed (position, hash), swapped whole
        self.first = 0  # the first position still in the file (0: none); compaction removes a prefix
        self._task: asyncio.Task[None] | None = None
        self._dead: StoreError | None = None
        self._inflight: list[_Job] = []
        self._driver: Any = None

    async def start(self) -> None:
        self._driver = await driver_of(self._conn)
        await self._load_tip()
        self._published()
        self._task = asyncio.create_task(self._run(), name=f"event-log-writer:{self._path}")

    async def stop(self) -> None:
        if self._task is None:
            return
        await self._queue.put(None)
        try:
            await self._task
        except Exception:  # already reported to every caller
            pass
        self._task = None

    async def append(self, appends: Sequence[StreamAppend]) -> list[RecordedEvent]:
        result: list[RecordedEvent] = await self._submit(_Job(appends, None))
        return result

    async def write(self, fn: WriteFn) -> Any:
        return await self._submit(_Job(None, fn))

    async def sync(
        self, appends: Sequence[StreamAppend], fn: SyncFn, *, transaction: bool = True
    ) -> tuple[list[RecordedEvent], Any]:
        """Append `appends` (may be empty) and run `fn(db, recorded)` in the same transaction, on the driver's
        thread. Without `transaction` (and without appends) `fn` manages its own (PRAGMA incremental_vacuum).
        """
        if not transaction and appends:
            raise StoreError(f"{self._path}: an append needs a transaction")
        result: tuple[list[RecordedEvent], Any] = await self._submit(
            _Job(appends, None, fn, transaction=transaction)
        )
        return result

    async def _submit(self, job: _Job) -> Any:
        if self._dead is not None:
            raise self._dead
        if self._task is None or self._task.done():
            raise StoreError(f"{self._path}: event log is closed")
        await self._queue.put(job)
        return await job.done

    async def _load_tip(self) -> None:
        rows = await self._fetch("SELECT position, hash FROM events ORDER BY position DESC LIMIT 1")
        tip = (int(rows[0][0]), str(rows[0][1])) if rows else (0, GENESIS)
        self._chain = Chain(*tip, self._scheme)
        self.first = int((await self._fetch("SELECT COALESCE(MIN(position), 0) FROM events"))[0][0])
        await self._conn.rollback()

    def _published(self) -> None:
        """After a commit: the tip others read (metrics), then wake the subscribers."""
        if not self.first and self._chain.head > self.tip[0]:
            self.first = self.tip[0] + 1
        self.tip = (self._chain.head, self._chain.last_hash)
        self._notifier.advance(self._chain.head)

    async def _fetch(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in (await self._conn.exec_driver_sql(sql, params)).all()]

    async def _run(self) -> None:
        try:
            await self._serve()
        except BaseException as exc:
            # Never leave a caller waiting on a dead writer: fail what is queued, and refuse what comes.
            self._dead = StoreError(f"{self._path}: event log writer stopped: {exc!r}")
            _fail(self._inflight, self._dead)
            while not self._queue.empty():
                job = self._queue.get_nowait()
                if job is not None and not job.done.done():
                    job.done.set_exception(self._dead)
            raise

    async def _serve(self) -> None:
        while True:
            first = await self._queue.get()
            if first is None:
                return
            group = [first]
            stop = False
            while len(group) < _MAX_GROUP and not self._queue.empty():
                job = self._queue.get_nowait()
                if job is None:
                    stop = True
                    break
                group.append(job)
            self._inflight = group
            appends = [job for job in group if job.appends is not None and job.sync is None]
            if appends:
                await self._commit_appends(appends)
            for job in group:
                if job.write is not None:
                    await self._commit_write(job)
                elif job.sync is not None:
                    await self._commit_sync(job)
            if stop:
                return

    def _needs_lookup(self, jobs: list[_Job]) -> bool:
        """Whether sealing needs the file: a stream whose version is unknown, or an observation to dedup."""
        versions = self._chain.versions
        return any(
            a.stream not in versions or any(e.observed is not None for e in a.events)
            for job in jobs
            for a in job.appends or ()
        )

    def _prefetch(self, db: sqlite3.Connection, jobs: list[_Job]) -> set[tuple[str, str]]:
        """Load unknown stream versions and the already-recorded observations the group mentions."""
        streams = {
            a.stream for job in jobs for a in job.appends or () if a.stream not in self._chain.versions
        }
        # A stream all of whose events a compaction removed keeps its last version in stream_versions.
        keys = [
            (e.observed.uid, e.observed.resource_version)
            for job in jobs
            for a in job.appends or ()
            for e in a.events
            if e.observed is not None
        ]
        for chunk in _chunks(sorted(streams), 400):
            marks = ",".join("?" * len(chunk))
            rows = db.execute(
                "SELECT stream, MAX(version) FROM (SELECT stream, version FROM events"
                f" WHERE stream IN ({marks}) UNION ALL SELECT stream, version FROM stream_versions"
                f" WHERE stream IN ({marks})) GROUP BY stream",
                (*chunk, *chunk),
            ).fetchall()
            found = {str(row[0]): int(row[1]) for row in rows}
            for stream in chunk:
                self._chain.versions[stream] = found.get(stream, 0)
        seen: set[tuple[str, str]] = set()
        for key_chunk in _chunks(keys, 400):
            marks = ",".join("(?,?)" for _ in key_chunk)
            params = tuple(v for key in key_chunk for v in key)
            rows = db.execute(
                "SELECT uid, resource_version FROM observed_versions"
                f" WHERE (uid, resource_version) IN (VALUES {marks})",
                params,
            ).fetchall()
            seen.update((str(row[0]), str(row[1])) for row in rows)
        return seen

    def _seal_all(self, jobs: list[_Job], seen: set[tuple[str, str]]) -> list[_Outcome]:
        """Seal each job against the chain; a job that fails (conflict, bad input) gets its own error."""
        now = utc_now()
        outcomes: list[_Outcome] = []
        for job in jobs:
            try:
                outcomes.append(seal(job.appends or (), self._chain, lambda u, rv: (u, rv) in seen, now))
            except CdctlError as exc:
                outcomes.append(exc)
        return outcomes

    @staticmethod
    def _insert(db: sqlite3.Connection, outcomes: list[_Outcome]) -> None:
        sealed = [s for outcome in outcomes if not isinstance(outcome, Exception) for s in outcome]
        if sealed:
            db.executemany(_INSERT_EVENT, [s.row() for s in sealed])
            observed = [(*s.observed, s.event.position) for s in sealed if s.observed is not None]
            if observed:
                db.executemany(_INSERT_OBSERVED, observed)

    def _append_transaction(
        self, db: sqlite3.Connection, jobs: list[_Job], sealed: list[_Outcome] | None
    ) -> list[_Outcome]:
        """On the driver's thread, under the write lock: (prefetch and seal,) insert, commit.

        `sealed` is None when sealing needs the file (see `_needs_lookup`); it then happens here, under
        the lock. Any database error rolls the whole group back and propagates.
        """
        db.execute("BEGIN IMMEDIATE")
        try:
            outcomes = sealed if sealed is not None else self._seal_all(jobs, self._prefetch(db, jobs))
            self._insert(db, outcomes)
            db.execute("COMMIT")
            return outcomes
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    async def _commit_appends(self, jobs: list[_Job]) -> None:
        # The common case (known streams, nothing to dedup) is sealed here on the loop, so the thread hop
        # carries only BEGIN, INSERT and COMMIT: the same work as a bare sqlite3 writer.
        sealed = None if self._needs_lookup(jobs) else self._seal_all(jobs, set())
        if sealed is not None and all(isinstance(outcome, Exception) for outcome in sealed):
            self._resolve(jobs, sealed)  # every job refused (conflicts): nothing to write
            return
        try:
            outcomes = await in_driver_thread(
                self._driver, lambda db: self._append_transaction(db, jobs, sealed)
            )
        except Exception as exc:  # nothing committed: fail the group, and re-read the tip
            error = locked_or_failed(exc, self._path) if isinstance(exc, sqlite3.OperationalError) else exc
            _fail(jobs, error)
            self._chain.versions.clear()
            await self._load_tip()
            return
        finally:
            self._chain.observed.clear()
        self._published()
        self._resolve(jobs, outcomes)

    def _sync_transaction(self, db: sqlite3.Connection, job: _Job) -> tuple[list[RecordedEvent], Any]:
        assert job.sync is not None
        if not job.transaction:
            return [], job.sync(db, [])
        db.execute("BEGIN IMMEDIATE")
        try:
            recorded: list[RecordedEvent] = []
            if job.appends:
                [outcome] = self._seal_all([job], self._prefetch(db, [job]))
                if isinstance(outcome, Exception):
                    raise outcome
                self._insert(db, [outcome])
                recorded = [s.event for s in outcome]
            result = job.sync(db, recorded)
            db.execute("COMMIT")
            # A sync job is how compaction removes events: the first position kept may have moved.
            self.first = int(db.execute("SELECT COALESCE(MIN(position), 0) FROM events").fetchone()[0])
            return recorded, result
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    async def _commit_sync(self, job: _Job) -> None:
        try:
            recorded, result = await in_driver_thread(
                self._driver, lambda db: self._sync_transaction(db, job)
            )
        except Exception as exc:
            if isinstance(exc, sqlite3.OperationalError):
                exc = locked_or_failed(exc, self._path)
            elif isinstance(exc, sqlite3.Error):
                exc = StoreError(f"{self._path}: write failed: {exc}")
            if job.appends:  # nothing committed: re-read the tip the sealing advanced
                self._chain.versions.clear()
                await self._load_tip()
            _settle(job, error=exc)
            return
        finally:
            self._chain.observed.clear()
        if recorded:
            self._published()
        _settle(job, (recorded, result))

    @staticmethod
    def _resolve(jobs: list[_Job], outcomes: list[_Outcome]) -> None:
        for job, outcome in zip(jobs, outcomes, strict=True):
            if isinstance(outcome, Exception):
                _settle(job, error=outcome)
            else:
                _settle(job, [s.event for s in outcome])

    async def _commit_write(self, job: _Job) -> None:
        assert job.write is not None
        try:
            await self._conn.exec_driver_sql("BEGIN IMMEDIATE")
            result = await job.write(self._conn)
            await self._conn.commit()
        except Exception as exc:
            with contextlib.suppress(Exception):
                await self._conn.rollback()
            _settle(
                job, error=locked_or_failed(exc, self._path) if isinstance(exc, OperationalError) else exc
            )
            return
        _settle(job, result)


def _settle(job: _Job, result: Any = None, error: BaseException | None = None) -> None:
    """Resolve a job's future, unless its caller gave up on it (cancelled): the writer carries on."""
    if job.done.done():
        return
    if error is not None:
        job.done.set_exception(error)
    else:
        job.done.set_result(result)


def _fail(jobs: Sequence[_Job], error: BaseException) -> None:
    for job in jobs:
        _settle(job, error=error)


def _chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]
