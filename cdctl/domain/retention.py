"""Retention of event logs: the policy, how a horizon is chosen, and the events that record compaction. Pure.

Every component bounds its log by age and by size (`--retention-age`, default 30 days; `--retention-size`,
default 1 GiB; 0 turns a bound off), checked every `--retention-interval` (default 1 h). A compaction
removes a prefix of the log, positions up to a horizon, and records itself as events in stream
`log/compaction`: `LogCompactionStarted` (what is removed, why, the hash the first kept event links to, the
digest of the snapshot kept) before anything is removed, and `LogCompacted` (what was removed, the space
reclaimed, how long it took) after. The kubelet plugin prunes its kept IMEX daemon logs (`imex-history/`)
by the same policy and records each removal as `ImexHistoryPruned` in stream `log/imex-history`. Used by
cdctl.store.compaction, cdctl.projections.compaction and the components' command lines.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from cdctl.domain.errors import InvalidInput
from cdctl.domain.events import DomainEvent, event_type

COMPACTION_STREAM = "log/compaction"
IMEX_HISTORY_STREAM = "log/imex-history"
DAY_S = 86_400.0
DEFAULT_AGE_S = 30 * DAY_S
DEFAULT_SIZE_BYTES = 1 << 30
DEFAULT_AGE = "30d"
DEFAULT_SIZE = "1GiB"
MIN_AGE_S = 60.0
MIN_SIZE_BYTES = 1 << 20
DEFAULT_INTERVAL_S = 3600.0
DEFAULT_INTERVAL = "1h"
MIN_INTERVAL_S = 1.0
# Under the size bound, compaction removes enough to come back to this fraction of it, so that a log at its
# bound is not compacted again for every few events appended.
SIZE_TARGET = 0.9

REASON_AGE = "age"
REASON_SIZE = "size"

_AGE = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d|w)?$")
_AGE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY_S, "w": 7 * DAY_S}
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?$", re.IGNORECASE)
_SIZE_POWERS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4}


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How long and how much of a log to keep; 0 turns that bound off."""

    age_s: float = DEFAULT_AGE_S
    size_bytes: int = DEFAULT_SIZE_BYTES

    @property
    def enabled(self) -> bool:
        return self.age_s > 0 or self.size_bytes > 0

    def describe(self) -> str:
        age = format_age(self.age_s) if self.age_s else "unbounded"
        size = format_size(self.size_bytes) if self.size_bytes else "unbounded"
        return f"age {age}, size {size}"


def parse_age(text: str, option: str = "--retention-age") -> float:
    """A retention age: a number with a unit (s, m, h, d, w; seconds without one), or 0 for none."""
    match = _AGE.match(str(text).strip())
    if not match:
        raise InvalidInput(
            "command line",
            option,
            f"{text!r} is not an age (a number and s, m, h, d or w: 30d, 12h; 0: none)",
        )
    seconds = float(match.group(1)) * _AGE_UNITS[match.group(2) or "s"]
    if seconds and seconds < MIN_AGE_S:
        raise InvalidInput("command line", option, f"{text!r} is shorter than a minute (0 turns it off)")
    return seconds


def parse_interval(text: str, option: str = "--retention-interval") -> float:
    """How often a component checks its log against its policy: a number with a unit (s, m, h, d, w;
    seconds without one), at least a second. Small values are for tests and soak runs: each round reads
    the log's size and, when a bound is crossed, compacts."""
    match = _AGE.match(str(text).strip())
    if not match:
        raise InvalidInput(
            "command line", option, f"{text!r} is not an interval (a number and s, m, h, d or w: 1h, 30s)"
        )
    seconds = float(match.group(1)) * _AGE_UNITS[match.group(2) or "s"]
    if seconds < MIN_INTERVAL_S:
        raise InvalidInput("command line", option, f"{text!r} is shorter than a second")
    return seconds


