"""The runner: exactly-once commits, resume from the tracked position, snapshots, replay, verify."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdctl.domain.errors import StoreError
from cdctl.projections.lifecycle import lifecycle_projections
from cdctl.projections.replay import Rebuild, VerifyReport, replay, verify_chain, verify_projections
from cdctl.projections.runner import ProjectionRunner
from cdctl.projections.sinks import MemorySink, SqliteSink
from cdctl.store import InMemoryEventStore, SqliteEventStore
from tests.projections.helpers import fail, prepare, unprepare


async def tables_of(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    async with await SqliteEventStore.open(path, read_only=True) as store:
        return {
            t: await store.query(f"SELECT * FROM {t} ORDER BY 1, 2")
            for t in (
                "claim_lifecycle",
                "channel_allocations",
                "checkpoint_transitions",
                "projection_positions",
            )
        }


async def test_a_failure_between_fold_and_commit_applies_nothing_and_a_retry_applies_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "e.db"
    async with await SqliteEventStore.open(path) as store:
        await prepare(store, "u1")
        runner = ProjectionRunner(store, lifecycle_projections())
        await runner.start()
        original = SqliteSink._write_positions

        async def crash(*_args: object) -> None:
            raise RuntimeError("power cut after the view rows, before the commit")

        SqliteSink._write_positions = crash  # type: ignore[method-assign]
        try:
            with pytest.raises(RuntimeError, match="power cut"):
                await runner.catch_up()
        finally:
            SqliteSink._write_positions = original  # type: ignore[method-assign]
        assert runner.positions["claim_lifecycle"] == 0 and not runner.view("claim_lifecycle")
        assert (await tables_of(path))["checkpoint_transitions"] == []
        await runner.catch_up()
        await runner.catch_up()
    tables = await tables_of(path)
    assert len(tables["checkpoint_transitions"]) == 2  # PrepareStarted, PrepareCompleted: once each
    assert len(tables["claim_lifecycle"]) == 1
    assert {row[1] for row in tables["projection_positions"]} == {3}


async def test_resume_from_the_tracked_position_after_restart(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    async with await SqliteEventStore.open(path) as store:
        await prepare(store, "u1")
        runner = ProjectionRunner(store, lifecycle_projections())
        await runner.start()
        await runner.catch_up()
        await unprepare(store, "u1")  # appended, not yet projected, when the process stops
    async with await SqliteEventStore.open(path) as store:
        runner = ProjectionRunner(store, lifecycle_projections())
        await runner.start()
        assert runner.positions["claim_lifecycle"] == 3
        assert runner.view("claim_lifecycle")[("u1",)]["state"] == "PrepareCompleted"
        await runner.catch_up()
        assert ("u1",) not in runner.view("claim_lifecycle")
    tables = await tables_of(path)
    assert len(tables["checkpoint_transitions"]) == 3
    assert [row[6] for row in tables["claim_lifecycle"]] == ["Unprepared"]


async def test_start_reads_only_the_tail_after_a_snapshot_and_snapshots_are_rebuildable(
    tmp_path: Path,
) -> None:
    path = tmp_path / "e.db"
    async with await SqliteEventStore.open(path) as store:
        for i in range(10):
            await prepare(store, f"u{i}")
        runner = ProjectionRunner(store, lifecycle_projections(), snapshot_every=10)
        await runner.start()
        await runner.catch_up()
        expected = {name: dict(runner.view(name)) for name in runner.views}
        assert await store.query("SELECT count(*) FROM snapshots") == [(4,)]

        reads: list[int] = []
        original = store.read_all

        async def spy(after: int = 0, limit: int | None = None, until: Any = None) -> Any:
            reads.append(after)
            return await original(after=after, limit=limit, until=until)

        store.read_all = spy  # type: ignore[method-assign]
        resumed = ProjectionRunner(store, lifecycle_projections(), snapshot_every=10)
        await resumed.start()
        assert {name: dict(resumed.view(name)) for name in resumed.views} == expected
        assert reads == [] or min(reads) >= 20  # nothing before the snapshot was read
        store.read_all = original  # type: ignore[method-assign]

        await store.write(lambda conn: conn.exec_driver_sql("DELETE FROM snapshots"))
        rebuilt = ProjectionRunner(store, lifecycle_projections())
        await rebuilt.start()
        assert {name: dict(rebuilt.view(name)) for name in rebuilt.views} == expected


async def test_replay_up_to_a_position_and_an_instant(tmp_path: Path) -> None:
    async with await SqliteEventStore.open(tmp_path / "e.db") as store:
        await prepare(store, "u1")
        [cut] = await store.read_all(after=2, limit=1)
        await unprepare(store, "u1")
        at_3 = await replay(store, lifecycle_projections(), position=3)
        assert at_3.tables["claim_lifecycle"][0]["state"] == "PrepareCompleted"
        by_time = await replay(store, lifecycle_projections(), until=cut.recorded_at)
        assert by_time.position == 3
        before_all = await replay(store, lifecycle_projections(), until=cut.recorded_at - timedelta(days=1))
        assert before_all.position == 0 and before_all.tables["claim_lifecycle"] == []
        latest = await replay(store, lifecycle_projections())
        assert latest.tables["claim_lifecycle"][0]["state"] == "Unprepared"


async def test_verify_names_the_first_altered_event(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    async with await SqliteEventStore.open(path) as store:
        for i in range(3):
            await prepare(store, f"u{i}")
        runner = ProjectionRunner(store, lifecycle_projections())
        await runner.start()
        await runner.catch_up()
        report = VerifyReport()
        await verify_chain(store, report)
        await verify_projections(store, lifecycle_projections(), SqliteSink(store), report)
        assert report.ok and report.events == 9
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER events_are_never_updated")
    conn.execute("UPDATE events SET data = replace(data, 'n1', 'n2') WHERE position = 5")
    conn.commit()
    conn.close()
    async with await SqliteEventStore.open(path, read_only=True) as store:
        report = VerifyReport()
        await verify_chain(store, report)
        assert report.first_bad_position == 5 and "hash mismatch" in report.problems[0]


async def test_verify_notices_a_projection_row_that_differs(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    async with await SqliteEventStore.open(path) as store:
        await prepare(store, "u1")
        await fail(store, "u2")
        runner = ProjectionRunner(store, lifecycle_projections())
        await runner.start()
        await runner.catch_up()
        await store.write(
            lambda c: c.exec_driver_sql("UPDATE claim_lifecycle SET state = 'X' WHERE claim_uid='u2'")
        )
        report = VerifyReport()
        await verify_projections(store, lifecycle_projections(), SqliteSink(store), report)
    assert not report.ok and "claim_lifecycle" in report.problems[0] and report.first_bad_position == 5
    assert report.problems[0].endswith("(position 5; state: table 'X', rebuilt 'PrepareFailed')")


async def test_read_only_stores_cannot_host_a_runner(tmp_path: Path) -> None:
    async with await SqliteEventStore.open(tmp_path / "e.db") as store:
        await prepare(store, "u1")
    async with await SqliteEventStore.open(tmp_path / "e.db", read_only=True) as store:
        runner = ProjectionRunner(store, lifecycle_projections())
        await runner.start()
        with pytest.raises(StoreError, match="read-only"):
            await runner.catch_up()


step = st.tuples(st.sampled_from(["prepare", "fail", "unprepare"]), st.integers(0, 4), st.integers(0, 3))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(step, max_size=25), batch=st.integers(1, 7), failures=st.lists(st.booleans(), max_size=30)
)
async def test_any_batching_with_any_failed_commits_equals_a_clean_rebuild(
    steps: list[tuple[str, int, int]], batch: int, failures: list[bool]
) -> None:
    store = InMemoryEventStore()
    for action, claim, channel in steps:
        uid = f"u{claim}"
        if action == "prepare":
            await prepare(store, uid, channel=channel)
        elif action == "fail":
            await fail(store, uid)
        else:
            await unprepare(store, uid)
    sink = MemorySink()
    runner = ProjectionRunner(store, lifecycle_projections(), sink=sink, batch_size=batch, snapshot_every=5)
    await runner.start()
    real_commit = sink.commit
    outcomes = iter(failures)

    async def flaky_commit(*args: Any) -> None:
        if next(outcomes, False):
            raise RuntimeError("injected")
        await real_commit(*args)

    sink.commit = flaky_commit  # type: ignore[method-assign]
    while runner.position < store.head():
        try:
            await runner.catch_up()
        except RuntimeError:
            pass
    rebuild = Rebuild(lifecycle_projections())
    rebuild.feed(await store.read_all())
    for projection in lifecycle_projections():
        stored = {projection.row_key(r): r for r in await sink.table_rows(projection)}
        assert stored == rebuild.tables[projection.name]
        assert dict(runner.view(projection.name)) == rebuild.views[projection.name]
    # and a runner restarted from the sink's snapshots and positions agrees too
    sink.commit = real_commit  # type: ignore[method-assign]
    restarted = ProjectionRunner(store, lifecycle_projections(), sink=sink)
    await restarted.start()
    for projection in lifecycle_projections():
        assert dict(restarted.view(projection.name)) == rebuild.views[projection.name]


async def test_catch_up_applies_what_was_committed_before_it_and_does_not_chase_new_appends() -> None:
    store = InMemoryEventStore()
    await prepare(store, "u1")
    runner = ProjectionRunner(store, lifecycle_projections(), batch_size=1)
    await runner.start()
    original = runner.apply
    applied = 0

    async def apply_while_appends_arrive(events: Any) -> None:
        nonlocal applied
        applied += 1
        await original(events)
        await prepare(store, f"u{applied + 1}")  # a Prepare lands during every view transaction
        await asyncio.sleep(0)  # (the in-memory store never suspends; the guard below needs a chance)

    runner.apply = apply_while_appends_arrive  # type: ignore[method-assign]
    async with asyncio.timeout(30):  # a hang guard: a chasing catch_up never returns here
        assert await runner.catch_up() == 3  # the three events of u1, one batch each, then it returns
    assert applied == 3
    assert ("u1",) in runner.view("claim_lifecycle") and store.head() == 12
