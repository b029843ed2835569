"""What `cdctl explain` says of a subject from one plugin's own event log: the plugin tests that produce a
cause check it with this (the causes table, docs/explain.md)."""

from __future__ import annotations

from pathlib import Path

from cdctl.projections.explain import Explanation
from cdctl.projections.explainload import load_explanations
from cdctl.projections.timeline import EventSource
from cdctl.store.sqlite import SqliteEventStore


async def explained(db: Path, subject: str) -> Explanation:
    async with await SqliteEventStore.open(db, read_only=True) as store:
        events = EventSource(lambda sql, params: store.query(sql, params), False, str(db))
        [out] = await load_explanations(events, subject)
    return out


async def node_problems(db: Path, node: str) -> list[str]:
    """The problems explain lists for `node` (`problem at HH:MM:SS.s: ...`), without their time."""
    out = await explained(db, f"node/{node}")
    return [text.split(": ", 1)[1] for text, _ in out.facts if text.startswith("problem at ")]