def parse_size(text: str, option: str = "--retention-size") -> int:
    """A retention size: bytes, or a number with KB/MB/GB/TB (powers of 1000) or KiB/MiB/GiB/TiB or
    Ki/Mi/Gi/Ti (powers of 1024); 0 for none."""
    match = _SIZE.match(str(text).strip())
    if not match:
        raise InvalidInput(
            "command line", option, f"{text!r} is not a size (bytes, or e.g. 512MiB, 1GiB, 2GB; 0: none)"
        )
    unit = (match.group(2) or "").upper().rstrip("B")
    base = 1024 if unit.endswith("I") else 1000
    size = int(float(match.group(1)) * base ** _SIZE_POWERS[unit.rstrip("I")])
    if size and size < MIN_SIZE_BYTES:
        raise InvalidInput("command line", option, f"{text!r} is under 1 MiB (0 turns it off)")
    return size


def format_age(seconds: float) -> str:
    for unit in ("w", "d", "h", "m"):
        if seconds >= _AGE_UNITS[unit] and seconds % _AGE_UNITS[unit] == 0:
            return f"{int(seconds // _AGE_UNITS[unit])}{unit}"
    return f"{seconds:g}s"


def format_size(size: int) -> str:
    for power, unit in ((4, "TiB"), (3, "GiB"), (2, "MiB"), (1, "KiB")):
        if size >= 1024**power and size % 1024**power == 0:
            return f"{size // 1024**power}{unit}"
    return f"{size}B"


@dataclass(frozen=True, slots=True)
class LogFacts:
    """What the horizon is chosen from, read from the log in one go."""

    first: int  # the first position still held (horizon + 1 on a compacted log)
    head: int
    live_bytes: int  # pages in use times the page size (free pages excluded)
    aged_until: int  # the last position of the longest prefix of events older than the age bound
    cap: int  # the highest position the projections allow removing (each persisted one has folded it)


def choose_horizon(facts: LogFacts, policy: RetentionPolicy) -> tuple[int, str]:
    """The last position to remove and why ("age", "size" or "age+size"); (0, "") when nothing is due.

    The size bound removes, oldest first, the share of events that brings the log back to SIZE_TARGET of
    the bound (events and what hangs off them make most of a log). Nothing past `facts.cap` is removed.
    """
    if facts.head < facts.first:
        return 0, ""
    by_age = facts.aged_until if policy.age_s > 0 else 0
    by_size = 0
    if policy.size_bytes > 0 and facts.live_bytes > policy.size_bytes:
        held = facts.head - facts.first + 1
        excess = facts.live_bytes - SIZE_TARGET * policy.size_bytes
        by_size = facts.first - 1 + min(held, math.ceil(held * excess / facts.live_bytes))
    horizon = min(max(by_age, by_size), facts.cap, facts.head)
    if horizon < facts.first:
        return 0, ""
    reasons = [name for name, bound in ((REASON_AGE, by_age), (REASON_SIZE, by_size)) if bound >= facts.first]
    return horizon, "+".join(reasons)


@event_type("LogCompactionStarted")
@dataclass(frozen=True, slots=True)
class LogCompactionStarted(DomainEvent):
    """Events first_position..last_position are about to be removed (the record that allows it)."""

    first_position: int
    last_position: int
    events: int
    anchor_hash: str  # the hash of event last_position: what the first kept event links to
    horizon_recorded_at: str  # the latest recorded_at among the removed events
    reason: str
    retention_age_s: float
    retention_size_bytes: int
    live_bytes: int
    snapshot_digest: str
    snapshots: list[str] = field(default_factory=list)


@event_type("LogCompacted")
@dataclass(frozen=True, slots=True)
class LogCompacted(DomainEvent):
    """The removal announced by the LogCompactionStarted at `record_position` is done."""

    record_position: int
    last_position: int
    events_removed: int
    rows_removed: dict[str, int]
    observations_removed: int
    streams_ended: int  # streams all of whose events went; their last version is kept
    duration_s: float
    batches: int
    longest_batch_s: float
    live_bytes_before: int
    live_bytes_after: int


@event_type("ImexHistoryPruned")
@dataclass(frozen=True, slots=True)
class ImexHistoryPruned(DomainEvent):
    """The kept IMEX daemon log of a gone ComputeDomain was removed from `imex-history/`."""

    domain_uid: str
    files: list[str]
    bytes: int
    last_written: str
    reason: str
