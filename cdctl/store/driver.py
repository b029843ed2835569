"""One thread hop per transaction: run a function on aiosqlite's connection thread.

SQLAlchemy owns the engine and connections; aiosqlite runs each DB-API call on its own thread, and on a
2-core node every hop costs about 0.1 ms, several times the fsync of a small WAL commit. The writer's
appends and the bulk readers therefore run their whole unit of work in one hop. aiosqlite has no public
call for that; its `_execute(fn)` is what every public method uses (the dependency is pinned below 0.23,
and the store's contract tests exercise this path). Used by cdctl.store.writer and cdctl.store.sqlite.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

T = TypeVar("T")


async def driver_of(conn: AsyncConnection) -> Any:
    """The aiosqlite connection under a SQLAlchemy async connection."""
    raw = await conn.get_raw_connection()
    return raw.driver_connection


async def in_driver_thread(driver: Any, fn: Callable[[sqlite3.Connection], T]) -> T:
    """Run `fn(sqlite3_connection)` on the driver's thread, in one hop."""
    connection: sqlite3.Connection = driver._conn
    result: T = await driver._execute(fn, connection)
    return result


async def fetchall(driver: Any, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """One statement's rows in one hop (public aiosqlite API)."""
    rows = await driver.execute_fetchall(sql, params)
    return [tuple(row) for row in rows]
