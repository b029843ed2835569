"""What only the SQLite event log must show: append-only, WAL, migrations, file identity, locking, crashes."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from cdctl.domain import hashchain
from cdctl.domain.errors import StoreError, StoreLocked
from cdctl.domain.events import NewEvent
from cdctl.store import SqliteEventStore
from cdctl.store import schema as store_schema


def ev(**data: object) -> NewEvent:
    return NewEvent("Thing", dict(data))


async def test_events_cannot_be_updated_or_deleted(sqlite_store: SqliteEventStore) -> None:
    await sqlite_store.append("s/1", [ev(a=1)])

    async def tamper(sql: str) -> None:
        await sqlite_store.write(lambda conn: conn.exec_driver_sql(sql))

    with pytest.raises(Exception, match="append-only"):
        await tamper("UPDATE events SET data = '{}'")
    with pytest.raises(Exception, match="append-only"):
        await tamper("DELETE FROM events")
    [event] = await sqlite_store.read_all()
    assert event.data == {"a": 1}


async def test_file_is_wal_and_fully_synchronous(tmp_path: Path) -> None:
    async with await SqliteEventStore.open(tmp_path / "e.db") as store:
        await store.append("s/1", [ev()])
        [(mode,)] = await store.query("PRAGMA journal_mode")
        assert mode == "wal"
    conn = sqlite3.connect(tmp_path / "e.db")
    assert conn.execute("PRAGMA application_id").fetchone()[0] == store_schema.APPLICATION_ID
    conn.close()


async def test_events_survive_reopen_and_the_chain_continues(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    async with await SqliteEventStore.open(path) as store:
        first = await store.append("s/1", [ev(n=1)])
    async with await SqliteEventStore.open(path) as store:
        assert store.head() == 1
        second = await store.append("s/1", [ev(n=2)], expected_version=1)
    assert second[0].position == 2 and second[0].version == 2
    assert second[0].hash != first[0].hash


async def test_a_file_created_at_migration_1_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    [first, *_rest] = store_schema.load_migrations()
    conn = sqlite3.connect(path)
    conn.executescript(store_schema.migration_script(first))
    at = "2026-01-01T00:00:00.000000+00:00"
    payload = hashchain.canonical_bytes(1, "s/1", 1, "Thing", 1, "{}", "{}", at)
    link = hashchain.chain(hashchain.GENESIS, payload)
    conn.execute("INSERT INTO events VALUES (1, 's/1', 1, 'Thing', 1, '{}', '{}', ?, ?)", (at, link))
    conn.commit()
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    conn.close()
    async with await SqliteEventStore.open(path) as store:
        [(version,)] = await store.query("PRAGMA user_version")
        assert version == len(store_schema.load_migrations())
        tables = {row[0] for row in await store.query("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"observed_versions", "projection_positions", "snapshots", "claim_lifecycle"} <= tables
        assert store.head() == 1
        written = await store.append("s/1", [ev()], expected_version=1)
        assert written[0].position == 2


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    async with await SqliteEventStore.open(path):
        pass
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 999")
    conn.close()
    with pytest.raises(StoreError, match="newer than this cdctl knows"):
        await SqliteEventStore.open(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"hello, not a database at all", "not an SQLite database"), (None, "another application")],
)
async def test_foreign_files_are_refused(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / "foreign.db"
    if content is None:
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE t (x)")
        conn.close()
    else:
        path.write_bytes(content)
    with pytest.raises(StoreError, match=message):
        await SqliteEventStore.open(path)


async def test_missing_files_are_not_created_when_reading(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no such event log"):
        await SqliteEventStore.open(tmp_path / "absent.db", read_only=True)
    assert not (tmp_path / "absent.db").exists()


async def test_a_second_writer_gets_a_typed_lock_error(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    async with await SqliteEventStore.open(path) as store:
        await store.append("s/1", [ev()])
        await store.write(lambda conn: conn.exec_driver_sql("PRAGMA busy_timeout = 50"))
        blocker = sqlite3.connect(path, timeout=0.1)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreLocked):
                await store.append("s/1", [ev()])
        finally:
            blocker.rollback()
            blocker.close()
        # The writer recovers once the lock is gone, and the failed append left no trace.
        written = await store.append("s/1", [ev()], expected_version=1)
        assert written[0].position == 2


async def test_readers_do_not_block_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    async with await SqliteEventStore.open(path) as store:
        await store.append("s/1", [ev()])
        reader = sqlite3.connect(path)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM events").fetchone()  # holds a read snapshot
        try:
            await store.append("s/1", [ev()])
            assert reader.execute("SELECT count(*) FROM events").fetchone()[0] == 1  # its snapshot
        finally:
            reader.close()
        assert store.head() == 2


async def test_a_writable_log_reads_through_a_reader_it_connects_on_first_use(tmp_path: Path) -> None:
    store = await SqliteEventStore.open(tmp_path / "e.db")
    try:
        assert store._reader is None, "an append-only user never pays for the reader"
        await store.append("s/1", [ev()])
        first, second = await asyncio.gather(store.read_stream("s/1"), store.stream_version("s/1"))
        assert [e.version for e in first] == [1] and second == 1
        reader = store._reader
        assert reader is not None
        await store.read_all()
        assert store._reader is reader, "connected once"
    finally:
        await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.read_all()


async def test_read_only_open_refuses_appends(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    async with await SqliteEventStore.open(path) as store:
        await store.append("s/1", [ev()])
    async with await SqliteEventStore.open(path, read_only=True) as reader:
        assert reader.head() == 1
        with pytest.raises(StoreError, match="read-only"):
            await reader.append("s/1", [ev()])


async def test_a_dying_writer_fails_callers_instead_of_hanging(
    sqlite_store: SqliteEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def bug(_jobs: object) -> None:
        raise RuntimeError("unexpected bug in the writer")

    monkeypatch.setattr(sqlite_store._writer, "_commit_appends", bug)
    async with asyncio.timeout(5):
        with pytest.raises(StoreError, match="writer stopped"):
            await sqlite_store.append("s/1", [ev()])
        with pytest.raises(StoreError, match="writer stopped"):
            await sqlite_store.append("s/1", [ev()])
