"""What someone who can edit an event log file does to it: helpers for the integrity tests.

Used by tests/store/test_integrity.py and tests/cli/test_log_integrity.py. Each works on a closed file with
plain sqlite3, dropping the append-only triggers as an attacker would.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from cdctl.domain import hashchain

KEY = b"k" * 32
OTHER_KEY = b"o" * 32


def edit_data(path: Path, position: int, data: str) -> None:
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER IF EXISTS events_are_never_updated")
    conn.execute("UPDATE events SET data = ? WHERE position = ?", (data, position))
    conn.commit()
    conn.close()


def recompute_chain(path: Path, key: bytes | None = None, keyed_from: int = 0) -> None:
    """Rewrite every stored hash as the writer would have (with `key` after `keyed_from`, if given)."""
    scheme = hashchain.ChainScheme(key, keyed_from)
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER IF EXISTS events_are_never_updated")
    previous = hashchain.GENESIS
    rows = conn.execute(
        "SELECT position, stream, version, type, schema_version, data, metadata, recorded_at FROM events"
        " ORDER BY position"
    ).fetchall()
    for row in rows:
        previous = scheme.link(row[0], previous, hashchain.canonical_bytes(*row))
        conn.execute("UPDATE events SET hash = ? WHERE position = ?", (previous, row[0]))
    conn.execute("UPDATE snapshots SET hash = (SELECT hash FROM events WHERE position = snapshots.position)")
    conn.commit()
    conn.close()


def delete_tail(path: Path, keep: int, *, drop_snapshots: bool = True) -> None:
    """Delete the events after `keep` and (as a careful attacker would) the snapshots and views past it."""
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER IF EXISTS events_are_never_deleted")
    conn.execute("DELETE FROM events WHERE position > ?", (keep,))
    if drop_snapshots:
        conn.execute("DELETE FROM snapshots WHERE position > ?", (keep,))
    conn.commit()
    conn.close()


def mark_unkeyed(path: Path) -> None:
    """Say the log is unkeyed (the downgrade an attacker without the key would try)."""
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER IF EXISTS chain_scheme_is_keyed_once")
    conn.execute("UPDATE chain_scheme SET scheme = 'sha256', keyed_from = 0, key_check = ''")
    conn.commit()
    conn.close()
