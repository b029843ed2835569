"""`cdctl collect` against components in this process (tests/collect/harness.py): through the simulated API
server's pod proxy with minted tokens, into a collected file that verifies; a second run fetches only what
is new; a recreated or rewritten log becomes a new generation; a component that does not answer or a stream
cut short is reported and recorded; --since and --domain narrow to runs that still verify."""

from __future__ import annotations

import shutil
import sqlite3
import uuid
from pathlib import Path

import pytest

from cdctl.domain.claims import ChannelAllocated, ClaimPrepareCompleted, ClaimPrepareStarted, ClaimUnprepared
from cdctl.domain.computedomains import ComputeDomainObserved
from cdctl.domain.events import DomainEvent
from cdctl.domain.imex import ImexDaemonStarted
from cdctl.projections.collected import verify
from cdctl.store.collected import CollectedFile
from cdctl.store.export import LogRef
from tests.collect.harness import Cluster, cluster, run_collect, write_log


def claim_events(node: str, domain: str, name: str) -> list[tuple[str, DomainEvent]]:
    uid = str(uuid.uuid4())
    stream = f"claim/{uid}"
    return [
        (stream, ClaimPrepareStarted(uid, "team-a", name, node, "channel", domain)),
        (stream, ChannelAllocated(uid, node, 0, domain)),
        (stream, ClaimPrepareCompleted(uid, [f"k8s.compute-domain.nvidia.com/claim={uid}-channel-0"])),
        (stream, ClaimUnprepared(uid, "kubelet")),
    ]


def domain_events(uid: str, name: str) -> list[tuple[str, DomainEvent]]:
    return [(f"domain/{uid}", ComputeDomainObserved(uid, "team-a", name, "1", "ADDED", 2, f"{name}-channel"))]


async def two_nodes(c: Cluster, root: Path, domain: str) -> None:
    """A controller and two plugins (each with one daemon log) serving their logs."""
    await write_log(root / "controller.db", domain_events(domain, "nvl"))
    await c.add("controller", "cpu-0", [LogRef("controller", "controller", root / "controller.db")])
    for node in ("n0", "n1"):
        plugin, daemon = root / f"{node}.db", root / f"{node}-daemon.db"
        await write_log(plugin, claim_events(node, domain, f"job-{node}"))
        await write_log(
            daemon, [(f"node/{node}", ImexDaemonStarted(node, domain, "c", "d", "10.0.0.1", "m", 18))]
        )
        logs = [
            LogRef("plugin", "kubelet-plugin", plugin),
            LogRef(f"daemon/{domain}", "daemon", daemon, domain, "live"),
        ]
        await c.add("kubelet-plugin", node, logs)


async def test_collects_every_source_and_a_second_run_fetches_only_what_is_new(tmp_path: Path) -> None:
    domain, out = str(uuid.uuid4()), tmp_path / "collected.db"
    async with cluster(tmp_path) as c:
        await two_nodes(c, tmp_path, domain)
        first = await run_collect(c, out)
        assert [o.status for o in first.outcomes] == ["ok"] * 5 and not first.partial
        assert first.events == 1 + 2 * (4 + 1)
        await write_log(tmp_path / "n1.db", claim_events("n1", domain, "job-late"))
        second = await run_collect(c, out)
    assert {o.name: o.events for o in second.outcomes if o.events} == {"kubelet-plugin/n1": 4}
    with CollectedFile.open(out, read_only=True) as file:
        names = [s.name for s in file.sources()]
        assert names == [
            "controller/cdctl-controller-cpu-0", f"daemon/n0/{domain}", f"daemon/n1/{domain}",
            "kubelet-plugin/n0", "kubelet-plugin/n1",
        ]  # fmt: skip
        fetched = file.query(
            "SELECT f.after_position, f.events, f.head_position FROM fetches f"
            " JOIN sources s ON s.id = f.source_id WHERE s.name = 'kubelet-plugin/n1' ORDER BY f.id"
        )
        assert fetched == [(0, 4, 4), (4, 4, 8)]
        runs = file.query(
            "SELECT r.first_position, last_position FROM ranges r JOIN sources s ON s.id = r.source_id"
            " WHERE s.name = 'kubelet-plugin/n1'"
        )
        assert runs == [(1, 8)]
        rows = file.query("SELECT source, node, state FROM claim_lifecycle ORDER BY source, name")
        assert [(r[0], r[1]) for r in rows] == [
            ("kubelet-plugin/n0", "n0"), ("kubelet-plugin/n1", "n1"), ("kubelet-plugin/n1", "n1"),
        ]  # fmt: skip
        report = verify(file, [])
        assert report.ok, [c.problems for c in report.checks]
        assert [row["outcome"] for row in file.collections()] == ["complete", "complete"]


