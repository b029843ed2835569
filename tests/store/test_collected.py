"""The collected file (cdctl/store/collected.sql): its identity and schema, runs with anchors, each source's
chain checked on its own (keyed or not) against the heads recorded, and the read models per source, merged
across sources (cdctl.projections.collected, cdctl.projections.timeline)."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pytest

from cdctl.domain.errors import StoreError
from cdctl.domain.imex import ImexDaemonStarted
from cdctl.projections.collected import ensure_read_models, rebuild, verify
from cdctl.store.collected import APPLICATION_ID, CollectedFile, Fetch, check_source, kind_of
from cdctl.store.export import ExportRequest, LogRef
from tests.collect.harness import store_locally, write_log
from tests.collect.test_collect import claim_events, domain_events

KEY = b"k" * 32


def test_identity_and_schema(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    CollectedFile.open(path, create=True).close()
    db = sqlite3.connect(path)
    assert (
        db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID == int.from_bytes(b"cdcc", "big")
    )
    assert db.execute("PRAGMA user_version").fetchone()[0] == 2
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    assert {"collections", "sources", "ranges", "fetches", "source_events", "events"} <= tables
    assert "source_horizons" in tables
    assert path.stat().st_mode & 0o777 == 0o600
    assert kind_of(path) == "collected"
    (tmp_path / "foreign.db").write_bytes(b"not sqlite at all, not at all, really not")
    with pytest.raises(StoreError, match="not an SQLite database"):
        kind_of(tmp_path / "foreign.db")
    assert kind_of(tmp_path / "missing.db") == "log"  # opened as a log, which says it is missing


async def test_an_event_log_is_not_opened_as_a_collected_file(tmp_path: Path) -> None:
    await write_log(tmp_path / "log.db", domain_events(str(uuid.uuid4()), "a"))
    assert kind_of(tmp_path / "log.db") == "log"
    with pytest.raises(StoreError, match="not a collected file"):
        CollectedFile.open(tmp_path / "log.db")


def test_runs_extend_and_start_at_anchors(tmp_path: Path) -> None:
    def row(position: int) -> tuple[object, ...]:
        return (
            position,
            "s",
            position,
            "T",
            1,
            "{}",
            "{}",
            f"2026-01-01T00:00:{position:02d}",
            f"h{position}",
        )

    with CollectedFile.open(tmp_path / "c.db", create=True) as file:
        source = file.add_source(
            component="kubelet-plugin", node="n", pod="p", log="plugin", domain_uid="",
            scheme=("sha256", 0, ""), first=(1, "h1"),
        )  # fmt: skip
        current, stored = file.store_batch(source.id, [("anchor", (0, "0" * 64)), ("event", row(1))], None)
        current, _ = file.store_batch(source.id, [("anchor", (1, "h1")), ("event", row(2))], current)
        current, _ = file.store_batch(source.id, [("anchor", (6, "h6")), ("event", row(7))], current)
        assert stored == 1
        assert file.query("SELECT first_position, last_position, anchor_hash FROM ranges ORDER BY 1") == [
            (1, 2, "0" * 64), (7, 7, "h6"),
        ]  # fmt: skip
        with pytest.raises(StoreError, match="rewritten"):
            file.store_batch(source.id, [("anchor", (7, "not-h7")), ("event", row(8))], current)
        assert file.last_point(source.id) == (7, "h7")  # the refused batch left nothing
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            file.db.execute("UPDATE source_events SET data = '{\"x\":1}' WHERE position = 1")


async def test_each_source_verifies_on_its_own_and_an_edit_names_its_source_and_position(
    tmp_path: Path,
) -> None:
    domain = str(uuid.uuid4())
    await write_log(tmp_path / "n0.db", claim_events("n0", domain, "a") + claim_events("n0", domain, "b"))
    await write_log(tmp_path / "n1.db", claim_events("n1", domain, "c"), key=KEY)
    with CollectedFile.open(tmp_path / "c.db", create=True) as file:
        ensure_read_models(file)
        plain = await store_locally(file, LogRef("plugin", "kubelet-plugin", tmp_path / "n0.db"), node="n0")
        keyed = await store_locally(file, LogRef("plugin", "kubelet-plugin", tmp_path / "n1.db"), node="n1")
        rebuild(file, file.sources())
        assert check_source(file, plain, []).ok
        assert check_source(file, plain, []).heads_held == 1
        assert "pass its key" in check_source(file, keyed, []).problems[0]
        assert check_source(file, keyed, [KEY]).ok
        assert "none of the keys" in check_source(file, keyed, [b"x" * 32]).problems[0]
        assert verify(file, [KEY]).ok
        file.db.execute("DROP TRIGGER source_events_are_never_updated")  # what someone editing the file does
        file.db.execute(
            "UPDATE source_events SET data = replace(data, '\"a\"', '\"z\"')"
            " WHERE source_id = ? AND position = 1",
            (plain.id,),
        )
        report = verify(file, [KEY])
    [failed] = [c for c in report.checks if not c.ok]
    assert failed.source.name == "kubelet-plugin/n0" and failed.first_bad_position == 1
    assert "hash mismatch" in failed.problems[0]


async def test_a_head_the_component_published_must_be_held(tmp_path: Path) -> None:
    await write_log(tmp_path / "n0.db", claim_events("n0", "d", "a"))
    with CollectedFile.open(tmp_path / "c.db", create=True) as file:
        source = await store_locally(file, LogRef("plugin", "kubelet-plugin", tmp_path / "n0.db"), node="n0")
        collection = file.begin_collection("x", "ns", "", [], [])
        fetch = Fetch(
            "kubelet-plugin", "n0", "", "plugin", "ok", source_id=source.id, published=(2, "f" * 64)
        )
        file.record_fetch(collection, fetch)
        check = check_source(file, source, [])
    assert not check.ok and "published" in check.problems[0] and check.first_bad_position == 2


async def test_a_narrowed_copy_verifies_its_runs_from_their_anchors(tmp_path: Path) -> None:
    wanted, other = str(uuid.uuid4()), str(uuid.uuid4())
    events = claim_events("n0", other, "x") + claim_events("n0", wanted, "y") + claim_events("n0", other, "z")
    await write_log(tmp_path / "n0.db", events)
    with CollectedFile.open(tmp_path / "c.db", create=True) as file:
        ref = LogRef("plugin", "kubelet-plugin", tmp_path / "n0.db")
        source = await store_locally(file, ref, node="n0", request=ExportRequest(domains=(wanted,)))
        check = check_source(file, source, [])
        runs = file.query("SELECT first_position, last_position FROM ranges")
    assert runs == [(5, 8)] and check.ok and check.events == 4


async def test_read_models_span_sources_and_a_daemon_cannot_forge_claims(tmp_path: Path) -> None:
    """A compromised daemon writes claim events into its own log: they stay in its source's events and never
    reach claim_lifecycle, which only the plugins' logs feed."""
    domain = str(uuid.uuid4())
    await write_log(tmp_path / "n0.db", claim_events("n0", domain, "real-0"))
    await write_log(tmp_path / "n1.db", claim_events("n1", domain, "real-1"))
    forged = claim_events("n1", domain, "forged-by-daemon")
    await write_log(
        tmp_path / "d.db", [("node/n1", ImexDaemonStarted("n1", domain, "c", "p", "i", "m", 1)), *forged]
    )
    with CollectedFile.open(tmp_path / "c.db", create=True) as file:
        ensure_read_models(file)
        for node in ("n0", "n1"):
            await store_locally(file, LogRef("plugin", "kubelet-plugin", tmp_path / f"{node}.db"), node=node)
        await store_locally(file, LogRef(f"daemon/{domain}", "daemon", tmp_path / "d.db", domain), node="n1")
        rebuild(file, file.sources())
        rows = file.query("SELECT source, node, name FROM claim_lifecycle ORDER BY node")
        times = [
            r[0] for r in file.query("SELECT recorded_at FROM events ORDER BY recorded_at, source, position")
        ]
        assert verify(file, []).ok
    assert rows == [("kubelet-plugin/n0", "n0", "real-0"), ("kubelet-plugin/n1", "n1", "real-1")]
    assert times == sorted(times) and len(times) == 4 + 4 + 5


async def test_an_edited_read_model_row_fails_verification(tmp_path: Path) -> None:
    await write_log(tmp_path / "n0.db", claim_events("n0", "d", "a") + claim_events("n0", "d", "b"))
    with CollectedFile.open(tmp_path / "c.db", create=True) as file:
        ensure_read_models(file)
        await store_locally(file, LogRef("plugin", "kubelet-plugin", tmp_path / "n0.db"), node="n0")
        rebuild(file, file.sources())
        assert verify(file, []).ok
        file.db.execute("UPDATE claim_lifecycle SET state = 'PrepareCompleted' WHERE name = 'b'")
        [check] = verify(file, []).checks
    assert not check.ok and "claim_lifecycle" in check.problems[0] and check.first_bad_position == 8
