"""The event store contract every implementation honours (SQLite on disk, in memory for tests).

Callers: the components' decision code appends; projections and subscribers read. The contract test suite in
tests/store/test_contract.py runs every implementation through the same cases.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Self

from cdctl.domain.events import NewEvent, RecordedEvent

ANY: Final = -1
"""expected_version: append whatever the stream's current version."""
NO_STREAM: Final = 0
"""expected_version: the stream must not exist yet."""


@dataclass(frozen=True, slots=True)
class StreamAppend:
    """Events for one stream within an atomic batch, with the version the caller based its decision on."""

    stream: str
    events: Sequence[NewEvent]
    expected_version: int = ANY


class EventStore(abc.ABC):
    """Append-only, hash-chained log of events in streams, with optimistic concurrency."""

    @abc.abstractmethod
    async def append_batch(self, appends: Sequence[StreamAppend]) -> list[RecordedEvent]:
        """Append to one or more streams atomically: all events commit, or none.

        Raises ConcurrencyConflict when a stream's version is not the expected one. Events carrying an
        `observed` (uid, resourceVersion) already recorded are skipped; the result lists only what was
        written.
        Returns once the events are durable; subscribers are woken after the commit.
        """

    async def append(
        self, stream: str, events: Sequence[NewEvent], expected_version: int = ANY
    ) -> list[RecordedEvent]:
        return await self.append_batch([StreamAppend(stream, events, expected_version)])

    @abc.abstractmethod
    async def read_stream(self, stream: str, from_version: int = 1) -> list[RecordedEvent]:
        """A stream's events from `from_version` on, upcast to current schema versions."""

    @abc.abstractmethod
    async def read_all(
        self, after: int = 0, limit: int | None = None, until: datetime | None = None
    ) -> list[RecordedEvent]:
        """Events with position > `after` (and recorded at or before `until`), in order, upcast."""

    @abc.abstractmethod
    async def stream_version(self, stream: str) -> int:
        """The stream's last version, 0 when it does not exist."""

    @abc.abstractmethod
    def head(self) -> int:
        """The position of the last committed event (0 for an empty log)."""

    @abc.abstractmethod
    def chain_head(self) -> tuple[int, str]:
        """The last committed event's (position, hash); (0, 64 zeros) for an empty log.

        Components publish it (metrics, log lines) so that a copy of the log cut at its end can be told from
        the log as it was: `cdctl verify --expect-head POSITION:HASH`."""

    @abc.abstractmethod
    async def wait_beyond(self, position: int) -> int:
        """Wait until the head passes `position` (woken by commits, no polling); return the head.

        Bound the wait with `asyncio.timeout` where needed."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Finish queued appends and release the file."""

    async def subscribe(self, after: int = 0, batch: int = 1000) -> AsyncIterator[RecordedEvent]:
        """Every event with position > `after`, then each new one as it commits; ends when cancelled."""
        position = after
        while True:
            events = await self.read_all(after=position, limit=batch)
            for event in events:
                yield event
                position = event.position
            if not events:
                await self.wait_beyond(position)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class HeadNotifier:
    """Wakes waiters after each commit; the writer calls `advance`, readers `wait_beyond`.

    `advance` is synchronous (the writer calls it once per commit, in its hot path): it swaps in a fresh
    event and sets the old one, waking everyone who waited for a head beyond the previous one.
    """

    def __init__(self, head: int = 0) -> None:
        self._head = head
        self._changed = asyncio.Event()

    @property
    def head(self) -> int:
        return self._head

    def advance(self, head: int) -> None:
        self._head = head
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait_beyond(self, position: int) -> int:
        while self._head <= position:
            await self._changed.wait()
        return self._head
