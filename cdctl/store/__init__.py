"""The event store: append-only SQLite log with a single writer task, hash chain, notifier and snapshots.

Public API (what other layers import):
- `SqliteEventStore.open(path, read_only=False)` / `InMemoryEventStore()`: both implement `EventStore`.
- `EventStore.append(stream, [NewEvent...], expected_version=ANY|NO_STREAM|n)`, `append_batch([StreamAppend])`
  (atomic), `read_stream`, `read_all(after, limit, until)`, `stream_version`, `head`, `wait_beyond`,
  `subscribe(after)` (async iterator woken after each commit).
- Events are built with `cdctl.domain.events.NewEvent.of(typed_event, actor=..., observed=...)`.
"""

from cdctl.store.base import ANY, NO_STREAM, EventStore, StreamAppend
from cdctl.store.memory import InMemoryEventStore
from cdctl.store.sqlite import SqliteEventStore

__all__ = ["ANY", "NO_STREAM", "EventStore", "InMemoryEventStore", "SqliteEventStore", "StreamAppend"]
