"""Projections across a compaction: a restarted process resumes from the kept snapshot, `cdctl verify`
rebuilds the views from it, `cdctl replay` starts there and refuses what lies before it.

Each compacted log is compared with a copy of itself taken before the compaction: the same folds over the
full log must agree with the compacted log on everything after the horizon.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from cdctl.domain.claims import ClaimPrepareFenced, claim_stream
from cdctl.domain.errors import CompactedAway, StoreError
from cdctl.domain.events import NewEvent
from cdctl.projections.base import Key, Row
from cdctl.projections.lifecycle import lifecycle_projections
from cdctl.projections.replay import VerifyReport, replay, verify_chain, verify_projections
from cdctl.projections.runner import ProjectionRunner
from cdctl.projections.sinks import SqliteSink
from cdctl.store import SqliteEventStore
from tests.projections.helpers import prepare, unprepare
from tests.store.compacting import claims, compact_through, plugin_log


def copy(path: Path, to: Path) -> Path:
    source, target = sqlite3.connect(path), sqlite3.connect(to)
    source.backup(target)
    source.close()
    target.close()
    return to


async def views(path: Path) -> dict[str, dict[Key, Row]]:
    async with await SqliteEventStore.open(path) as store:
        runner = ProjectionRunner(store, lifecycle_projections())
        await runner.start()
        await runner.catch_up()
        return {name: dict(view) for name, view in runner.views.items()}


async def verified(path: Path) -> VerifyReport:
    report = VerifyReport()
    async with await SqliteEventStore.open(path, read_only=True) as store:
        await verify_chain(store, report)
        if report.ok:
            await verify_projections(store, lifecycle_projections(), SqliteSink(store), report)
    return report


async def compacted(tmp_path: Path, *through: int) -> tuple[Path, Path, int]:
    """A node's log compacted up to each of `through` (29 by default), and a copy of it from before."""
    path = tmp_path / "e.db"
    await plugin_log(path)
    async with await SqliteEventStore.open(path) as store:
        runner = ProjectionRunner(store, lifecycle_projections(), snapshot_every=7)
        await runner.start()
        await claims(store, 50, 4)
        await unprepare(store, "c3")  # live at the first horizon, ended after it
        await claims(store, 80, 3)
        await runner.catch_up()
    full = copy(path, tmp_path / "full.db")
    async with await SqliteEventStore.open(path) as store:
        for position in through or (29,):
            report = await compact_through(store, position)
            assert report is not None and report.horizon == position
    return path, full, (through or (29,))[-1]


async def test_a_restarted_process_resumes_from_the_kept_snapshot(tmp_path: Path) -> None:
    path, full, horizon = await compacted(tmp_path)
    assert await views(path) == await views(full)
    async with await SqliteEventStore.open(path, read_only=True) as store:
        [(lowest,)] = await store.query("SELECT MIN(position) FROM events")
        assert lowest == horizon + 1
        # History before the horizon went; what the horizon view holds (live claims) stayed.
        rows = await store.query(
            "SELECT claim_uid, position FROM claim_lifecycle WHERE position <= ?", (horizon,)
        )
    assert sorted(uid for uid, _ in rows) == ["c0", "c6"]  # c3 was unprepared after the horizon


async def test_verify_rebuilds_the_views_from_the_kept_snapshot_and_still_catches_an_edit(
    tmp_path: Path,
) -> None:
    path, _, horizon = await compacted(tmp_path)
    report = await verified(path)
    assert report.ok, report.problems
    assert report.horizon is not None and report.horizon.position == horizon
    conn = sqlite3.connect(path)
    conn.execute(
        "UPDATE claim_lifecycle SET namespace = 'other' WHERE claim_uid = 'c0'"
    )  # kept, unchanged since
    conn.commit()
    conn.close()
    report = await verified(path)
    assert not report.ok and "claim_lifecycle: row ['c0'] differs" in report.problems[0]


