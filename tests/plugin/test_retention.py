"""The kubelet plugin under retention: its claim checkpoint survives compaction of its log, and its kept IMEX
daemon logs (`imex-history/`) are pruned by the same policy, recorded in its log.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from datetime import UTC, datetime
from pathlib import Path

from grpclib.client import Channel

from cdctl._proto.k8s.io.kubelet.pkg.apis.dra import v1
from cdctl.api.refs import DomainInfo
from cdctl.domain import claims as c
from cdctl.domain.events import Actor, NewEvent
from cdctl.domain.retention import RetentionPolicy
from cdctl.k8s.rest import KubeApi
from cdctl.plugin import imexhistory, nvml
from cdctl.plugin.app import PluginProcess
from cdctl.plugin.checkpoint import ClaimBook, ClaimBookProjection
from cdctl.plugin.devices import ClaimRef, parse_claim
from cdctl.plugin.pluginconfig import PluginConfig
from cdctl.plugin.prepare import DeviceState
from cdctl.plugin.preparesettings import FabricStatus, PrepareSettings
from cdctl.projections.lifecycle import lifecycle_projections
from cdctl.projections.replay import VerifyReport, verify_chain, verify_projections
from cdctl.projections.runner import ProjectionRunner
from cdctl.projections.sinks import SqliteSink
from cdctl.sim.apiserver.server import ApiServer
from cdctl.store import SqliteEventStore
from tests.plugin.conftest import CLIQUE, node_settings
from tests.plugin.fakes import DOM1, FakeCluster, FakeGates, channel_claim
from tests.plugin.test_app import U, config, seed_claim, serving_plugin, until
from tests.store.compacting import compact_through

DAY = 86_400.0
FAKE_NVML = nvml.FakeDeviceLib(cluster_uuid=U, clique_id=7)


def node_parts(tmp: Path) -> tuple[PrepareSettings, FakeCluster, FabricStatus]:
    """A node's settings, a cluster whose domain DOM1 is Ready on it, and its fabric."""
    cluster = FakeCluster()
    cluster.domains[DOM1] = DomainInfo(DOM1, "cd", "default")
    cluster.ready.add((DOM1, "node-a"))
    return node_settings(tmp), cluster, FabricStatus(clique_id=CLIQUE)


def compacting_config(base: Path) -> PluginConfig:
    """The plugin's config with a 1-byte bound checked every 0.1 s: every round compacts all it can."""
    return dataclasses.replace(
        config(base), retention=RetentionPolicy(age_s=0, size_bytes=1), retention_first_delay_s=0.0,
        retention_interval_s=0.1,
    )  # fmt: skip


async def test_the_claim_checkpoint_survives_compaction_and_a_restart(tmp_path: Path) -> None:
    settings, cluster, fabric = node_parts(tmp_path)
    path = tmp_path / "events.db"
    async with await SqliteEventStore.open(path) as store:
        book = await ClaimBook.load(store, "node-a")
        await book.observe_boot("boot-1")
        state = DeviceState(settings, book, cluster, fabric, FakeGates())
        await state.prepare(parse_claim(channel_claim("c2", DOM1)), 0)
        await state.unprepare(ClaimRef("c2", "default", "rc"))
        ended = await store.stream_version(c.claim_stream("c2"))
        kept = await state.prepare(parse_claim(channel_claim("c1", DOM1)), 0)
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
        state = DeviceState(settings, book, cluster, fabric, FakeGates())
        assert await state.prepare(parse_claim(channel_claim("c1", DOM1)), book.version("c1")) == kept
        assert await state.unprepare(ClaimRef("c1", "default", "rc"))  # its stream version carried on
        assert await state.prepare(parse_claim(channel_claim("c2", DOM1)), book.version("c2"))
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


