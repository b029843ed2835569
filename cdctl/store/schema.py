"""Schema migrations and file identity for the event log.

Numbered SQL files in `migrations/` (NNNN_name.sql) are applied in order on open, each in one transaction
that also sets `PRAGMA user_version = NNNN`. A file is a cdctl event log when its `application_id` is 'cdct'
(set by migration 1). Called by the SQLite store on open and by the CLI to check a file before reading it.
"""

from __future__ import annotations

import os
import re
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path

from cdctl.domain.errors import StoreError, StoreLocked

APPLICATION_ID = int.from_bytes(b"cdct", "big")
# How long a reader waits on another process's lock before saying the file is locked (StoreLocked, exit 75).
# A writer in WAL mode never blocks readers; only an exclusive lock or a recovery in progress does, and
# waiting longer than this tells the operator nothing more.
READ_LOCK_WAIT_S = 0.5
SQLITE_HEADER = b"SQLite format 3\x00"
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    number: int
    name: str
    sql: str


def migrations_dir() -> Path:
    """Where the SQL files are: $CDCTL_MIGRATIONS, the source checkout, or the wheel's share/ folder."""
    override = os.environ.get("CDCTL_MIGRATIONS")
    candidates = [Path(override)] if override else []
    candidates += [
        Path(__file__).resolve().parents[2] / "migrations",
        Path(sys.prefix) / "share" / "cdctl" / "migrations",
    ]
    for candidate in candidates:
        if candidate.is_dir() and any(candidate.glob("0001_*.sql")):
            return candidate
    raise StoreError(f"migrations not found (looked in {', '.join(str(c) for c in candidates)})")


def load_migrations(directory: Path | None = None) -> list[Migration]:
    directory = directory or migrations_dir()
    found: list[Migration] = []
    for path in sorted(directory.iterdir()):
        match = _NAME.match(path.name)
        if match:
            found.append(Migration(int(match.group(1)), path.name, path.read_text()))
    numbers = [m.number for m in found]
    if numbers != list(range(1, len(found) + 1)):
        raise StoreError(f"{directory}: migrations must be numbered 0001.. without gaps, found {numbers}")
    return found


def check_identity(path: Path) -> None:
    """Refuse a file that exists but is not an SQLite database or is another application's database."""
    try:
        with path.open("rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise StoreError(f"{path}: cannot read: {exc.strerror}") from exc
    if header and header != SQLITE_HEADER:
        raise StoreError(f"{path}: not an SQLite database, so not a cdctl event log")
    if not header:
        return  # empty file: a fresh log is created in it
    app_id, tables = read_identity(path)
    if app_id != APPLICATION_ID and (app_id != 0 or tables):
        raise StoreError(f"{path}: an SQLite database of another application, not a cdctl event log")


def read_identity(path: Path) -> tuple[int, int]:
    """An SQLite file's (application_id, number of schema objects), read-only; a lock held elsewhere longer
    than READ_LOCK_WAIT_S raises StoreLocked, promptly, and an unreadable file StoreError."""
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=READ_LOCK_WAIT_S)
        try:
            app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
            tables = int(conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        if is_locked(exc):
            raise StoreLocked(f"{path}: locked by another process; try again") from exc
        raise StoreError(f"{path}: unreadable SQLite file: {exc}") from exc
    return app_id, tables


def is_locked(exc: BaseException) -> bool:
    """SQLite's "database is locked" / "database table is locked" / SQLITE_BUSY, whatever the driver."""
    reason = str(getattr(exc, "orig", None) or exc)
    return "locked" in reason or "busy" in reason


def pending(current_version: int, migrations: list[Migration]) -> list[Migration]:
    latest = migrations[-1].number if migrations else 0
    if current_version > latest:
        raise StoreError(
            f"event log schema version {current_version} is newer than this cdctl knows ({latest}):"
            " upgrade cdctl"
        )
    return [m for m in migrations if m.number > current_version]


def migration_script(migration: Migration) -> str:
    """One transaction: the migration's statements and its user_version, or nothing at all."""
    return f"BEGIN IMMEDIATE;\n{migration.sql}\nPRAGMA user_version = {migration.number};\nCOMMIT;\n"