async def test_a_history_row_that_survived_the_horizon_is_still_checked(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    await plugin_log(path)
    full = copy(path, tmp_path / "full.db")
    for log in (path, full):  # c1 was unprepared before the horizon; a stale prepare is fenced after it
        async with await SqliteEventStore.open(log) as store:
            await store.append(claim_stream("c1"), [NewEvent.of(ClaimPrepareFenced("c1", "a0", "stale"))])
            runner = ProjectionRunner(store, lifecycle_projections())
            await runner.start()
            await runner.catch_up()
    async with await SqliteEventStore.open(path) as store:
        await compact_through(store, 29)
        [(outcome,)] = await store.query("SELECT outcome FROM claim_lifecycle WHERE claim_uid = 'c1'")
    assert outcome == "fenced"
    assert (await verified(path)).ok
    conn = sqlite3.connect(path)
    conn.execute("UPDATE claim_lifecycle SET last_error = 'forged' WHERE claim_uid = 'c1'")
    conn.commit()
    conn.close()
    assert not (await verified(path)).ok


async def test_replay_before_the_horizon_is_refused_naming_it(tmp_path: Path) -> None:
    path, _, horizon = await compacted(tmp_path)
    async with await SqliteEventStore.open(path, read_only=True) as store:
        found = await store.horizon()
        assert found is not None
        with pytest.raises(CompactedAway) as caught:
            await replay(store, lifecycle_projections(), position=horizon - 1)
        assert caught.value.exit_code == 5
        assert f"removed positions 1..{horizon}" in caught.value.message
        assert f"--position {horizon} or --at {found.recorded_at}" in caught.value.message
        before = datetime.fromisoformat(found.recorded_at) - timedelta(microseconds=1)
        with pytest.raises(CompactedAway, match=r"instant .* is before the log's horizon"):
            await replay(store, lifecycle_projections(), until=before)
        at = await replay(store, lifecycle_projections(), until=datetime.fromisoformat(found.recorded_at))
        assert at.position == horizon and at.events == 0


async def test_replay_after_the_horizon_agrees_with_the_full_log(tmp_path: Path) -> None:
    path, full, horizon = await compacted(tmp_path)
    async with await SqliteEventStore.open(path, read_only=True) as store:
        head = store.head()
        kept = {
            p: (await replay(store, lifecycle_projections(), position=p)).tables for p in (horizon, 45, head)
        }
    async with await SqliteEventStore.open(full, read_only=True) as store:
        everything = {p: (await replay(store, lifecycle_projections(), position=p)).tables for p in kept}
    projections = {p.name: p for p in lifecycle_projections()}
    for position, tables in kept.items():
        for name, rows in tables.items():
            at_horizon = {projections[name].row_key(r) for r in kept[horizon][name]}
            # The full log's rows, less the history the compaction removed (rows last changed before it
            # that were not live there).
            expected = [
                r
                for r in everything[position][name]
                if r["position"] > horizon or projections[name].row_key(r) in at_horizon
            ]
            assert rows == expected, (position, name)


async def test_compactions_follow_one_another(tmp_path: Path) -> None:
    path, full, _ = await compacted(tmp_path, 29, 47)
    async with await SqliteEventStore.open(path, read_only=True) as store:
        started = [e for e in await store.read_stream("log/compaction") if e.type == "LogCompactionStarted"]
    assert [(e.data["first_position"], e.data["last_position"]) for e in started] == [(1, 29), (30, 47)]
    assert (await verified(path)).ok
    assert await views(path) == await views(full)


async def test_compaction_never_removes_what_a_projection_has_not_folded(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    async with await SqliteEventStore.open(path) as store:
        runner = ProjectionRunner(store, lifecycle_projections())
        await runner.start()
        await claims(store, 0, 3)
        await runner.catch_up()  # folded up to 11
        await claims(store, 3, 6)
        report = await compact_through(store, 25)
        assert report is not None and report.horizon == 11
        await runner.catch_up()
    assert (await verified(path)).ok


async def test_a_projection_without_a_snapshot_at_the_horizon_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    async with await SqliteEventStore.open(path) as store:
        runner = ProjectionRunner(store, lifecycle_projections())  # no snapshot before 50,000 events
        await runner.start()
        await claims(store, 0, 20)
        await runner.catch_up()
        [claim_lifecycle, *others] = lifecycle_projections()
        await compact_through(store, 29, others)  # a component that did not keep claim_lifecycle
    async with await SqliteEventStore.open(path) as store:
        with pytest.raises(
            StoreError, match="projection claim_lifecycle: no snapshot at or after the log's horizon 29"
        ):
            await ProjectionRunner(store, lifecycle_projections()).start()
    report = VerifyReport()
    async with await SqliteEventStore.open(path, read_only=True) as store:
        await verify_projections(store, [claim_lifecycle], SqliteSink(store), report)
    assert "no snapshot kept at the horizon 29" in report.problems[0]


async def test_new_claims_after_compaction_prepare_as_before(tmp_path: Path) -> None:
    path, _, _ = await compacted(tmp_path)
    async with await SqliteEventStore.open(path) as store:
        await prepare(store, "c1")  # its stream ended before the horizon: the version goes on
        assert [e.version for e in await store.read_stream(claim_stream("c1"))] == [5, 6, 7]
