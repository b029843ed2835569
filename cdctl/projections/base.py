"""What a projection is: a pure fold from (view, event) to row changes, plus the table it fills.

The view is a mapping of keys to rows. `fold` reads it and returns the changes the event causes; it never
mutates and does no I/O, so the same code runs in the live runner, in `cdctl replay` and in `cdctl verify`.
A change may be persisted to the projection's table, retained in the live view, or both: history rows are
persisted but not retained (the table is their home), and private indexes are retained but not persisted.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cdctl.domain.events import RecordedEvent

Key = tuple[Any, ...]
Row = dict[str, Any]
View = Mapping[Key, Row]


@dataclass(frozen=True, slots=True)
class Change:
    """Set `key` to `row` (None deletes it)."""

    key: Key
    row: Row | None
    persist: bool = True
    retain: bool = True


class Projection(abc.ABC):
    """Subclasses name their table's columns; the key columns identify a row."""

    name: str
    table: str
    columns: tuple[str, ...]
    key_columns: tuple[str, ...]

    @abc.abstractmethod
    def fold(self, view: View, event: RecordedEvent) -> list[Change]:
        """The changes `event` makes to the view (pure)."""

    def row_key(self, row: Row) -> Key:
        return tuple(row[c] for c in self.key_columns)
