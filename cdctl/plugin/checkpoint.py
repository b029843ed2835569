"""The plugin's claim checkpoint, kept as events in the node's event log instead of a JSON file.

Called by the prepare/unprepare path (cdctl.plugin.prepare) and at plugin start-up. `ClaimBook.load` folds
every `claim/<uid>` stream into `ClaimRecord`s (cdctl.domain.claims.fold); `append` writes a decision's events
atomically with the stream version it was based on (optimistic concurrency) and folds them into memory only
after they are durable (a write begun is finished and folded even if its caller is cancelled).
`observe_boot` records the boot id and invalidates the prepared claims of an older boot (the Go driver's
checkpoint invalidation, issue 951).

The book is also a projection (`ClaimBookProjection`, snapshot-only) so that compaction keeps it: at the
horizon it keeps every claim still active and the plugin stream's version and boot id, and `load` starts
from that snapshot. A claim that ended before the horizon is gone from the book after a restart, and from
the running plugin's book after the compaction (`forget_ended`); its stream's version is kept by the store
(stream_versions), and a first append for it asks the store for that version.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

import structlog

from cdctl.domain import claims as c
from cdctl.domain.errors import StoreError
from cdctl.domain.events import Actor, DomainEvent, NewEvent, RecordedEvent, decode
from cdctl.projections.base import Change, Projection, Row, View
from cdctl.projections.sinks import SqliteSink
from cdctl.store import EventStore, SqliteEventStore, StreamAppend

log = structlog.get_logger("cdctl.plugin.checkpoint")

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
_READ_BATCH = 5000


async def _finished(write: asyncio.Future[Any]) -> None:
    """Wait for a write whose caller was cancelled (a second cancellation waits no longer); its failure
    was the caller's to see, and the caller is gone: it is logged, without a stack."""
    try:
        await asyncio.shield(write)
    except asyncio.CancelledError:
        write.add_done_callback(_log_failure)
    except Exception:  # any failure of the write: its caller cannot take it now
        _log_failure(write)


def _log_failure(write: asyncio.Future[Any]) -> None:
    if not write.cancelled() and (exc := write.exception()) is not None:
        log.warning("a claim write whose caller gave up failed", error=f"{type(exc).__name__}: {exc}")


def read_boot_id(path: str = BOOT_ID_PATH) -> str:
    """The kernel's boot id, trimmed (an unreadable file gives "", which never invalidates)."""
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return ""


SNAPSHOT_NAME = "claim_book"
_PLUGIN_KEY = ("plugin",)


def record_row(record: c.ClaimRecord) -> Row:
    row = dataclasses.asdict(record)
    row["state"] = record.state.value if record.state is not None else None
    return row


def row_record(row: Row) -> c.ClaimRecord:
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in row.items()}
    values["state"] = c.ClaimState(row["state"]) if row.get("state") else None
    return c.ClaimRecord(**values)


class ClaimBookProjection(Projection):
    """The claim book as a snapshot-only projection (no table): what compaction keeps of the checkpoint.

    While folding, a claim's view entry holds its ClaimRecord (`{"record": ...}`: folding is the plugin's own
    start-up fold); the snapshot holds records as plain rows, of the active claims only.
    """

    name = table = SNAPSHOT_NAME
    columns = ("claim_uid",)
    key_columns = ("claim_uid",)

    def __init__(self, node: str) -> None:
        self.plugin_stream = c.plugin_stream(node)

    def wants(self, event: RecordedEvent) -> bool:
        return event.stream.startswith(c.CLAIM_STREAM_PREFIX) or event.stream == self.plugin_stream

    def fold(self, view: View, event: RecordedEvent) -> list[Change]:
        if event.stream == self.plugin_stream:
            typed = decode(event)
            boot = (
                typed.boot_id
                if isinstance(typed, c.PluginStarted)
                else view.get(_PLUGIN_KEY, {}).get("boot_id")
            )
            return [Change(_PLUGIN_KEY, {"version": event.version, "boot_id": boot or ""}, persist=False)]
        uid = event.stream[len(c.CLAIM_STREAM_PREFIX) :]
        known = view.get(("claim", uid))
        record = known["record"] if known is not None else c.ClaimRecord(uid)
        record = c.fold(record, decode(event), event.version)
        return [Change(("claim", uid), {"record": record}, persist=False)]

    def restore_view(self, rows: Iterable[tuple[tuple[Any, ...], Row]]) -> dict[tuple[Any, ...], Row]:
        return {key: row if key == _PLUGIN_KEY else {"record": row_record(row)} for key, row in rows}

    def snapshot_view(self, view: View) -> dict[tuple[Any, ...], Row]:
        """Active claims and the plugin stream's state: a claim that ended holds nothing on the node."""
        return {
            key: row if key == _PLUGIN_KEY else record_row(row["record"])
            for key, row in view.items()
            if key == _PLUGIN_KEY or row["record"].active
        }


