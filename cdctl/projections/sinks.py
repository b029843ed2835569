"""Where projection views live: the event log file itself (SQLite) or memory.

A sink commits the row changes of a batch of events together with each projection's tracked position, and
a snapshot when one is due, in ONE transaction: that is what makes projections exactly-once. Used by the
ProjectionRunner; `cdctl verify` reads the stored rows back through `table_rows`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import orjson
from sqlalchemy.ext.asyncio import AsyncConnection

from cdctl.projections.base import Change, Key, Projection, Row, apply_to_table
from cdctl.store.sealing import format_time, utc_now
from cdctl.store.sqlite import SqliteEventStore

Snapshot = tuple[int, list[tuple[Key, Row]]]
KEEP_SNAPSHOTS = 2


def encode_snapshot(view: dict[Key, Row]) -> str:
    return orjson.dumps([[key, row] for key, row in view.items()]).decode()


def decode_snapshot(text: str) -> list[tuple[Key, Row]]:
    return [(tuple(key), row) for key, row in orjson.loads(text)]


class ViewSink(Protocol):
    async def load_positions(self) -> dict[str, int]: ...

    async def load_snapshot(self, name: str, at_most: int) -> Snapshot | None: ...

    async def commit(
        self,
        changes: Sequence[tuple[Projection, Sequence[Change]]],
        positions: dict[str, int],
        snapshots: dict[str, tuple[int, str]],
    ) -> None: ...

    async def table_rows(self, projection: Projection) -> list[Row]: ...


class MemorySink:
    """Views in dictionaries: for the in-memory store and for tests."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[Key, Row]] = {}
        self.positions: dict[str, int] = {}
        self.snapshots: dict[str, dict[int, str]] = {}

    async def load_positions(self) -> dict[str, int]:
        return dict(self.positions)

    async def load_snapshot(self, name: str, at_most: int) -> Snapshot | None:
        usable = [p for p in self.snapshots.get(name, {}) if p <= at_most]
        if not usable:
            return None
        best = max(usable)
        return best, decode_snapshot(self.snapshots[name][best])

    async def commit(
        self,
        changes: Sequence[tuple[Projection, Sequence[Change]]],
        positions: dict[str, int],
        snapshots: dict[str, tuple[int, str]],
    ) -> None:
        tables = {name: dict(rows) for name, rows in self.tables.items()}  # all or nothing
        for projection, batch in changes:
            table = tables.setdefault(projection.table, {})
            for change in batch:
                apply_to_table(table, change)
        self.tables = tables
        self.positions.update(positions)
        for name, (position, state) in snapshots.items():
            self.snapshots.setdefault(name, {})[position] = state

    async def table_rows(self, projection: Projection) -> list[Row]:
        return list(self.tables.get(projection.table, {}).values())


class SqliteSink:
    """Views as tables in the event log file, written through the store's single writer."""

    def __init__(self, store: SqliteEventStore) -> None:
        self.store = store

    async def load_positions(self) -> dict[str, int]:
        return {
            str(n): int(p)
            for n, p in await self.store.query("SELECT name, position FROM projection_positions")
        }

    async def load_snapshot(self, name: str, at_most: int) -> Snapshot | None:
        """The latest snapshot at or before `at_most`: a regular one, or the one a compaction kept."""
        sql, params = (
            "SELECT position, state FROM snapshots WHERE name = ? AND position <= ?",
            [name, at_most],
        )
        if self.store.schema_version >= 7:
            sql += " UNION ALL SELECT position, state FROM horizon_snapshots WHERE name = ? AND position <= ?"
            params += [name, at_most]
        rows = await self.store.query(f"{sql} ORDER BY position DESC LIMIT 1", tuple(params))
        if not rows:
            return None
        return int(rows[0][0]), decode_snapshot(str(rows[0][1]))

    async def commit(
        self,
        changes: Sequence[tuple[Projection, Sequence[Change]]],
        positions: dict[str, int],
        snapshots: dict[str, tuple[int, str]],
    ) -> None:
        async def transaction(conn: AsyncConnection) -> None:
            for projection, batch in changes:
                await self._write_rows(conn, projection, batch)
            await self._write_positions(conn, positions)
            await self._write_snapshots(conn, snapshots)

        await self.store.write(transaction)

    async def _write_rows(
        self, conn: AsyncConnection, projection: Projection, batch: Sequence[Change]
    ) -> None:
        cols = projection.columns
        upserts = [tuple(c.row[col] for col in cols) for c in batch if c.row is not None and not c.partial]
        deletes = [c.key for c in batch if c.row is None]
        where = " AND ".join(f"{col} = ?" for col in projection.key_columns)
        for change in batch:
            if change.partial and change.row is not None:
                fields = [col for col in change.row if col not in projection.key_columns]
                assignments = ", ".join(f"{col} = ?" for col in fields)
                params = (*(change.row[col] for col in fields), *change.key)
                await conn.exec_driver_sql(
                    f"UPDATE {projection.table} SET {assignments} WHERE {where}", params
                )
        if upserts:
            marks = ",".join("?" * len(cols))
            sql = f"INSERT OR REPLACE INTO {projection.table} ({','.join(cols)}) VALUES ({marks})"
            await conn.exec_driver_sql(sql, upserts)
        if deletes:
            await conn.exec_driver_sql(f"DELETE FROM {projection.table} WHERE {where}", deletes)

    async def _write_positions(self, conn: AsyncConnection, positions: dict[str, int]) -> None:
        await conn.exec_driver_sql(
            "INSERT OR REPLACE INTO projection_positions (name, position) VALUES (?, ?)",
            list(positions.items()),
        )

    async def _write_snapshots(self, conn: AsyncConnection, snapshots: dict[str, tuple[int, str]]) -> None:
        now = format_time(utc_now())
        for name, (position, state) in snapshots.items():
            # The chain's hash at the snapshot's position: where a process checks its log from at open.
            await conn.exec_driver_sql(
                "INSERT OR REPLACE INTO snapshots (name, position, state, created_at, hash)"
                " VALUES (?, ?, ?, ?, COALESCE((SELECT hash FROM events WHERE position = ?), ''))",
                (name, position, state, now, position),
            )
            await conn.exec_driver_sql(
                "DELETE FROM snapshots WHERE name = ? AND position NOT IN"
                " (SELECT position FROM snapshots WHERE name = ? ORDER BY position DESC LIMIT ?)",
                (name, name, KEEP_SNAPSHOTS),
            )

    async def table_rows(self, projection: Projection) -> list[Row]:
        cols = projection.columns
        rows = await self.store.query(f"SELECT {','.join(cols)} FROM {projection.table}")
        return [dict(zip(cols, row, strict=True)) for row in rows]


def sink_for(store: Any) -> ViewSink:
    return SqliteSink(store) if isinstance(store, SqliteEventStore) else MemorySink()
