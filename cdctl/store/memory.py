"""An in-memory event store with the same contract as the SQLite one (tests, `cdctl replay` scratch work).

Runs the same sealing code, so versions, dedup, conflicts and the hash chain behave identically; the
contract suite in tests/store runs it beside SqliteEventStore.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime

from cdctl.domain.events import RecordedEvent, upcast
from cdctl.domain.hashchain import GENESIS
from cdctl.store.base import EventStore, HeadNotifier, StreamAppend
from cdctl.store.sealing import Chain, seal, utc_now


class InMemoryEventStore(EventStore):
    def __init__(self) -> None:
        self._events: list[RecordedEvent] = []
        self._by_stream: dict[str, list[RecordedEvent]] = {}
        self._chain = Chain(0, GENESIS)
        self._notifier = HeadNotifier()
        self._lock = asyncio.Lock()

    async def append_batch(self, appends: Sequence[StreamAppend]) -> list[RecordedEvent]:
        async with self._lock:
            for append in appends:
                self._chain.versions.setdefault(append.stream, len(self._by_stream.get(append.stream, ())))
            sealed = seal(appends, self._chain, lambda _uid, _rv: False, utc_now())
            for item in sealed:
                self._events.append(item.event)
                self._by_stream.setdefault(item.event.stream, []).append(item.event)
            self._notifier.advance(self._chain.head)
            return [item.event for item in sealed]

    async def read_stream(self, stream: str, from_version: int = 1) -> list[RecordedEvent]:
        return [upcast(e) for e in self._by_stream.get(stream, ())[max(from_version - 1, 0) :]]

    async def read_all(
        self, after: int = 0, limit: int | None = None, until: datetime | None = None
    ) -> list[RecordedEvent]:
        selected = [e for e in self._events[after:] if until is None or e.recorded_at <= until]
        return [upcast(e) for e in selected[:limit]]

    async def stream_version(self, stream: str) -> int:
        return len(self._by_stream.get(stream, ()))

    def head(self) -> int:
        return self._notifier.head

    def chain_head(self) -> tuple[int, str]:
        return self._chain.head, self._chain.last_hash

    async def wait_beyond(self, position: int) -> int:
        return await self._notifier.wait_beyond(position)

    async def close(self) -> None:
        return None
