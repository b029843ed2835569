"""Compaction on the file: the guard that keeps normal operation append-only, the record and its anchor,
what `cdctl verify` and the check at open still catch, stream versions, observations, space, crashes.

Attacks are done as tests/store/tampering.py does them: to a closed file, with the triggers dropped.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import orjson
import pytest

from cdctl.domain import hashchain
from cdctl.domain.errors import LogTampered, StoreError
from cdctl.domain.events import NewEvent, ObservedVersion
from cdctl.domain.retention import RetentionPolicy
from cdctl.projections.compaction import compact
from cdctl.projections.lifecycle import lifecycle_projections
from cdctl.projections.replay import VerifyReport, verify_chain
from cdctl.store import SqliteEventStore
from cdctl.store import compaction as mechanics
from cdctl.store.collected import CollectedFile, check_source
from cdctl.store.export import ExportRequest, LogRef, export_lines
from tests.collect.harness import store_locally
from tests.store.compacting import claims, compact_through, plugin_log
from tests.store.tampering import KEY, edit_data, recompute_chain


async def verify(
    path: Path, key: bytes | None = None, heads: list[tuple[int, str]] | None = None
) -> VerifyReport:
    report = VerifyReport()
    async with await SqliteEventStore.open(path, read_only=True) as store:
        await verify_chain(store, report, key, heads or [])
    return report


def execute(path: Path, *statements: tuple[str, tuple[object, ...]]) -> None:
    conn = sqlite3.connect(path)
    for trigger in ("events_are_never_updated", "events_are_never_deleted", "compactions_complete_once"):
        conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    for sql, params in statements:
        conn.execute(sql, params)
    conn.commit()
    conn.close()


async def compacted_log(path: Path, through: int = 29, key: bytes | None = None) -> mechanics.Horizon:
    await plugin_log(path, key=key)
    async with await SqliteEventStore.open(path, key=key) as store:
        report = await compact_through(store, through)
        assert report is not None
        horizon = await store.horizon()
    assert horizon is not None and not horizon.pending
    return horizon


async def test_normal_operation_still_cannot_delete_an_event(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    await plugin_log(path, 3)
    async with await SqliteEventStore.open(path) as store:
        with pytest.raises(StoreError, match="append-only: DELETE refused"):
            await store.sync([], lambda db, _: db.execute("DELETE FROM events WHERE position = 1"))
        # A grant needs a compaction record naming the positions: the writer cannot grant itself one.
        with pytest.raises(StoreError, match="no compaction record covers these positions"):
            await store.sync([], lambda db, _: mechanics.remove_events(db, 1, 2, 2))
        with pytest.raises(StoreError, match="append-only: UPDATE refused"):
            await store.sync([], lambda db, _: db.execute("UPDATE events SET data = '{}' WHERE position = 1"))
        assert store.head() == 11 and len(await store.read_all()) == 11
    conn = sqlite3.connect(path)
    with pytest.raises(sqlite3.IntegrityError, match="append-only: DELETE refused"):
        conn.execute("DELETE FROM events")
    conn.close()


async def test_compaction_records_itself_and_the_first_kept_event_links_to_its_anchor(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    await plugin_log(path)
    async with await SqliteEventStore.open(path) as store:
        [(anchor, latest)] = await store.query("SELECT hash, recorded_at FROM events WHERE position = 29")
        report = await compact_through(store, 29)  # claim c7 ends at 29 (each commit ends a claim step)
        assert report is not None and (report.first, report.horizon, report.reason) == (1, 29, "age")
        assert report.events_removed == 29 and store.head() == report.record_position + 1
        started, done = await store.read_stream("log/compaction")
        kept = await store.read_all()
    assert started.type == "LogCompactionStarted" and done.type == "LogCompacted"
    assert started.data | {"anchor_hash": anchor, "horizon_recorded_at": latest} == started.data
    assert (started.data["first_position"], started.data["last_position"], started.data["events"]) == (
        1,
        29,
        29,
    )
    assert started.data["snapshots"] == sorted(p.name for p in lifecycle_projections())
    assert done.data["record_position"] == started.position and done.data["events_removed"] == 29
    assert kept[0].position == 30  # the chain goes on from the anchor
    first = kept[0]
    payload = hashchain.canonical_bytes(
        first.position, first.stream, first.version, first.type, first.schema_version,
        hashchain.dumps(first.data), hashchain.dumps(first.metadata), first.recorded_at.isoformat(),
    )  # fmt: skip
    assert hashchain.chain(anchor, payload) == first.hash
    report_ = await verify(path)
    assert report_.ok and report_.events == len(kept) and report_.horizon is not None
    assert report_.horizon.position == 29 and report_.horizon.anchor_hash == anchor


async def test_verify_still_catches_an_edit_in_what_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    await compacted_log(path)
    edit_data(path, 35, '{"claim_uid":"c99"}')
    report = await verify(path)
    assert report.first_bad_position == 35 and "hash mismatch" in report.problems[0]


async def test_an_edited_anchor_fails_at_the_first_kept_event(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    horizon = await compacted_log(path)
    # Edit the mirror alone: it no longer matches the event recording the compaction.
    execute(path, ("UPDATE compactions SET anchor_hash = ?", ("f" * 64,)))
    report = await verify(path)
    assert report.first_bad_position == horizon.record_position
    assert "differs from the compactions table" in report.problems[0]
    with pytest.raises(LogTampered, match="differs from the compactions table"):
        await SqliteEventStore.open(path)


async def test_an_edited_compaction_event_breaks_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    horizon = await compacted_log(path)
    conn = sqlite3.connect(path)
    [(data,)] = conn.execute("SELECT data FROM events WHERE position = ?", (horizon.record_position,))
    conn.close()
    edit_data(path, horizon.record_position, data.replace('"reason":"age"', '"reason":"size"'))
    report = await verify(path)
    assert report.first_bad_position == horizon.record_position


async def test_a_swapped_horizon_snapshot_is_caught_by_its_digest(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    horizon = await compacted_log(path)
    execute(path, ("UPDATE horizon_snapshots SET state = '[]' WHERE name = 'claim_lifecycle'", ()))
    report = await verify(path)
    assert report.first_bad_position == horizon.record_position
    assert "differ from the digest the compaction recorded" in report.problems[0]
    with pytest.raises(LogTampered, match="differ from the digest"):
        await SqliteEventStore.open(path)


async def test_events_cut_after_the_horizon_are_missing_positions(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    await compacted_log(path)
    execute(path, ("DELETE FROM events WHERE position BETWEEN 31 AND 33", ()))
    report = await verify(path)
    assert report.first_bad_position == 31 and "position 31 is missing" in report.problems[0]


async def test_a_forged_compaction_on_a_keyed_log_fails_verify(tmp_path: Path) -> None:
    """Someone who can edit the file but lacks the key deletes history and records a compaction for it."""
    path = tmp_path / "e.db"
    horizon = await compacted_log(path, through=20, key=KEY)
    conn = sqlite3.connect(path)
    [(anchor,)] = conn.execute("SELECT hash FROM events WHERE position = 40")
    conn.close()
    execute(
        path,
        ("DELETE FROM events WHERE position <= 40", ()),
        ("UPDATE compactions SET horizon = 40, anchor_hash = ?", (anchor,)),
    )
    assert horizon.position < 40
    report = await verify(path, KEY)
    assert not report.ok and "differs from the compactions table" in report.problems[0]
    # Rewriting the record's event too needs its HMAC link: without the key, the chain breaks there.
    conn = sqlite3.connect(path)
    [(data,)] = conn.execute("SELECT data FROM events WHERE position = ?", (horizon.record_position,))
    conn.close()
    forged = data.replace(f'"last_position":{horizon.position}', '"last_position":40').replace(
        horizon.anchor_hash, anchor
    )
    edit_data(path, horizon.record_position, forged)
    recompute_chain(path)  # SHA-256 links, as someone without the key can
    report = await verify(path, KEY)
    assert report.first_bad_position == 41 and "hash mismatch" in report.problems[0]


async def test_an_event_put_back_below_a_finished_horizon_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    await compacted_log(path)
    execute(
        path,
        (
            "INSERT INTO events VALUES (5, 'claim/x', 1, 'ClaimPrepareStarted', 2, '{}', '{}',"
            " '2020-01-01T00:00:00.000000+00:00', ?)",
            ("0" * 64,),
        ),
    )
    report = await verify(path)
    assert report.first_bad_position == 5 and "at or below the horizon 29" in report.problems[0]


async def test_a_grant_left_in_the_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    await compacted_log(path)
    execute(path, ("INSERT INTO compaction_grant (upto) VALUES (10)", ()))
    with pytest.raises(LogTampered, match="deletion guard is open"):
        await SqliteEventStore.open(path)
    assert "deletion guard is open" in (await verify(path)).problems[0]


async def test_a_published_head_below_the_horizon_is_noted_not_failed(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    await plugin_log(path)
    async with await SqliteEventStore.open(path) as store:
        [(old,)] = await store.query("SELECT hash FROM events WHERE position = 10")
        await compact_through(store, 30)
        head = store.chain_head()
    report = await verify(path, heads=[(10, old), head])
    assert report.ok and "published head 10 is at or below the horizon" in report.notes[0]


async def test_a_writer_reopens_a_compacted_log_and_checks_from_the_anchor(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    horizon = await compacted_log(path)
    async with await SqliteEventStore.open(path) as store:
        head = store.head()
        assert store.checked_at_open <= head - horizon.position
        await claims(store, 100, 2)
    edit_data(path, head + 1, '{"claim_uid":"zz"}')  # after every snapshot: the check at open sees it
    with pytest.raises(LogTampered) as caught:
        await SqliteEventStore.open(path)
    assert caught.value.position == head + 1


async def test_stream_versions_continue_after_all_their_events_are_removed(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    async with await SqliteEventStore.open(path) as store:
        for n in range(3):
            await store.append("node/a", [NewEvent("Thing", {"n": n})], expected_version=n)
        await store.append("node/b", [NewEvent("Thing", {"n": 0})])
        report = await compact_through(store, 3, [])
        assert report is not None and report.streams_ended == 1
    async with await SqliteEventStore.open(path) as store:
        assert await store.stream_version("node/a") == 3
        [event] = await store.append("node/a", [NewEvent("Thing", {"n": 3})], expected_version=3)
        assert event.version == 4
        assert await store.stream_version("node/b") == 1


async def test_observations_that_can_recur_stay_deduplicated(tmp_path: Path) -> None:
    path = tmp_path / "e.db"

    def seen(uid: str, rv: str) -> NewEvent:
        return NewEvent("Observed", {"uid": uid}, observed=ObservedVersion(uid, rv))

    async with await SqliteEventStore.open(path) as store:
        await store.append("domain/d", [seen("pod-a", "1"), seen("pod-a", "2"), seen("pod-b", "3")])
        await store.append("domain/d", [seen("pod-b", "deleted/4")])
        await store.append("domain/d", [NewEvent("Later", {})])
        report = await compact_through(store, 4, [])
        assert report is not None and report.observations_removed == 3
        assert await store.query("SELECT uid, resource_version FROM observed_versions") == [("pod-a", "2")]
        # A re-list finds pod-a unchanged: still recorded once.
        assert await store.append("domain/d", [seen("pod-a", "2")]) == []


async def test_space_is_given_back_in_a_new_log_and_reused_in_an_older_one(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    async with await SqliteEventStore.open(path) as store:
        for n in range(20):
            await store.append(f"s/{n}", [NewEvent("Thing", {"pad": "x" * 2000, "i": i}) for i in range(40)])
        before = await store.on_reader(mechanics.live_bytes)
        report = await compact(store, RetentionPolicy(0, 1 << 20), [])
        assert report is not None and report.reason == "size" and report.pages_reclaimed > 0
        assert await store.on_reader(mechanics.auto_vacuum) == 2
        assert report.live_bytes_after <= 1 << 20 < before  # about nine tenths: pages are not all full
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    assert path.stat().st_size < before
    legacy = tmp_path / "legacy.db"
    async with await SqliteEventStore.open(legacy):
        pass
    conn = sqlite3.connect(legacy, isolation_level=None)
    conn.execute("PRAGMA auto_vacuum = NONE")  # as a log created before migration 0007 is
    conn.execute("VACUUM")
    conn.close()
    async with await SqliteEventStore.open(legacy) as store:
        assert await store.on_reader(mechanics.auto_vacuum) == 0
        for n in range(20):
            await store.append(f"s/{n}", [NewEvent("Thing", {"pad": "x" * 2000})] * 40)
        report = await compact(store, RetentionPolicy(0, 1 << 20), [])
        assert report is not None and report.pages_reclaimed == 0 and report.events_removed > 0


async def test_a_crash_between_batches_is_finished_by_the_next_round(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    await plugin_log(path)
    async with await SqliteEventStore.open(path) as store:
        original = mechanics.remove_rows_by_key
        calls = 0

        def crash_after_one(*args: object, **kwargs: object) -> int:
            nonlocal calls
            calls += 1
            raise RuntimeError("power cut")

        mechanics.remove_rows_by_key = crash_after_one  # type: ignore[assignment]
        try:
            with pytest.raises(RuntimeError, match="power cut"):
                await compact_through(store, 30, batch_events=7)
        finally:
            mechanics.remove_rows_by_key = original  # type: ignore[assignment]
        horizon = await store.horizon()
        assert calls == 1 and horizon is not None and horizon.pending
    # Reopened mid-way: events are gone, history rows not yet; the chain and the views still verify.
    report = await verify(path)
    assert report.ok
    async with await SqliteEventStore.open(path) as store:
        finished = await compact(store, RetentionPolicy(0, 0), lifecycle_projections())
        assert finished is not None and finished.resumed and finished.events_removed == 0
        assert sum(finished.rows_removed.values()) > 0
        horizon = await store.horizon()
        assert horizon is not None and not horizon.pending
    assert (await verify(path)).ok


async def test_appends_go_on_between_compaction_batches(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    await plugin_log(path, 40)
    async with await SqliteEventStore.open(path) as store:
        [(last_old,)] = await store.query("SELECT MAX(position) FROM events")
        appended: list[int] = []

        async def append_meanwhile() -> None:
            for n in range(50):
                [event] = await store.append("s/live", [NewEvent("Tick", {"n": n})])
                appended.append(event.position)
                await asyncio.sleep(0)

        compaction_task = asyncio.ensure_future(compact_through(store, 100, batch_events=5, batch_rows=5))
        await append_meanwhile()
        report = await compaction_task
        assert report is not None and report.batches > 20
        # Ticks landed between batches, not after the whole compaction: some precede its outcome event.
        [done] = [e for e in await store.read_stream("log/compaction") if e.type == "LogCompacted"]
        assert min(appended) < done.position and len(appended) == 50 and last_old < min(appended)
    assert (await verify(path)).ok


async def test_a_caller_cancelled_while_its_job_runs_does_not_stop_the_writer(tmp_path: Path) -> None:
    """A component stopping mid-compaction cancels the round; the writer finishes the job and goes on."""
    async with await SqliteEventStore.open(tmp_path / "e.db") as store:
        started = asyncio.Event()

        def slow(db: sqlite3.Connection, _: object) -> None:
            started.set()
            time.sleep(0.2)

        job = asyncio.ensure_future(store.sync([], slow))
        write = asyncio.ensure_future(store.write(lambda conn: asyncio.sleep(0)))
        await asyncio.sleep(0.05)
        job.cancel()
        write.cancel()
        [event] = await store.append("s/1", [NewEvent("Thing", {})])
        assert event.position == 1


async def test_a_collected_copy_of_a_compacted_log_is_chained_to_its_anchor(tmp_path: Path) -> None:
    """`cdctl collect` serves a compacted log from its horizon: the run's anchor is the recorded one."""
    path = tmp_path / "e.db"
    horizon = await compacted_log(path)
    ref = LogRef("plugin", "kubelet-plugin", path)
    lines = [
        orjson.loads(raw) async for chunk in export_lines(ref, ExportRequest()) for raw in chunk.splitlines()
    ]
    [anchor] = [line for line in lines if line["kind"] == "anchor"]
    assert (anchor["position"], anchor["hash"]) == (horizon.position, horizon.anchor_hash)
    with CollectedFile.open(tmp_path / "c.db", create=True) as file:
        source = await store_locally(file, ref, node="n0")
        check = check_source(file, source, [])
    assert check.ok and check.events == len([line for line in lines if line["kind"] == "event"])
