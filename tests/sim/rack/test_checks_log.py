"""What the leftover check reads from a plugin's log: a claim prepared and never unprepared is left behind;
one unprepared, or invalidated by a reboot (it holds nothing: its spec and channel went with the old boot),
is not."""

from __future__ import annotations

from pathlib import Path

from cdctl.domain import claims as c
from cdctl.domain.events import DomainEvent, NewEvent
from cdctl.projections.lifecycle import lifecycle_projections
from cdctl.projections.runner import ProjectionRunner
from cdctl.sim.rack.checks import unprepared_in_log
from cdctl.store import SqliteEventStore

NODE = "n1"


async def _claim(store: SqliteEventStore, uid: str, *then: DomainEvent) -> None:
    events: list[DomainEvent] = [
        c.ClaimPrepareStarted(uid, "ns", uid, NODE, allocation="a", devices=["channel-0"]),
        c.ClaimPrepareCompleted(uid),
        *then,
    ]
    await store.append(c.claim_stream(uid), [NewEvent.of(e) for e in events], 0)


async def test_only_claims_still_prepared_are_left_behind(tmp_path: Path) -> None:
    db = tmp_path / "events.db"
    async with await SqliteEventStore.open(db) as store:
        await _claim(store, "held")
        await _claim(store, "released", c.ClaimUnprepared("released"))
        await _claim(store, "rebooted", c.ClaimInvalidated("rebooted", "boot id changed from a to b"))
        runner = ProjectionRunner(store, lifecycle_projections())
        await runner.start()
        await runner.catch_up()
    assert unprepared_in_log(db) == ["held is PrepareCompleted"]