async def test_the_running_plugin_compacts_its_log_and_prunes_imex_history(
    env: tuple[ApiServer, KubeApi, Path],
) -> None:
    _, api, base = env
    domain_uid, claim_uid = await seed_claim(api, f"{U}.7")
    cfg = compacting_config(base)
    kept_log(cfg.plugin_dir / "imex-history", "gone-domain", 100, 1, datetime.now(UTC).timestamp())
    ref = v1.Claim(namespace="default", name="rc", uid=claim_uid)
    async with serving_plugin(cfg, api, (domain_uid,)) as (process, stub):
        resp = await stub.node_prepare_resources(v1.NodePrepareResourcesRequest(claims=[ref]))
        assert resp.claims[claim_uid].error == ""
        assert process.store is not None
        store = process.store

        async def compacted_past_the_prepare() -> bool:
            horizon = await store.horizon()
            prepared = await store.query(
                "SELECT MAX(position) FROM events WHERE stream = ?", (f"claim/{claim_uid}",)
            )
            return (
                horizon is not None and not horizon.pending and horizon.position >= int(prepared[0][0] or 0)
            )

        await until(compacted_past_the_prepare, "compaction")
        assert not (cfg.plugin_dir / "imex-history" / "gone-domain.db").exists()
        # Recorded, and compacted away since by the next round (a 1-byte bound removes all it can).
        assert await store.stream_version("log/imex-history") == 1
    # Restarted on its compacted log: the claim is still known prepared, and unprepares cleanly.
    stop = asyncio.Event()
    process = PluginProcess(dataclasses.replace(cfg, retention=RetentionPolicy(0, 0)), device_lib=FAKE_NVML)
    task = asyncio.create_task(process.run(stop))
    try:

        async def serving() -> bool:
            assert not task.done(), task.result()
            return process.servers is not None

        await until(serving, "restart")
        assert process.state is not None
        record = process.state.book.get(claim_uid)
        assert record is not None and record.completed and process.state.book.compacted
        channel = Channel(path=str(process.servers.paths.dra))  # type: ignore[union-attr]
        try:
            stub = v1.DraPluginStub(channel)
            unresp = await stub.node_unprepare_resources(v1.NodeUnprepareResourcesRequest(claims=[ref]))
            assert unresp.claims[claim_uid].error == ""
        finally:
            channel.close()
    finally:
        stop.set()
        await task
    report = VerifyReport()
    async with await SqliteEventStore.open(cfg.db_path, read_only=True) as store:
        await verify_chain(store, report)
        await verify_projections(store, lifecycle_projections(), SqliteSink(store), report)
    assert report.ok and report.horizon is not None, report.problems


async def test_a_compaction_drops_the_claims_it_removed_from_the_running_book_but_not_a_busy_one(
    tmp_path: Path,
) -> None:
    """Without this a plugin that runs for months keeps every claim it ever saw in memory (bench/soak.py)."""
    settings, cluster, fabric = node_parts(tmp_path)
    async with await SqliteEventStore.open(tmp_path / "events.db") as store:
        book = await ClaimBook.load(store, "node-a")
        state = DeviceState(settings, book, cluster, fabric, FakeGates())
        for uid in ("c2", "c3"):
            await state.prepare(parse_claim(channel_claim(uid, DOM1)), 0)
            await state.unprepare(ClaimRef(uid, "default", "rc"))
        ended = await store.stream_version(c.claim_stream("c2"))
        await state.prepare(parse_claim(channel_claim("c1", DOM1)), 0)  # still prepared: kept
        runner = ProjectionRunner(store, lifecycle_projections())
        await runner.start()
        await runner.catch_up()
        await store.append("s/tick", [NewEvent("Tick", {})])
        projections = [*lifecycle_projections(), ClaimBookProjection("node-a")]
        report = await compact_through(store, store.head() - 1, projections)
        assert report is not None
        assert book.forget_ended(report.horizon, busy={"c3"}) == 1  # c3 is in a kubelet call: kept
        assert book.get("c2") is None and book.get("c3") is not None
        record = book.get("c1")
        assert record is not None and record.completed
        assert await state.unprepare(ClaimRef("c1", "default", "rc"))
        # The kubelet names c2 again: a first prepare here, its stream's versions carried on from the store.
        assert await state.prepare(parse_claim(channel_claim("c2", DOM1)), book.version("c2")) is not None
        versions = [e.version for e in await store.read_stream(c.claim_stream("c2"))]
        assert versions[0] == ended + 1


async def test_the_running_plugin_forgets_a_claim_once_compaction_removed_its_end(
    env: tuple[ApiServer, KubeApi, Path],
) -> None:
    _, api, base = env
    domain_uid, claim_uid = await seed_claim(api, f"{U}.7")
    cfg = compacting_config(base)
    ref = v1.Claim(namespace="default", name="rc", uid=claim_uid)
    async with serving_plugin(cfg, api, (domain_uid,)) as (process, stub):
        resp = await stub.node_prepare_resources(v1.NodePrepareResourcesRequest(claims=[ref]))
        assert resp.claims[claim_uid].error == ""
        unresp = await stub.node_unprepare_resources(v1.NodeUnprepareResourcesRequest(claims=[ref]))
        assert unresp.claims[claim_uid].error == ""
        assert process.state is not None
        book = process.state.book

        async def forgotten() -> bool:
            return book.get(claim_uid) is None

        await until(forgotten, "the ended claim dropped from the book")
        again = await stub.node_unprepare_resources(v1.NodeUnprepareResourcesRequest(claims=[ref]))
        assert again.claims[claim_uid].error == ""  # a repeated Unprepare of a forgotten claim is still fine
