"""The daemon's own event log: appends the IMEX events of cdctl.domain.imex to stream `node/<name>`.

Opened by cdctl.daemon.app at `<imexd>/events.db` (or `--db`); the supervisor, the peer loop and the readiness
monitor record through `Journal.record`. One process writes the file, so appends state the version they
expect; a record that cannot be written is logged and dropped rather than stopping IMEX supervision (the log
is an account of what happened, not a precondition for it).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import structlog

from cdctl.domain.errors import CdctlError
from cdctl.domain.events import Actor, DomainEvent, NewEvent
from cdctl.domain.imex import imex_stream
from cdctl.store import SqliteEventStore

log = structlog.get_logger(__name__)
COMPONENT = "compute-domain-daemon"


class Journal:
    def __init__(self, store: SqliteEventStore, node: str, actor: Actor) -> None:
        self.store = store
        self.stream = imex_stream(node)
        self.actor = actor
        self._version = 0
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: Path, node: str, pod: str) -> Journal:
        store = await SqliteEventStore.open(path)
        journal = cls(store, node, Actor(COMPONENT, pod=pod, node=node))
        journal._version = await store.stream_version(journal.stream)
        return journal

    async def record(self, *events: DomainEvent) -> None:
        async with self._lock:
            try:
                await self.store.append(
                    self.stream, [NewEvent.of(e, actor=self.actor) for e in events], self._version
                )
            except CdctlError as exc:
                log.warning("event not recorded", events=[e.TYPE for e in events], error=exc.message)
                self._version = await self.store.stream_version(self.stream)
                return
            self._version += len(events)

    async def close(self) -> None:
        await self.store.close()
