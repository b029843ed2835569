"""Pruning the kept IMEX daemon logs (`<plugin dir>/imex-history/`) by the log retention policy.

When a ComputeDomain goes, the plugin keeps its daemon's event log as `imex-history/<domain uid>.db` (with
its -wal and -shm; cdctl.plugin.prepare). Each retention round (cdctl.projections.retention) prunes them by
the plugin's own policy: a kept log last written longer ago than the age bound goes, then, while the
directory holds more than the size bound, a log larger than the bound by itself goes first, then the oldest.
Only logs of domains gone from this node are touched (a uid whose `domains/<uid>` directory is back is left
alone), and only files named like kept logs (never through a symbolic link). Each removal is recorded first
(ImexHistoryPruned, stream `log/imex-history` of the plugin's log), then done, then logged. Called by
cdctl.plugin.app.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import structlog

from cdctl.domain.events import Actor, NewEvent
from cdctl.domain.retention import (
    IMEX_HISTORY_STREAM,
    REASON_AGE,
    REASON_SIZE,
    ImexHistoryPruned,
    RetentionPolicy,
)
from cdctl.store import EventStore

log = structlog.get_logger("cdctl.plugin.imexhistory")
_KEPT = re.compile(r"^(?P<uid>[0-9A-Za-z][0-9A-Za-z._-]*)\.db(?P<side>-wal|-shm|-journal)?$")


@dataclass(frozen=True, slots=True)
class KeptLog:
    """One gone domain's kept daemon log: its files, their total size, when it was last written."""

    domain_uid: str
    files: tuple[Path, ...]
    bytes: int
    last_written: float  # seconds since the epoch: the newest of its files' modification times


def kept_logs(history: Path) -> list[KeptLog]:
    """The kept logs in `history`, oldest first (a side file whose log is gone counts as its own)."""
    groups: dict[str, list[tuple[Path, int, float]]] = {}
    try:
        entries = list(history.iterdir())
    except FileNotFoundError:
        return []
    for entry in entries:
        match = _KEPT.match(entry.name)
        if match is None or not entry.is_file() or entry.is_symlink():
            continue
        stat = entry.stat()
        groups.setdefault(match.group("uid"), []).append((entry, stat.st_size, stat.st_mtime))
    found = [
        KeptLog(
            uid,
            tuple(sorted(p for p, _, _ in files)),
            sum(s for _, s, _ in files),
            max(m for _, _, m in files),
        )
        for uid, files in groups.items()
    ]
    return sorted(found, key=lambda kept: (kept.last_written, kept.domain_uid))


def choose(
    logs: list[KeptLog], policy: RetentionPolicy, now: float, present: set[str]
) -> list[tuple[KeptLog, str]]:
    """What to remove and why: older than the age bound, then oldest first while over the size bound."""
    candidates = [kept for kept in logs if kept.domain_uid not in present]
    chosen: list[tuple[KeptLog, str]] = []
    if policy.age_s > 0:
        chosen = [(kept, REASON_AGE) for kept in candidates if now - kept.last_written > policy.age_s]
    if policy.size_bytes > 0:
        gone = {kept.domain_uid for kept, _ in chosen}
        total = sum(kept.bytes for kept in logs if kept.domain_uid not in gone)
        # A log larger than the whole bound goes first, whatever its age: a daemon that bloats its own log
        # must not push the other domains' history out.
        oversized = [kept for kept in candidates if kept.bytes > policy.size_bytes]
        for kept in [*oversized, *candidates]:
            if total <= policy.size_bytes:
                break
            if kept.domain_uid not in gone:
                chosen.append((kept, REASON_SIZE))
                gone.add(kept.domain_uid)
                total -= kept.bytes
    return chosen


async def prune(
    plugin_dir: Path, policy: RetentionPolicy, store: EventStore, actor: Actor, now: float | None = None
) -> list[tuple[KeptLog, str]]:
    """Prune `plugin_dir/imex-history` by `policy`; returns what was removed, with the reason."""
    if not policy.enabled:
        return []
    history = plugin_dir / "imex-history"
    domains = plugin_dir / "domains"
    present = {entry.name for entry in domains.iterdir()} if domains.is_dir() else set()
    moment = now if now is not None else datetime.now(UTC).timestamp()
    chosen = choose(kept_logs(history), policy, moment, present)
    for kept, reason in chosen:
        written = datetime.fromtimestamp(kept.last_written, UTC).isoformat(timespec="seconds")
        record = ImexHistoryPruned(kept.domain_uid, [p.name for p in kept.files], kept.bytes, written, reason)
        await store.append(IMEX_HISTORY_STREAM, [NewEvent.of(record, actor=actor)])
        for path in sorted(kept.files, key=lambda p: p.name != f"{kept.domain_uid}.db"):  # the log first
            path.unlink(missing_ok=True)
        log.info("kept IMEX daemon log pruned", domain_uid=kept.domain_uid, bytes=kept.bytes,
                 last_written=written, reason=reason, policy=policy.describe())  # fmt: skip
    return chosen
