"""The event log's integrity at open and in `cdctl verify`: its chain scheme, its key, and its chain.

A log records how its chain is computed (table `chain_scheme`, migration 0006): unkeyed SHA-256, or
HMAC-SHA256 under a key after position `keyed_from`. Here:
- `read_key_file` loads a key (`--log-key-file`, `cdctl verify --key-file`): the file's bytes.
- `resolve_scheme` matches the recorded scheme with the key given: a keyed log without its key, or with
  another key, is refused with a message saying so (not reported as corruption).
- `check_chain` recomputes links from a known (position, hash) to the end and raises `LogTampered` at the
  first missing position, wrong link or row whose JSON does not parse.
- `open_check` is what a writing process runs at open: from the latest snapshot (whose recorded hash must
  match the log's) to the end, then adopts a key given for a log that had none.
- On a compacted log (cdctl.store.compaction) the chain starts at the anchor, the hash of the last removed
  event recorded by the latest compaction; `check_compaction` holds that record against its event in the
  chain, the horizon snapshots against the digest it recorded, and the file against what it says is gone.
The functions run on the store's driver thread with a plain sqlite3 connection, in one hop. Called by
cdctl.store.sqlite (open) and cdctl.projections.replay (verify).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson

from cdctl.domain import hashchain
from cdctl.domain.errors import InvalidInput, LogTampered, StoreError
from cdctl.domain.retention import LogCompactionStarted
from cdctl.store import compaction

MIN_KEY_BYTES = 16
_SELECT_LINKS = (
    "SELECT position, stream, version, type, schema_version, data, metadata, recorded_at, hash"
    " FROM events WHERE position > ? ORDER BY position"
)


def read_key_file(path: Path, option: str = "--log-key-file") -> bytes:
    """The key in `path` (all its bytes); at least 16 bytes, so a truncated or empty Secret is refused."""
    try:
        key = path.read_bytes()
    except OSError as exc:
        raise InvalidInput("command line", option, f"cannot read key file {path}: {exc.strerror}") from exc
    if len(key) < MIN_KEY_BYTES:
        raise InvalidInput(
            "command line", option, f"key file {path} holds {len(key)} bytes; at least {MIN_KEY_BYTES} needed"
        )
    return key


def tamper_stamp() -> str:
    """The suffix for a log kept aside: UTC, to the second."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def tampered(path: str, position: int, reason: str) -> LogTampered:
    return LogTampered(path, position, reason, tamper_stamp())


@dataclass(frozen=True, slots=True)
class RecordedScheme:
    """The row of `chain_scheme`."""

    scheme: str
    keyed_from: int
    key_check: str

    @property
    def keyed(self) -> bool:
        return self.scheme == hashchain.KEYED


def read_scheme(db: sqlite3.Connection) -> RecordedScheme:
    has_table = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'chain_scheme'")
    if has_table.fetchone() is None:
        return RecordedScheme(hashchain.UNKEYED, 0, "")  # a log from before migration 0006: unkeyed
    row = db.execute("SELECT scheme, keyed_from, key_check FROM chain_scheme WHERE id = 1").fetchone()
    if row is None:
        raise StoreError("chain_scheme: its row is missing (removed by hand?)")
    return RecordedScheme(str(row[0]), int(row[1]), str(row[2]))


def resolve_scheme(
    recorded: RecordedScheme, key: bytes | None, path: str, *, option: str, adopt: bool
) -> hashchain.ChainScheme:
    """The scheme to check the log with, given the key the caller holds.

    A keyed log needs its key. An unkeyed log with a key is adopted by a writer (`adopt`: checked unkeyed
    here, keyed from its head on, see `adopt_key`) and refused by `cdctl verify`, where a key proves nothing.
    """
    if recorded.keyed:
        if key is None:
            raise StoreError(
                f"{path}: this event log is keyed (HMAC-SHA256 after position {recorded.keyed_from});"
                f" pass its key with {option}"
            )
        if hashchain.key_check(key) != recorded.key_check:
            raise StoreError(
                f"{path}: the key given ({option}) is not the key this event log is keyed with; pass the"
                " right key file"
            )
        return hashchain.ChainScheme(key, recorded.keyed_from)
    if key is not None and not adopt:
        raise StoreError(
            f"{path}: this event log is not keyed (plain SHA-256 chain), so a key proves nothing about it;"
            f" verify it without {option}. If it was keyed before, it has been rewritten without the key"
        )
    return hashchain.ChainScheme()


def tip(db: sqlite3.Connection) -> tuple[int, str]:
    row = db.execute("SELECT position, hash FROM events ORDER BY position DESC LIMIT 1").fetchone()
    return (int(row[0]), str(row[1])) if row else (0, hashchain.GENESIS)


def check_chain(
    db: sqlite3.Connection,
    scheme: hashchain.ChainScheme,
    after: int,
    previous: str,
    path: str,
    until: int | None = None,
) -> int:
    """Recompute the links after `after` (whose hash is `previous`); return how many events were checked."""
    expected, checked = after, 0
    link, canonical, loads = scheme.link, hashchain.canonical_bytes, orjson.loads
    for row in db.execute(_SELECT_LINKS, (after,)):
        position, stream, version, type_, schema_version, data, metadata, recorded_at, stored = row
        if until is not None and position > until:
            break
        expected += 1
        if position != expected:
            raise tampered(path, expected, f"position {expected} is missing (the next stored is {position})")
        previous = link(
            position,
            previous,
            canonical(position, stream, version, type_, schema_version, data, metadata, recorded_at),
        )
        if previous != stored:
            raise tampered(path, position, "hash mismatch (this event, or one before it, was edited)")
        for name, text in (("data", data), ("metadata", metadata)):
            try:
                loads(text)
            except orjson.JSONDecodeError:
                raise tampered(path, position, f"its {name} is not valid JSON") from None
        checked += 1
    return checked


