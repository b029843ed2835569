"""A collected copy of a compacted log has its horizon: the component serves the horizon snapshot with a run
that starts there, `cdctl collect` stores it per source, and the read models over the collected file fold
from it, so claims live before the horizon are there (equal to the log's own read models). The snapshot is
tied to the compaction record in the source's chain: an altered one fails `verify`."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson

from cdctl.projections.collected import replay, verify
from cdctl.projections.lifecycle import lifecycle_projections
from cdctl.projections.runner import ProjectionRunner
from cdctl.store import SqliteEventStore
from cdctl.store.collected import CollectedFile
from cdctl.store.export import ExportRequest, LogRef, export_lines
from tests.collect.harness import cluster, run_collect
from tests.projections.helpers import prepare, unprepare
from tests.store.compacting import claims, compact_through

MODELS = ("claim_lifecycle", "channel_allocations")


async def node_log(path: Path) -> int:
    """Claims c0..c11 (every third still prepared), compacted through the first 22 events (c0..c5: c0 and c3
    live at the horizon), then c3 unprepared and c20 prepared after it. Returns the horizon."""
    async with await SqliteEventStore.open(path) as store:
        runner = ProjectionRunner(store, lifecycle_projections(), snapshot_every=7)
        await runner.start()
        await claims(store, 0, 12)
        await runner.catch_up()
        report = await compact_through(store, 22)
        assert report is not None
        await unprepare(store, "c3")
        await prepare(store, "c20", channel=3)
        await runner.catch_up()
        horizon = await store.horizon()
        assert horizon is not None and horizon.position == 22
        return horizon.position


def own_rows(path: Path, table: str) -> set[tuple[object, ...]]:
    db = sqlite3.connect(path)
    try:
        return set(db.execute(f'SELECT * FROM "{table}"').fetchall())
    finally:
        db.close()


def collected_rows(file: CollectedFile, table: str) -> set[tuple[object, ...]]:
    return {row[1:] for row in file.query(f'SELECT * FROM "{table}" ORDER BY 1')}


async def test_the_stream_of_a_compacted_log_carries_its_horizon_snapshot(tmp_path: Path) -> None:
    log = tmp_path / "n0.db"
    await node_log(log)
    ref = LogRef("plugin", "kubelet-plugin", log)
    kinds = [
        orjson.loads(raw) async for chunk in export_lines(ref, ExportRequest()) for raw in chunk.splitlines()
    ]
    [horizon] = [line for line in kinds if line["kind"] == "horizon"]
    hash_at = {line["position"]: line["hash"] for line in kinds if line["kind"] == "event"}
    assert [line["kind"] for line in kinds][:3] == ["header", "horizon", "anchor"]
    assert horizon["position"] == 22
    assert {s["name"] for s in horizon["snapshots"]} >= set(MODELS)
    later = [
        orjson.loads(raw)
        async for chunk in export_lines(ref, ExportRequest(after=30, after_hash=hash_at[30]))
        for raw in chunk.splitlines()
    ]
    assert "horizon" not in [line["kind"] for line in later]  # a stream after the horizon needs none
    narrowed = [
        orjson.loads(raw)
        async for chunk in export_lines(ref, ExportRequest(domains=("d1",)))
        for raw in chunk.splitlines()
    ]
    assert "horizon" not in [line["kind"] for line in narrowed]  # the snapshot holds every domain


async def test_read_models_over_a_collected_compacted_log_equal_the_logs_own(tmp_path: Path) -> None:
    log, out = tmp_path / "n0.db", tmp_path / "collected.db"
    await node_log(log)
    async with cluster(tmp_path) as c:
        await c.add("kubelet-plugin", "n0", [LogRef("plugin", "kubelet-plugin", log)])
        summary = await run_collect(c, out)
    assert [o.status for o in summary.outcomes] == ["ok"]
    with CollectedFile.open(out, read_only=True) as file:
        for table in MODELS:
            assert collected_rows(file, table) == own_rows(log, table), table
        lifecycle = {row[0]: row for row in file.query("SELECT claim_uid, state FROM claim_lifecycle")}
        assert (
            lifecycle["c0"][1] == "PrepareCompleted"
        )  # prepared before the horizon, still live: the snapshot
        assert lifecycle["c3"][1] == "Unprepared"  # prepared before it, unprepared after
        replayed = replay(file)["claim_lifecycle"]
        assert {row["claim_uid"] for row in replayed} >= {"c0", "c3", "c6", "c20"}
        assert {row["claim_uid"] for row in replayed}.isdisjoint({"c1", "c2"})  # ended before: gone
        report = verify(file, [])
    assert report.ok, (report.problems, [c.problems for c in report.checks])


async def test_a_collection_resumed_across_a_compaction_folds_from_the_new_horizon(tmp_path: Path) -> None:
    """Collected (from the first horizon), then the log goes on and is compacted past what the file holds,
    then collected again: the file has a gap, the fold jumps to the new horizon's views, and every row of the
    log's own read models is in the file's as the log has it (the file keeps older history the log lost)."""
    log, out = tmp_path / "n0.db", tmp_path / "collected.db"
    await node_log(log)
    async with cluster(tmp_path) as c:
        await c.add("kubelet-plugin", "n0", [LogRef("plugin", "kubelet-plugin", log)])
        await run_collect(c, out)
        with CollectedFile.open(out, read_only=True) as file:
            [(collected_to,)] = file.query("SELECT MAX(position) FROM source_events")
        async with await SqliteEventStore.open(log) as store:
            runner = ProjectionRunner(store, lifecycle_projections())
            await runner.start()
            await unprepare(store, "c0")  # ends in the gap
            await prepare(store, "c21", channel=1)
            await prepare(store, "c22", channel=2)
            await runner.catch_up()
            report = await compact_through(store, collected_to + 4)  # c0's end and c21 go
            assert report is not None
            await unprepare(store, "c6")  # live at both horizons, ends after the second
            await runner.catch_up()
        resumed = await run_collect(c, out)
    assert [o.status for o in resumed.outcomes] == ["ok"]
    with CollectedFile.open(out, read_only=True) as file:
        [source] = file.sources()
        assert [h.position for h in file.horizons(source.id)] == [22, collected_to + 4]
        for table in MODELS:
            assert own_rows(log, table) <= collected_rows(file, table), table
        states = dict(file.query("SELECT claim_uid, state FROM claim_lifecycle"))
        assert "c0" not in states  # it ended in the gap: no stale "PrepareCompleted"
        assert (states["c21"], states["c6"], states["c7"]) == ("PrepareCompleted", "Unprepared", "Unprepared")
        assert verify(file, []).ok


async def test_an_altered_horizon_snapshot_fails_verify(tmp_path: Path) -> None:
    log, out = tmp_path / "n0.db", tmp_path / "collected.db"
    await node_log(log)
    async with cluster(tmp_path) as c:
        await c.add("kubelet-plugin", "n0", [LogRef("plugin", "kubelet-plugin", log)])
        await run_collect(c, out)
    db = sqlite3.connect(out)
    db.execute("UPDATE source_horizons SET state = '[]' WHERE name = 'claim_lifecycle'")
    db.commit()
    with CollectedFile.open(out, read_only=True) as file:
        [check] = verify(file, []).checks
    assert not check.ok and "was altered" in check.problems[0]
    # A forger who also recomputes the digest still disagrees with the record in the chain.
    from cdctl.store.compaction import snapshot_digest

    rows = db.execute("SELECT name, position, state FROM source_horizons").fetchall()
    db.execute("UPDATE source_horizons SET snapshot_digest = ?", (snapshot_digest(rows),))
    db.commit()
    db.close()
    with CollectedFile.open(out, read_only=True) as file:
        [check] = verify(file, []).checks
    assert not check.ok and "not the one its compaction record names" in check.problems[0]


def test_a_schema_1_file_gains_the_horizons_table_when_opened_for_writing(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    CollectedFile.open(path, create=True).close()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE source_horizons")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    with CollectedFile.open(path, read_only=True) as file:
        assert file.horizons(1) == []  # read as it is
    with CollectedFile.open(path) as file:
        assert file.query("PRAGMA user_version") == [(2,)]
        assert file.horizons(1) == []


async def test_a_daemon_forging_a_horizon_snapshot_puts_no_claim_in_the_read_models(tmp_path: Path) -> None:
    """A compromised daemon writes claim events into its own log and compacts it, so its horizon snapshot
    holds claims (of another node, say). The plugin serves that log and the collector stores its snapshot,
    but a daemon's log feeds no read model, from its events or from its horizon."""
    plugin, daemon, out = tmp_path / "n0.db", tmp_path / "daemon.db", tmp_path / "collected.db"
    await node_log(plugin)
    async with await SqliteEventStore.open(daemon) as store:
        runner = ProjectionRunner(store, lifecycle_projections())
        await runner.start()
        for n in range(4):
            await prepare(store, f"forged{n}", node="n9")
        await runner.catch_up()
        assert await compact_through(store, 6) is not None  # forged0 and forged1 live at the horizon
    uid = "3f9a0c2e-0000-4000-8000-000000000001"
    async with cluster(tmp_path) as c:
        logs = [LogRef("plugin", "kubelet-plugin", plugin), LogRef(f"daemon/{uid}", "daemon", daemon, uid)]
        await c.add("kubelet-plugin", "n0", logs)
        await run_collect(c, out)
    with CollectedFile.open(out, read_only=True) as file:
        [forger] = [s for s in file.sources() if s.component == "daemon"]
        assert file.horizons(forger.id)  # stored as served, and checked: its own chain names it
        assert verify(file, []).ok
        for table in MODELS:
            assert file.query(f'SELECT COUNT(*) FROM "{table}" WHERE source = ?', (forger.name,)) == [(0,)]
        claims = {row[0] for row in file.query("SELECT claim_uid FROM claim_lifecycle")}
    assert not any(uid.startswith("forged") for uid in claims)