async def test_a_recreated_log_is_a_new_generation_never_merged(tmp_path: Path) -> None:
    domain, out = str(uuid.uuid4()), tmp_path / "collected.db"
    async with cluster(tmp_path) as c:
        await two_nodes(c, tmp_path, domain)
        await run_collect(c, out)
        (tmp_path / "n0.db").unlink()
        await write_log(tmp_path / "n0.db", claim_events("n0", domain, "after-reinstall"))
        summary = await run_collect(c, out)
    assert {o.name: o.events for o in summary.outcomes if o.events} == {"kubelet-plugin/n0#2": 4}
    with CollectedFile.open(out, read_only=True) as file:
        generations = {s.name: (s.generation, s.first_hash) for s in file.sources() if s.node == "n0"}
        assert generations["kubelet-plugin/n0"][0] == 1 and generations["kubelet-plugin/n0#2"][0] == 2
        assert generations["kubelet-plugin/n0"][1] != generations["kubelet-plugin/n0#2"][1]
        names = file.query("SELECT source, name FROM claim_lifecycle WHERE node = 'n0' ORDER BY source")
        assert names == [("kubelet-plugin/n0", "job-n0"), ("kubelet-plugin/n0#2", "after-reinstall")]
        assert verify(file, []).ok


async def test_a_log_rewritten_after_collection_is_not_merged(tmp_path: Path) -> None:
    """The attack: edit an event already collected and re-chain the rest. The component's log still starts
    with the same event, but it no longer holds the hash collected at the last position: 409, new
    generation; the first copy stays as collected, and verifies."""
    domain, out = str(uuid.uuid4()), tmp_path / "collected.db"
    async with cluster(tmp_path) as c:
        await two_nodes(c, tmp_path, domain)
        await run_collect(c, out)
        original = tmp_path / "n1.db"
        rewritten = tmp_path / "n1-rewritten.db"
        events = claim_events("n1", domain, "job-n1")
        await write_log(rewritten, events[:1])
        shutil.copy(original, tmp_path / "n1-kept.db")
        # Same first event (copied row), then other events: another chain from position 2 on.
        db = sqlite3.connect(rewritten)
        first = sqlite3.connect(original).execute("SELECT * FROM events WHERE position = 1").fetchone()
        db.execute("DROP TRIGGER events_are_never_updated")
        db.execute("UPDATE events SET stream=?, version=?, type=?, schema_version=?, data=?, metadata=?,"
                   " recorded_at=?, hash=? WHERE position = 1", first[1:])  # fmt: skip
        db.commit()
        db.close()
        await write_log(rewritten, events[1:] + claim_events("n1", domain, "more"))
        c.hosts["plugin-n1"].logs[0] = LogRef("plugin", "kubelet-plugin", rewritten)
        summary = await run_collect(c, out)
    assert {o.name for o in summary.outcomes if o.events} == {"kubelet-plugin/n1#2"}
    with CollectedFile.open(out, read_only=True) as file:
        old = next(s for s in file.sources() if s.name == "kubelet-plugin/n1")
        assert (
            file.last_point(old.id)
            == sqlite3.connect(tmp_path / "n1-kept.db")
            .execute("SELECT position, hash FROM events ORDER BY position DESC LIMIT 1")
            .fetchone()
        )


async def test_a_component_that_does_not_answer_is_reported_and_recorded(tmp_path: Path) -> None:
    domain, out = str(uuid.uuid4()), tmp_path / "collected.db"
    async with cluster(tmp_path) as c:
        await two_nodes(c, tmp_path, domain)
        await c.stop("plugin-n1")
        summary = await run_collect(c, out)
    [skipped] = summary.partial
    assert (skipped.pod, skipped.status) == ("plugin-n1", "skipped")
    assert "error trying to reach service" in skipped.error and "connection refused" in skipped.error
    with CollectedFile.open(out, read_only=True) as file:
        assert file.query("SELECT pod, status, error FROM fetches WHERE source_id IS NULL") == [
            ("plugin-n1", "skipped", skipped.error)
        ]
        assert file.collections()[0]["outcome"] == "partial"
        assert not any(s.node == "n1" for s in file.sources())
        assert verify(file, []).ok


