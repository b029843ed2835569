"""The kubelet plugin under retention: its claim checkpoint survives compaction of its log, and its kept IMEX
daemon logs (`imex-history/`) are pruned by the same policy, recorded in its log.
"""

from __future__ import annotations

import os
from pathlib import Path

from cdctl.api.refs import DomainInfo
from cdctl.domain import claims as c
from cdctl.domain.events import Actor, NewEvent
from cdctl.domain.retention import RetentionPolicy
from cdctl.plugin import imexhistory
from cdctl.plugin.checkpoint import ClaimBook, ClaimBookProjection
from cdctl.plugin.devices import ClaimRef, parse_claim
from cdctl.plugin.prepare import DeviceState, FabricStatus
from cdctl.projections.lifecycle import lifecycle_projections
from cdctl.projections.runner import ProjectionRunner
from cdctl.store import SqliteEventStore
from tests.plugin.conftest import CLIQUE, node_settings
from tests.plugin.fakes import FakeCluster, channel_claim
from tests.store.compacting import compact_through

DAY = 86_400.0


async def test_the_claim_checkpoint_survives_compaction_and_a_restart(tmp_path: Path) -> None:
    settings = node_settings(tmp_path)
    cluster = FakeCluster()
    cluster.domains["dom-1"] = DomainInfo("dom-1", "cd", "default")
    cluster.ready.add(("dom-1", "node-a"))
    fabric = FabricStatus(clique_id=CLIQUE)
    path = tmp_path / "events.db"
    async with await SqliteEventStore.open(path) as store:
        book = await ClaimBook.load(store, "node-a")
        await book.observe_boot("boot-1")
        state = DeviceState(settings, book, cluster, fabric)
        await state.prepare(parse_claim(channel_claim("c2", "dom-1")), 0)
        await state.unprepare(ClaimRef("c2", "default", "rc"))
        ended = await store.stream_version(c.claim_stream("c2"))
        kept = await state.prepare(parse_claim(channel_claim("c1", "dom-1")), 0)
        runner = ProjectionRunner(store, lifecycle_projections())
        await runner.start()
        await runner.catch_up()
        await store.append("s/tick", [NewEvent("Tick", {})])
        projections = [*lifecycle_projections(), ClaimBookProjection("node-a")]
        report = await compact_through(store, store.head() - 1, projections)
        assert report is not None and report.horizon == store.head() - 3  # the tick and the record stay
    async with await SqliteEventStore.open(path) as store:
        book = await ClaimBook.load(store, "node-a")
        assert book.compacted and book.boot_id == "boot-1"
        record = book.get("c1")
        assert record is not None and record.completed and list(record.devices) == kept
        assert book.get("c2") is None  # it ended before the horizon: it holds nothing
        state = DeviceState(settings, book, cluster, fabric)
        assert await state.prepare(parse_claim(channel_claim("c1", "dom-1")), book.version("c1")) == kept
        assert await state.unprepare(ClaimRef("c1", "default", "rc"))  # its stream version carried on
        assert await state.prepare(parse_claim(channel_claim("c2", "dom-1")), book.version("c2"))
        versions = [e.version for e in await store.read_stream(c.claim_stream("c2"))]
        assert versions == [ended + 1, ended + 2, ended + 3, ended + 4]  # the removed ones are not reused
        assert [r.claim_uid for r in await book.observe_boot("boot-2")] == ["c2"]


def kept_log(history: Path, uid: str, size: int, age_days: float, now: float, sides: bool = True) -> None:
    history.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm") if sides else ("",):
        path = history / f"{uid}.db{suffix}"
        path.write_bytes(b"x" * (size if not suffix else 10))
        os.utime(path, (now - age_days * DAY, now - age_days * DAY))


async def test_imex_history_is_pruned_by_age_then_oldest_first_by_size(tmp_path: Path) -> None:
    plugin_dir, now = tmp_path / "plugin", 2_000_000_000.0
    history = plugin_dir / "imex-history"
    kept_log(history, "old", 100, 40, now)
    kept_log(history, "mid", 3000, 20, now)
    kept_log(history, "new", 3000, 10, now)
    kept_log(history, "newest", 3000, 1, now)
    kept_log(history, "back", 100, 50, now)
    (plugin_dir / "domains" / "back").mkdir(parents=True)  # its domain is on this node again
    (history / "notes.txt").write_text("not a kept log")
    (history / "gone.db-wal").write_bytes(b"x")  # a side file whose log is gone
    os.utime(history / "gone.db-wal", (now - 60 * DAY, now - 60 * DAY))
    async with await SqliteEventStore.open(tmp_path / "events.db") as store:
        policy = RetentionPolicy(age_s=30 * DAY, size_bytes=7000)
        removed = await imexhistory.prune(plugin_dir, policy, store, _actor(), now=now)
        assert [(k.domain_uid, why) for k, why in removed] == [
            ("gone", "age"),
            ("old", "age"),
            ("mid", "size"),
        ]
        recorded = await store.read_stream("log/imex-history")
    assert sorted(p.name for p in history.iterdir()) == sorted(
        ["notes.txt", *(f"{uid}.db{s}" for uid in ("new", "newest", "back") for s in ("", "-wal", "-shm"))]
    )
    assert [(e.data["domain_uid"], e.data["reason"], e.data["bytes"]) for e in recorded] == [
        ("gone", "age", 1), ("old", "age", 120), ("mid", "size", 3020),
    ]  # fmt: skip
    assert recorded[2].data["files"] == ["mid.db", "mid.db-shm", "mid.db-wal"]


async def test_a_daemon_that_bloats_its_log_pushes_out_only_its_own(tmp_path: Path) -> None:
    plugin_dir, now = tmp_path / "plugin", 2_000_000_000.0
    history = plugin_dir / "imex-history"
    kept_log(history, "tenant-a", 1000, 5, now)
    kept_log(history, "tenant-b", 1000, 4, now)
    kept_log(history, "bloated", 50_000, 1, now, sides=False)
    target = tmp_path / "precious"
    target.write_text("keep me")
    (history / "link.db").symlink_to(target)
    async with await SqliteEventStore.open(tmp_path / "events.db") as store:
        removed = await imexhistory.prune(plugin_dir, RetentionPolicy(0, 10_000), store, _actor(), now=now)
    assert [(k.domain_uid, why) for k, why in removed] == [("bloated", "size")]
    assert target.read_text() == "keep me" and (history / "link.db").is_symlink()


async def test_no_bound_no_pruning(tmp_path: Path) -> None:
    plugin_dir, now = tmp_path / "plugin", 2_000_000_000.0
    kept_log(plugin_dir / "imex-history", "old", 100, 400, now)
    async with await SqliteEventStore.open(tmp_path / "events.db") as store:
        assert await imexhistory.prune(plugin_dir, RetentionPolicy(0, 0), store, _actor(), now=now) == []


def _actor() -> Actor:
    return Actor("kubelet-plugin", node="node-a")