class ClaimBook:
    """In-memory fold of the node's claim streams, written through to the event log."""

    def __init__(self, store: EventStore, node: str, actor: Actor) -> None:
        self.store = store
        self.node = node
        self.actor = actor
        self._records: dict[str, c.ClaimRecord] = {}
        # by claim uid: where its stream's latest event is in the log (what `forget_ended` compares)
        self._last_position: dict[str, int] = {}
        self._boot_id = ""
        self._plugin_version = 0
        self.compacted = False  # loaded from a compaction's snapshot: claims that ended before it are gone

    @classmethod
    async def load(cls, store: EventStore, node: str, actor: Actor | None = None) -> ClaimBook:
        book = cls(store, node, actor or Actor("kubelet-plugin", node=node))
        after = 0
        plugin_stream = c.plugin_stream(node)
        if isinstance(store, SqliteEventStore) and await store.horizon() is not None:
            snapshot = await SqliteSink(store).load_snapshot(SNAPSHOT_NAME, store.head())
            if snapshot is None:
                raise StoreError(
                    f"{store.path}: compacted without a snapshot of the claim book: its claims are unknown"
                )
            book.compacted = True
            after, rows = snapshot
            for key, row in rows:
                if tuple(key) == _PLUGIN_KEY:
                    book._plugin_version, book._boot_id = int(row["version"]), str(row["boot_id"])
                else:
                    book._records[str(key[1])] = row_record(row)
        while True:
            batch = await store.read_all(after=after, limit=_READ_BATCH)
            if not batch:
                break
            for rec in batch:
                after = rec.position
                if rec.stream.startswith(c.CLAIM_STREAM_PREFIX):
                    uid = rec.stream[len(c.CLAIM_STREAM_PREFIX) :]
                    current = book._records.get(uid) or c.ClaimRecord(uid)
                    book._records[uid] = c.fold(current, decode(rec), rec.version)
                    book._last_position[uid] = rec.position
                elif rec.stream == plugin_stream:
                    ev = decode(rec)
                    book._plugin_version = rec.version
                    if isinstance(ev, c.PluginStarted):
                        book._boot_id = ev.boot_id
        return book

    def get(self, uid: str) -> c.ClaimRecord | None:
        return self._records.get(uid)

    def version(self, uid: str) -> int:
        rec = self._records.get(uid)
        return rec.version if rec else 0

    def records(self) -> Iterable[c.ClaimRecord]:
        return self._records.values()

    def active(self) -> list[c.ClaimRecord]:
        return [r for r in self._records.values() if r.active]

    @property
    def boot_id(self) -> str:
        return self._boot_id

    async def append(
        self, uid: str, events: Sequence[DomainEvent], *, expected_version: int | None = None
    ) -> c.ClaimRecord:
        """Append `events` to `claim/<uid>` atomically; fold them once durable. Raises ConcurrencyConflict."""
        current = self._records.get(uid)
        if current is None:  # new here, or ended before the log's horizon: the store knows its version
            version = await self.store.stream_version(c.claim_stream(uid)) if self.compacted else 0
            current = c.ClaimRecord(uid, version=version)
        expected = current.version if expected_version is None else expected_version
        # Check the moves before writing, so an illegal transition never reaches the log.
        probe = current
        for i, ev in enumerate(events, start=1):
            probe = c.fold(probe, ev, current.version + i)
        # Shielded: a caller cancelled at its deadline must not leave a durable write unfolded in memory. And
        # the caller waits for the write before its cancellation goes on: it holds the claim's lock, and a
        # decision let in before the write lands would be based on the version before it (found by
        # bench/socket_fuzz.py: the write then failed its version check, an exception nobody retrieved).
        write = asyncio.ensure_future(self._write(uid, events, current, expected))
        try:
            return await asyncio.shield(write)
        except asyncio.CancelledError:
            await _finished(write)
            raise

    async def _write(
        self, uid: str, events: Sequence[DomainEvent], current: c.ClaimRecord, expected: int
    ) -> c.ClaimRecord:
        recorded = await self.store.append(
            c.claim_stream(uid), [NewEvent.of(ev, actor=self.actor) for ev in events], expected
        )
        rec = current
        for ev, stored in zip(events, recorded, strict=True):
            rec = c.fold(rec, ev, stored.version)
            self._last_position[uid] = stored.position
        self._records[uid] = rec
        return rec

    def forget_ended(self, horizon: int, busy: Iterable[str] = ()) -> int:
        """Drop the claims that ended with their whole stream at or before `horizon` (a compaction removed
        it), except those in `busy` (in a kubelet call: a Prepare in flight reads the record as its fence).
        The book is then what a restart would load from the compaction's snapshot: without this, a plugin
        that runs for months keeps every claim it ever saw in memory. How many were dropped."""
        keep = set(busy)
        gone = [
            uid
            for uid, rec in self._records.items()
            if not rec.active and uid not in keep and self._last_position.get(uid, 0) <= horizon
        ]
        for uid in gone:
            del self._records[uid]
            self._last_position.pop(uid, None)
        self.compacted = True  # a claim named again asks the store for its stream's version
        return len(gone)

    async def record_node(self, event: DomainEvent) -> None:
        """Append an event about the node itself (its fabric, say) to the plugin's stream."""
        recorded = await self.store.append(
            c.plugin_stream(self.node), [NewEvent.of(event, actor=self.actor)], self._plugin_version
        )
        self._plugin_version = recorded[-1].version

    async def observe_boot(self, boot_id: str, clique_id: str = "") -> list[c.ClaimRecord]:
        """Record this start's boot id; if it differs from the last one, invalidate every active claim.

        Returns the records as they were before invalidation (their CDI specs are the caller's to remove).
        """
        invalidated: list[c.ClaimRecord] = []
        appends: list[StreamAppend] = []
        if self._boot_id and boot_id and boot_id != self._boot_id:
            reason = f"boot id changed from {self._boot_id} to {boot_id}"
            for rec in self.active():
                events: list[DomainEvent] = []
                if rec.channels:
                    events.append(
                        c.ChannelReleased(rec.claim_uid, self.node, rec.channels[0], len(rec.channels))
                    )
                events.append(c.ClaimInvalidated(rec.claim_uid, reason))
                appends.append(
                    StreamAppend(
                        c.claim_stream(rec.claim_uid),
                        [NewEvent.of(e, actor=self.actor) for e in events],
                        rec.version,
                    )
                )
                invalidated.append(rec)
            log.warning("invalidating checkpoint", reason=reason, claims=len(invalidated))
        started = c.PluginStarted(self.node, boot_id, clique_id)
        appends.append(
            StreamAppend(
                c.plugin_stream(self.node), [NewEvent.of(started, actor=self.actor)], self._plugin_version
            )
        )
        recorded = await self.store.append_batch(appends)
        for stored in recorded:
            if stored.stream.startswith(c.CLAIM_STREAM_PREFIX):
                uid = stored.stream[len(c.CLAIM_STREAM_PREFIX) :]
                self._records[uid] = c.fold(self._records[uid], decode(stored), stored.version)
            else:
                self._plugin_version = stored.version
        self._boot_id = boot_id or self._boot_id
        return invalidated