async def test_since_and_domain_narrow_to_runs_that_still_verify(tmp_path: Path) -> None:
    wanted, other, out = str(uuid.uuid4()), str(uuid.uuid4()), tmp_path / "collected.db"
    async with cluster(tmp_path) as c:
        events = domain_events(wanted, "a") + domain_events(other, "b")
        events += claim_events("n0", other, "theirs") + claim_events("n0", wanted, "ours")
        events += claim_events("n0", other, "theirs-2")
        await write_log(tmp_path / "n0.db", events)
        daemons = []
        for uid in (wanted, other):
            await write_log(
                tmp_path / f"d-{uid}.db", [("node/n0", ImexDaemonStarted("n0", uid, "c", "p", "i", "m", 1))]
            )
            daemons.append(LogRef(f"daemon/{uid}", "daemon", tmp_path / f"d-{uid}.db", uid, "kept"))
        await c.add(
            "kubelet-plugin", "n0", [LogRef("plugin", "kubelet-plugin", tmp_path / "n0.db"), *daemons]
        )
        summary = await run_collect(c, out, domains=(wanted,))
    assert {o.name for o in summary.outcomes} == {"kubelet-plugin/n0", f"daemon/n0/{wanted}"}
    with CollectedFile.open(out, read_only=True) as file:
        streams = {r[0] for r in file.query("SELECT DISTINCT stream FROM events")}
        assert f"domain/{other}" not in streams and f"domain/{wanted}" in streams
        assert file.query("SELECT name FROM claim_lifecycle") == [("ours",)]
        runs = file.query(
            "SELECT first_position, last_position, anchor_hash IS NOT NULL FROM ranges ORDER BY 1"
        )
        assert len(runs) > 2 and all(anchored for *_, anchored in runs)
        report = verify(file, [])
        assert report.ok, [c.problems for c in report.checks]


async def test_a_stream_cut_short_keeps_what_came_and_the_next_run_resumes(tmp_path: Path) -> None:
    from cdctl.store import export

    domain, out = str(uuid.uuid4()), tmp_path / "collected.db"
    async with cluster(tmp_path) as c:
        await write_log(
            tmp_path / "n0.db", [e for i in range(3) for e in claim_events("n0", domain, f"j{i}")]
        )
        await c.add("kubelet-plugin", "n0", [LogRef("plugin", "kubelet-plugin", tmp_path / "n0.db")])
        real = export._encode_page

        def failing(reader: export.LogReader, plan: object, rows: list[tuple[object, ...]]) -> bytes:
            if getattr(plan, "sent", 0) >= 5:
                raise sqlite3.OperationalError("disk I/O error")
            return real(reader, plan, rows[:5])  # type: ignore[arg-type]

        export._encode_page = failing  # type: ignore[assignment]
        try:
            export.PAGE, page = 5, export.PAGE
            cut = await run_collect(c, out)
        finally:
            export._encode_page, export.PAGE = real, page  # type: ignore[assignment]
        [outcome] = cut.outcomes
        assert (outcome.status, outcome.events) == ("cut", 5) and "end line" in outcome.error
        resumed = await run_collect(c, out)
    assert [(o.status, o.events) for o in resumed.outcomes] == [("ok", 7)]
    with CollectedFile.open(out, read_only=True) as file:
        assert file.query("SELECT first_position, last_position FROM ranges") == [(1, 12)]
        assert verify(file, []).ok


def _drop(path: Path, where: str) -> None:
    """Remove events as compaction (or a cut) would leave the file: the store's triggers dropped first."""
    db = sqlite3.connect(path)
    db.execute("DROP TRIGGER events_are_never_deleted")
    db.execute(f"DELETE FROM events WHERE {where}")
    db.commit()
    db.close()


async def test_a_log_compacted_since_the_last_collection_resumes_at_its_horizon(tmp_path: Path) -> None:
    """A log whose first available event is past what the file holds (compaction): the next run starts at
    that event, as a new run without an anchor (the log no longer holds the event before it); the gap stays
    a gap, and each run verifies."""
    domain, out = str(uuid.uuid4()), tmp_path / "collected.db"
    full = tmp_path / "full.db"
    await write_log(full, [e for i in range(3) for e in claim_events("n0", domain, f"j{i}")])  # 12 events
    early, compacted = tmp_path / "early.db", tmp_path / "compacted.db"
    shutil.copy(full, early)
    _drop(early, "position > 8")
    shutil.copy(full, compacted)
    _drop(compacted, "position <= 9")
    async with cluster(tmp_path) as c:
        host = await c.add("kubelet-plugin", "n0", [LogRef("plugin", "kubelet-plugin", early)])
        first = await run_collect(c, out)
        host.logs[0] = LogRef("plugin", "kubelet-plugin", compacted)
        second = await run_collect(c, out)
    assert [o.events for o in first.outcomes] == [8] and [o.events for o in second.outcomes] == [3]
    assert {o.name for o in second.outcomes} == {"kubelet-plugin/n0"}  # the same source: not a new log
    with CollectedFile.open(out, read_only=True) as file:
        runs = file.query("SELECT first_position, last_position, anchor_hash IS NULL FROM ranges ORDER BY 1")
        assert runs == [(1, 8, 0), (10, 12, 1)]
        [check] = verify(file, []).checks
    assert check.ok and any("without an anchor" in note for note in check.notes)


async def test_one_collection_at_a_time_into_a_file(tmp_path: Path) -> None:
    from cdctl.collect.run import _lock
    from cdctl.domain.errors import StoreLocked

    out = tmp_path / "collected.db"
    async with cluster(tmp_path) as c:
        with _lock(out), pytest.raises(StoreLocked, match="another cdctl collect"):
            await run_collect(c, out)