def chain_start(horizon: compaction.Horizon | None) -> tuple[int, str]:
    """Where the chain is checked from: the anchor of the latest compaction, or the genesis hash."""
    if horizon is None:
        return 0, hashchain.GENESIS
    return horizon.position, horizon.anchor_hash


def check_compaction(db: sqlite3.Connection, path: str) -> compaction.Horizon | None:
    """The latest horizon, once its record agrees with the chain; raises LogTampered otherwise.

    Each `compactions` row whose LogCompactionStarted event is still held must match that event (the chain
    covers the event, so an edit of either shows); the horizon snapshots must have the digest the record
    names; a completed compaction leaves no event at or below its horizon; no deletion grant is left open.
    """
    if not compaction.has_table(db, "compactions"):
        return None
    horizon = compaction.read_horizon(db)
    grants = db.execute("SELECT COUNT(*) FROM compaction_grant").fetchone()[0]
    if grants:
        where = horizon.position + 1 if horizon is not None else 1
        raise tampered(path, where, "a compaction grant is left in the file (the deletion guard is open)")
    if horizon is None:
        return None
    rows = db.execute(
        "SELECT record_position, first_position, horizon, anchor_hash, horizon_recorded_at, reason,"
        " snapshot_digest FROM compactions WHERE record_position > ? ORDER BY record_position",
        (horizon.position,),
    ).fetchall()
    for position, first, last, anchor, latest, reason, digest in rows:
        found = db.execute("SELECT type, data FROM events WHERE position = ?", (position,)).fetchone()
        if found is None:
            raise tampered(path, int(position), "the event recording a compaction is missing")
        if found[0] != LogCompactionStarted.TYPE:
            raise tampered(path, int(position), f"a compaction is recorded here but the event is {found[0]}")
        try:
            data = orjson.loads(found[1])
        except orjson.JSONDecodeError:
            raise tampered(path, int(position), "its data is not valid JSON") from None
        fields = ("first_position", "last_position", "anchor_hash", "horizon_recorded_at", "reason")
        recorded = (*(data.get(name) for name in fields), data.get("snapshot_digest"))
        if recorded != (first, last, anchor, latest, reason, digest):
            raise tampered(
                path,
                int(position),
                "the compaction recorded by this event differs from the compactions table",
            )
    if horizon.record_position <= horizon.position:
        raise tampered(path, horizon.record_position, "a compaction record lies inside the range it removed")
    digest = compaction.snapshot_digest(compaction.horizon_snapshots(db))
    if digest != horizon.snapshot_digest:
        raise tampered(
            path,
            horizon.record_position,
            "the snapshots kept at the horizon differ from the digest the compaction recorded",
        )
    if not horizon.pending:
        lowest = compaction.lowest_position(db)
        if lowest is not None and lowest <= horizon.position:
            raise tampered(
                path,
                lowest,
                f"an event lies at or below the horizon {horizon.position} of a finished compaction",
            )
    return horizon


def snapshot_start(
    db: sqlite3.Connection, head: int, path: str, horizon: compaction.Horizon | None = None
) -> tuple[int, str]:
    """Where the open check starts: the latest snapshot with a recorded hash, which must match the log's.

    On a compacted log, a snapshot at the horizon is held against the anchor (its event is gone), and the
    check never starts before the anchor.
    """
    start = chain_start(horizon)
    row = db.execute(
        "SELECT position, hash FROM snapshots WHERE hash <> '' ORDER BY position DESC LIMIT 1"
    ).fetchone()
    if row is None or int(row[0]) <= start[0]:
        if row is not None and int(row[0]) == start[0] and str(row[1]) != start[1]:
            raise tampered(
                path, start[0], "its hash differs from the one recorded by the snapshot taken there"
            )
        return start
    position, recorded = int(row[0]), str(row[1])
    if position > head:
        raise tampered(
            path,
            head + 1,
            f"a snapshot was taken at position {position} but the log ends at {head}"
            " (events were deleted from its end)",
        )
    stored = db.execute("SELECT hash FROM events WHERE position = ?", (position,)).fetchone()
    if stored is None or str(stored[0]) != recorded:
        raise tampered(path, position, "its hash differs from the one recorded by the snapshot taken there")
    return position, recorded


def open_check(db: sqlite3.Connection, key: bytes | None, path: str) -> tuple[hashchain.ChainScheme, int]:
    """A writer's check at open; returns the scheme to append with and how many events were checked."""
    recorded = read_scheme(db)
    scheme = resolve_scheme(recorded, key, path, option="--log-key-file", adopt=True)
    head, _ = tip(db)
    horizon = check_compaction(db, path)
    start, start_hash = snapshot_start(db, head, path, horizon)
    checked = check_chain(db, scheme, start, start_hash, path)
    if key is not None and not recorded.keyed:
        scheme = adopt_key(db, key, head)
    return scheme, checked


def adopt_key(db: sqlite3.Connection, key: bytes, head: int) -> hashchain.ChainScheme:
    """Key an unkeyed log from its head on: events after `head` are HMAC links over the last unkeyed hash.

    The events up to `head` stay SHA-256 links, but the first keyed link covers their last hash, so they
    cannot be rewritten afterwards without the key either (see docs/security.md).
    """
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(
            "UPDATE chain_scheme SET scheme = ?, keyed_from = ?, key_check = ?, changed_at = ? WHERE id = 1",
            (hashchain.KEYED, head, hashchain.key_check(key), datetime.now(UTC).isoformat()),
        )
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return hashchain.ChainScheme(key, head)
