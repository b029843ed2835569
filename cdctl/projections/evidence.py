"""Where a statement about the history comes from: one event, named so that `cdctl events` can show it.

`Evidence.of(line)` takes a timeline line (cdctl.projections.timeline.Line) and keeps what identifies its
event: the source (a collected file's; '' in a single log), the stream and version, the position in that
source's log, the type and when it was recorded. `cite()` is the short form every line of `cdctl explain`
ends with; `show(db)` the `cdctl events` command that lists it. Used by cdctl.projections.formation (each
mark), cdctl.projections.explain and cdctl.projections.causes. Pure.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cdctl.projections.timeline import Line


@dataclass(frozen=True, slots=True)
class Evidence:
    source: str
    stream: str
    version: int
    position: int
    type: str
    at: datetime

    @classmethod
    def of(cls, line: Line) -> Evidence:
        event = line.event
        return cls(line.source, event.stream, event.version, event.position, event.type, event.recorded_at)

    def cite(self) -> str:
        where = f"{self.source} " if self.source else ""
        return f"[{where}#{self.position} {self.type}]"

    def show(self, db: str) -> str:
        """The `cdctl events` command whose listing holds this event (its POSITION column says which)."""
        words = ["cdctl", "events", "--db", db]
        if self.source:
            words += ["--source", self.source]
        words += ["--stream", self.stream, "--type", self.type]
        return shlex.join(words)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source, "stream": self.stream, "version": self.version,
            "position": self.position, "type": self.type,
            "recorded_at": self.at.isoformat(timespec="microseconds"),
        }  # fmt: skip
