"""The daemon's own event log: appends the IMEX events of cdctl.domain.imex to stream `node/<name>`.

Opened by cdctl.daemon.app at `<imexd>/events.db` (or `--db`); the supervisor, the peer loop and the readiness
monitor record through `Journal.record`. One process writes the file, so appends state the version they
expect (a conflict, from a record cancelled while its append committed, is caught up and appended again); a
record that cannot be written is logged and dropped rather than stopping IMEX supervision (the log is an
account of what happened, not a precondition for it). After each record the log's head (position and
hash) is logged: the daemon has no metrics endpoint, and a head kept outside the file detects a cut tail.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import structlog

from cdctl.domain.errors import CdctlError, ConcurrencyConflict
from cdctl.domain.events import Actor, DomainEvent, NewEvent
from cdctl.domain.imex import imex_stream
from cdctl.store import SqliteEventStore
from cdctl.store.integrity import read_key_file

log = structlog.get_logger(__name__)
COMPONENT = "compute-domain-daemon"
APPEND_ATTEMPTS = 3  # one writer per file: a conflict is this process's own count gone stale


class Journal:
    def __init__(self, store: SqliteEventStore, node: str, actor: Actor) -> None:
        self.store = store
        self.stream = imex_stream(node)
        self.actor = actor
        self._version = 0
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: Path, node: str, pod: str, key_file: Path | None = None) -> Journal:
        """Open (and check) the log; a tampered log or a missing key stops the daemon (StoreError)."""
        key = read_key_file(key_file) if key_file is not None else None
        store = await SqliteEventStore.open(path, key=key)
        journal = cls(store, node, Actor(COMPONENT, pod=pod, node=node))
        journal._version = await store.stream_version(journal.stream)
        position, hash_ = store.chain_head()
        log.info("event log opened", path=str(path), chain=store.scheme.name, head_position=position,
                 head_hash=hash_, checked=store.checked_at_open)  # fmt: skip
        return journal

    async def record(self, *events: DomainEvent) -> None:
        new = [NewEvent.of(e, actor=self.actor) for e in events]
        async with self._lock:
            for attempt in range(1, APPEND_ATTEMPTS + 1):
                try:
                    await self.store.append(self.stream, new, self._version)
                    break
                except CdctlError as exc:
                    self._version = await self.store.stream_version(self.stream)
                    if isinstance(exc, ConcurrencyConflict) and attempt < APPEND_ATTEMPTS:
                        # A record cancelled while its append was committing (a task stopped at shutdown)
                        # still wrote its events, and this count missed them: caught up, append again, or
                        # this event (the IMEX exit that follows a stop) would be lost.
                        continue
                    log.warning("event not recorded", events=[e.TYPE for e in events], error=exc.message)
                    return
            self._version += len(events)
            # The daemon serves no metrics: its log lines carry the head, for `cdctl verify --expect-head`.
            position, hash_ = self.store.chain_head()
            log.info(
                "event log head", events=[e.TYPE for e in events], head_position=position, head_hash=hash_
            )

    async def close(self) -> None:
        await self.store.close()
