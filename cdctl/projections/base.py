"""What a projection is: a pure fold from (view, event) to row changes, plus the table it fills.

The view is a mapping of keys to rows. `fold` reads it and returns the changes the event causes; it never
mutates and does no I/O, so the same code runs in the live runner, in `cdctl replay` and in `cdctl verify`.
A change may be persisted to the projection's table, retained in the live view, or both: history rows are
persisted but not retained (the table is their home), and private indexes are retained but not persisted.
Compaction keeps each projection's view at its horizon (`snapshot_view`); the rows of the table that view
still explains (`table_image`) are kept with it, and history rows before the horizon go.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from cdctl.domain.events import RecordedEvent

Key = tuple[Any, ...]
Row = dict[str, Any]
View = Mapping[Key, Row]


def in_log_order(table: Mapping[Key, Row]) -> list[Key]:
    """A table's keys in log order: by the position of the event that last wrote the row, then by key with
    numbers compared as numbers (text order put position 102 before 12)."""

    def order(key: Key) -> tuple[float, tuple[tuple[int, Any], ...]]:
        position = table[key].get("position")
        at = float(position) if isinstance(position, int) and not isinstance(position, bool) else float("inf")
        return at, tuple((0, part) if isinstance(part, int | float) else (1, str(part)) for part in key)

    return sorted(table, key=order)


class Change(NamedTuple):
    """Set `key` to `row` (None deletes it). A NamedTuple: folds build millions of these on replay.

    A `partial` change carries only some columns and updates the persisted row if there is one (never
    retained): how a late event about a finished claim reaches its history row without the view keeping it.
    """

    key: Key
    row: Row | None
    persist: bool = True
    retain: bool = True
    partial: bool = False


def merge_change(earlier: Change | None, later: Change) -> Change:
    """Two persisted changes to one key within a batch, as one (a partial one updates what came before)."""
    if earlier is None or not later.partial:
        return later
    if earlier.row is None:
        return earlier  # deleted: a partial update has no row to touch
    return earlier._replace(row={**earlier.row, **(later.row or {})})


def apply_to_table(table: dict[Key, Row], change: Change) -> None:
    """A persisted change applied to an in-memory image of the table (replay, verify, the memory sink)."""
    if change.row is None:
        table.pop(change.key, None)
    elif change.partial:
        if change.key in table:
            table[change.key] = {**table[change.key], **change.row}
    else:
        table[change.key] = change.row


class Projection(abc.ABC):
    """Subclasses name their table's columns; the key columns identify a row."""

    name: str
    table: str
    columns: tuple[str, ...]
    key_columns: tuple[str, ...]
    handles: frozenset[str] | None = None
    """The event types `fold` reacts to (None: it looks at every event); lets replay skip the rest cheaply."""
    stream_prefix: str | None = None
    """Only events of streams starting with this are folded (None: every stream)."""

    def wants(self, event: RecordedEvent) -> bool:
        if self.handles is not None and event.type not in self.handles:
            return False
        return self.stream_prefix is None or event.stream.startswith(self.stream_prefix)

    @abc.abstractmethod
    def fold(self, view: View, event: RecordedEvent) -> list[Change]:
        """The changes `event` makes to the view (pure)."""

    def row_key(self, row: Row) -> Key:
        return tuple(row[c] for c in self.key_columns)

    def snapshot_view(self, view: View) -> dict[Key, Row]:
        """The view kept at a compaction's horizon (a projection may drop what nothing after it needs)."""
        return dict(view)

    def restore_view(self, rows: Iterable[tuple[Key, Row]]) -> dict[Key, Row]:
        """The view to fold on from, given a snapshot's rows (the inverse of `snapshot_view`'s encoding)."""
        return dict(rows)

    def table_image(self, view: View) -> dict[Key, Row]:
        """The table rows a view holds: a change both persisted and retained puts the same row in each.

        Private index entries (retained, never persisted) are told apart by not being rows of the table.
        """
        columns = self.columns
        return {
            key: row
            for key, row in view.items()
            if all(c in row for c in columns) and self.row_key(row) == key
        }


class Router:
    """Which projections an event concerns, decided once per event type (replay folds millions of events)."""

    def __init__(self, projections: Sequence[Projection]) -> None:
        self.projections = list(projections)
        self._by_type: dict[str, tuple[list[Projection], bool]] = {}

    def route(self, event: RecordedEvent) -> list[Projection]:
        entry = self._by_type.get(event.type)
        if entry is None:
            candidates = [p for p in self.projections if p.handles is None or event.type in p.handles]
            entry = self._by_type[event.type] = (candidates, any(p.stream_prefix for p in candidates))
        candidates, by_stream = entry
        if not by_stream:
            return candidates
        return [p for p in candidates if p.stream_prefix is None or event.stream.startswith(p.stream_prefix)]
