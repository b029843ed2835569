"""The journal: observations become domain events once, the view folds them, replay rebuilds the view."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from cdctl.api.isolation import channel_stream
from cdctl.controller import journal as journal_module
from cdctl.controller.actions import Actions, written_change
from cdctl.controller.channelview import ChannelProjection
from cdctl.controller.journal import Journal
from cdctl.controller.view import DomainProjection
from cdctl.domain.channels import ImexChannelAssigned, ImexChannelReleased
from cdctl.domain.computedomains import (
    ComputeDomainObserved,
    DomainActionIntended,
    DomainActionSucceeded,
    DomainObjectObserved,
)
from cdctl.domain.events import Actor, NewEvent, decode
from cdctl.k8s.informer import Change, Observation
from cdctl.k8s.resources import COMPUTE_DOMAINS, NODES, PODS
from cdctl.projections.lifecycle import DomainHistory, lifecycle_projections
from cdctl.projections.replay import VerifyReport, verify_chain, verify_projections
from cdctl.projections.sinks import SqliteSink
from cdctl.store.base import StreamAppend
from cdctl.store.memory import InMemoryEventStore
from cdctl.store.sqlite import SqliteEventStore
from tests.controller.harness import eventually
from tests.store.compacting import compact_through

UID = "cd-uid-1"


def cd(rv: str, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "cd", "namespace": "ns", "uid": UID, "resourceVersion": rv}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        meta["finalizers"] = ["resource.nvidia.com/computeDomain"]
    return {
        "metadata": meta,
        "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "t"}, "allocationMode": "All"}},
    }


def pod(rv: str, ready: bool, clique: str | None = "c.1") -> dict[str, Any]:
    labels = {"resource.nvidia.com/computeDomain": UID}
    if clique is not None:
        labels["resource.nvidia.com/computeDomain.cliqueID"] = clique
    return {
        "metadata": {
            "name": "daemon-a",
            "namespace": "drv",
            "uid": "pod-uid",
            "resourceVersion": rv,
            "labels": labels,
        },
        "spec": {"nodeName": "node-a"},
        "status": {
            "podIP": "10.0.0.1",
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


class Harness:
    def __init__(self, store: InMemoryEventStore | SqliteEventStore | None) -> None:
        self.changed: list[str] = []
        self.journal = Journal(store, Actor("test"), self.changed.append)
        self.view = self.journal.view
        self.task = asyncio.create_task(self.journal.run())

    async def settle(self) -> None:
        # observe_written waits for its batch, and batches run in order: after it, everything before is in.
        await self.journal.observe_written(
            PODS,
            {"metadata": {"name": "x", "namespace": "n", "uid": "u", "resourceVersion": "0"}},
            Change.ADDED,
        )

    async def close(self) -> None:
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task


async def test_observations_are_recorded_once_and_folded_into_the_view() -> None:
    store = InMemoryEventStore()
    h = Harness(store)
    h.journal.observe(Observation(COMPUTE_DOMAINS, Change.ADDED, cd("1")))
    h.journal.observe(Observation(PODS, Change.ADDED, pod("2", ready=False)))
    h.journal.observe(Observation(PODS, Change.MODIFIED, pod("2", ready=False)))  # a re-delivery
    h.journal.observe(Observation(PODS, Change.MODIFIED, pod("3", ready=True)))
    await h.settle()
    await h.close()
    events = [decode(e) for e in await store.read_stream(f"domain/{UID}")]
    assert [type(e).__name__ for e in events] == [
        "ComputeDomainObserved",
        "DomainObjectObserved",
        "DomainObjectObserved",
    ]
    assert [e.resource_version for e in events] == ["1", "2", "3"]  # type: ignore[attr-defined]
    state = h.view.domain(UID)
    assert state.cd is not None and state.cd.num_nodes == 2 and state.cd.allocation_mode == "All"
    ((namespace, daemon),) = state.daemon_pods()
    assert (namespace, daemon.node_name, daemon.ip_address, daemon.clique_id, daemon.ready) == (
        "drv",
        "node-a",
        "10.0.0.1",
        "c.1",
        True,
    )
    assert UID in h.changed
    assert h.journal.cached(PODS, "drv", "daemon-a")["metadata"]["resourceVersion"] == "3"  # type: ignore[index]


async def test_deletions_and_actions_are_events_too_and_replay_rebuilds_the_view() -> None:
    store = InMemoryEventStore()
    h = Harness(store)
    h.journal.observe(Observation(COMPUTE_DOMAINS, Change.ADDED, cd("1")))
    h.journal.observe(Observation(PODS, Change.ADDED, pod("2", ready=True)))
    await h.settle()
    await h.journal.record(UID, [DomainActionIntended(UID, "create", "DaemonSet", "drv", "ds")])
    h.journal.observe(Observation(PODS, Change.DELETED, pod("4", ready=True)))
    h.journal.observe(Observation(COMPUTE_DOMAINS, Change.MODIFIED, cd("5", deleting=True)))
    await h.settle()
    await h.close()
    assert h.view.domain(UID).daemon_pods() == []
    assert h.view.domain(UID).cd.deleting  # type: ignore[union-attr]

    replayed = Harness(store)
    assert await replayed.journal.replay() == 5
    await replayed.close()
    state = replayed.view.domain(UID)
    assert state.cd is not None and state.cd.deleting
    assert state.daemon_pods() == []


async def test_objects_gone_while_nobody_watched_are_deleted_after_the_first_listing() -> None:
    store = InMemoryEventStore()
    first = Harness(store)
    first.journal.observe(Observation(PODS, Change.ADDED, pod("2", ready=True)))
    await first.settle()
    await first.close()

    second = Harness(store)
    await second.journal.replay()
    assert len(second.view.domain(UID).daemon_pods()) == 1
    second.journal.forget_missing(PODS, "drv", present=[])
    await second.settle()
    await second.close()
    assert second.view.domain(UID).daemon_pods() == []
    last = decode((await store.read_stream(f"domain/{UID}"))[-1])
    assert isinstance(last, DomainObjectObserved) and last.change == "DELETED"


async def test_without_a_store_the_same_events_are_folded() -> None:
    h = Harness(None)
    h.journal.observe(Observation(COMPUTE_DOMAINS, Change.ADDED, cd("1")))
    await h.settle()
    await h.close()
    assert isinstance(h.view.domain(UID).cd, ComputeDomainObserved)


async def test_a_listing_older_than_what_the_view_knows_does_not_delete_it() -> None:
    h = Harness(None)
    h.journal.observe(Observation(PODS, Change.ADDED, pod("10", ready=True)))
    await h.settle()
    h.journal.forget_missing(PODS, "drv", present=[], listed_at="5")  # listed before the pod was written
    await h.settle()
    assert len(h.view.domain(UID).daemon_pods()) == 1
    h.journal.forget_missing(PODS, "drv", present=[], listed_at="12")
    await h.settle()
    assert h.view.domain(UID).daemon_pods() == []
    await h.close()


async def test_a_write_response_arriving_after_the_deletion_does_not_resurrect_the_object() -> None:
    h = Harness(None)
    h.journal.observe(Observation(PODS, Change.ADDED, pod("2", ready=True)))
    h.journal.observe(Observation(PODS, Change.DELETED, pod("5", ready=True)))
    await h.settle()
    await h.journal.observe_written(PODS, pod("4", ready=False), Change.MODIFIED)  # older than the deletion
    await h.close()
    assert h.view.domain(UID).daemon_pods() == []
    assert h.journal.cached(PODS, "drv", "daemon-a") is None


async def test_after_compaction_replay_resumes_from_the_kept_view(tmp_path: Path) -> None:
    path = tmp_path / "controller.db"
    async with await SqliteEventStore.open(path) as store:
        h = Harness(store)
        await h.journal.replay()
        h.journal.observe(Observation(COMPUTE_DOMAINS, Change.ADDED, cd("1")))
        h.journal.observe(Observation(PODS, Change.ADDED, pod("2", ready=True)))
        await h.settle()
        await h.journal.record(UID, [DomainActionIntended(UID, "create", "DaemonSet", "drv", "ds")])
        assert h.journal.history is not None
        await h.journal.history.catch_up()
        await h.close()
        await store.append("s/tick", [NewEvent("Tick", {})])
        report = await compact_through(store, store.head() - 1, [DomainHistory(), DomainProjection()])
        assert report is not None and report.events_removed == 3
    async with await SqliteEventStore.open(path) as store:
        replayed = Harness(store)
        await replayed.journal.replay()
        assert replayed.journal.from_snapshot == report.horizon
        state = replayed.view.domain(UID)
        assert state.cd is not None and [p.name for _, p in state.daemon_pods()] == ["daemon-a"]
        # The pod is still known at resourceVersion 2: its re-listing is not recorded again.
        replayed.journal.observe(Observation(PODS, Change.MODIFIED, pod("2", ready=True)))
        await replayed.settle()
        await replayed.close()
        assert [e.type for e in await store.read_all(after=report.horizon)].count("DomainObjectObserved") == 0
    verified = VerifyReport()
    async with await SqliteEventStore.open(path, read_only=True) as store:
        await verify_chain(store, verified)
        await verify_projections(store, lifecycle_projections(), SqliteSink(store), verified)
    assert verified.ok, verified.problems


async def test_a_write_answer_and_its_watch_duplicate_are_one_event_and_one_cached_copy() -> None:
    store = InMemoryEventStore()
    h = Harness(store)
    answer = cd("5")
    outcome = DomainActionSucceeded(UID, "update-status", "ComputeDomain", "ns", "cd")
    await h.journal.observe_written(COMPUTE_DOMAINS, answer, Change.MODIFIED, (UID, outcome))
    watched = cd("5")  # the watch's own decoding of the same version
    h.journal.observe(Observation(COMPUTE_DOMAINS, Change.MODIFIED, watched))
    await h.settle()
    types = [e.type for e in await store.read_stream(f"domain/{UID}")]
    assert types == ["DomainActionSucceeded", "ComputeDomainObserved"]  # outcome first, in the same append
    assert h.journal.cached(COMPUTE_DOMAINS, "ns", "cd") is watched
    await h.close()


async def test_a_write_that_removed_the_last_finalizer_of_a_deleting_object_is_its_deletion() -> None:
    store = InMemoryEventStore()
    h = Harness(store)
    h.journal.observe(Observation(COMPUTE_DOMAINS, Change.ADDED, cd("1")))
    await h.settle()
    released = cd("7", deleting=True)
    released["metadata"]["finalizers"] = []
    await h.journal.observe_written(COMPUTE_DOMAINS, released, written_change(released))
    assert h.view.domain(UID).cd is None  # gone at once: teardown does not wait for the watch
    # The watch then reports that version and the deletion: both duplicates, recorded no more.
    h.journal.observe(Observation(COMPUTE_DOMAINS, Change.MODIFIED, cd("7", deleting=True)))
    h.journal.observe(Observation(COMPUTE_DOMAINS, Change.DELETED, cd("8", deleting=True)))
    await h.settle()
    changes = [decode(e).change for e in await store.read_stream(f"domain/{UID}")]  # type: ignore[attr-defined]
    assert changes == ["ADDED", "DELETED"]
    await h.close()


async def test_the_history_table_gets_every_event_once_whether_held_or_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal_module, "HISTORY_QUIET_S", 0.05)
    monkeypatch.setattr(journal_module, "HISTORY_BATCH", 3)
    store = await SqliteEventStore.open(tmp_path / "controller.db")
    h = Harness(store)
    try:
        await h.journal.replay()
        for i in range(5):  # held as appended, written once 3 wait
            await h.journal.record(UID, [DomainActionIntended(UID, "create", "DaemonSet", "drv", f"ds{i}")])
        # Another writer's event: not held here, so the table reads it back from the file.
        other = DomainActionIntended(UID, "create", "DaemonSet", "drv", "other")
        await store.append_batch([StreamAppend(f"domain/{UID}", [NewEvent.of(other)])])
        await h.journal.record(UID, [DomainActionIntended(UID, "create", "DaemonSet", "drv", "last")])
        history = h.journal.history
        assert history is not None
        await eventually(lambda: history.position == store.head())
        rows = await store.query("SELECT position, detail FROM domain_history ORDER BY position")
        events = await store.read_all()
        assert [(e.position, e.data_json) for e in events] == [(int(p), d) for p, d in rows]
        assert len(rows) == 7
    finally:
        await h.close()
        await store.close()


async def test_a_pipelined_block_that_fails_does_not_wait_on_the_journal() -> None:
    """Cancelled at shutdown (the journal stopping too), a teardown step must not wait for a flush."""
    journal = Journal(InMemoryEventStore(), Actor("test"), lambda uid: None)  # its loop never runs
    actions = Actions(None, journal, None)  # type: ignore[arg-type]  # no request is made
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            async with actions.pipelined():
                raise asyncio.CancelledError


async def test_pipelined_outcomes_share_an_append_with_the_next_intention() -> None:
    store = InMemoryEventStore()
    h = Harness(store)
    actions = Actions(None, h.journal, None)  # type: ignore[arg-type]
    async with actions.pipelined():
        await actions.record(UID, [DomainActionIntended(UID, "delete", "DaemonSet", "drv", "a")])
        outcome = DomainActionSucceeded(UID, "delete", "DaemonSet", "drv", "a")
        await h.journal.observe_written(COMPUTE_DOMAINS, cd("3"), Change.MODIFIED, (UID, outcome), wait=False)
        await actions.record(UID, [DomainActionIntended(UID, "delete", "DaemonSet", "drv", "b")])
    events = await store.read_stream(f"domain/{UID}")
    assert len({e.recorded_at for e in events[1:]}) == 1  # a's outcome and b's intention: one append
    types = [(e.type, e.data.get("name")) for e in events]
    assert types == [
        ("DomainActionIntended", "a"),
        ("DomainActionSucceeded", "a"),
        ("ComputeDomainObserved", "cd"),
        ("DomainActionIntended", "b"),
    ]
    assert h.view.domain(UID).cd is not None  # the block's end waited until the view had every outcome
    await h.close()


async def test_the_channel_view_survives_snapshots_and_compaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Channel isolation: who holds which channel is rebuilt from a regular snapshot and from the view a
    compaction keeps at its horizon, not only from the events (which compaction removes)."""
    clique = "c0ffee.1"
    path = tmp_path / "controller.db"
    monkeypatch.setattr(journal_module, "SNAPSHOT_EVERY", 2)
    async with await SqliteEventStore.open(path) as store:
        h = Harness(store)
        await h.journal.replay()
        for channel, uid in ((1, "a"), (2, "b")):
            await h.journal.record_in(
                channel_stream(clique), [ImexChannelAssigned(clique, channel, uid, "ns", uid)]
            )
        await h.journal.record_in(channel_stream(clique), [ImexChannelReleased(clique, 1, "a", "ns", "a")])
        await h.close()
    async with await SqliteEventStore.open(path) as store:
        resumed = Harness(store)
        await resumed.journal.replay()
        assert resumed.journal.from_snapshot > 0
        assert resumed.journal.channels.of_domain("b") == {clique: 2}
        assert resumed.journal.channels.clique(clique).released == (1,)
        await resumed.close()
        await store.append("s/tick", [NewEvent("Tick", {})])
        report = await compact_through(
            store, store.head() - 1, [DomainHistory(), DomainProjection(), ChannelProjection()]
        )
        assert report is not None and report.events_removed == 3
    async with await SqliteEventStore.open(path) as store:
        compacted = Harness(store)
        await compacted.journal.replay()
        assert compacted.journal.channels.of_domain("b") == {clique: 2}
        assert compacted.journal.channels.clique(clique).pick(8) == 3  # 1 was released: reused last
        await compacted.close()


def node(rv: str, domain: str | None) -> dict[str, Any]:
    labels = {"resource.nvidia.com/computeDomain": domain} if domain else {}
    return {"metadata": {"name": "node-a", "uid": "node-uid", "resourceVersion": rv, "labels": labels}}


async def test_an_object_that_leaves_a_domain_is_gone_from_its_view_and_the_deleted_domain_with_it(
    tmp_path: Path,
) -> None:
    """A Node unlabelled at teardown (its watch shows it without the label), then labelled for the next
    domain: each domain's view lets go of it. Before, the first domain's row kept the Node for good, and a
    restarted controller replayed a row for every domain it ever had (bench/soak.py)."""
    async with await SqliteEventStore.open(tmp_path / "controller.db") as store:
        h = Harness(store)
        await h.journal.replay()
        h.journal.observe(Observation(COMPUTE_DOMAINS, Change.ADDED, cd("1")))
        h.journal.observe(Observation(NODES, Change.MODIFIED, node("2", UID)))
        await h.settle()
        assert h.view.domain(UID).get("Node", "", "node-a") is not None
        h.journal.observe(Observation(COMPUTE_DOMAINS, Change.DELETED, cd("3")))
        h.journal.observe(Observation(NODES, Change.MODIFIED, node("4", None)))  # the label removed
        await h.settle()
        assert h.view.domain(UID).empty and (UID,) not in h.view.rows  # the deleted domain's row is gone
        h.journal.observe(Observation(NODES, Change.MODIFIED, node("5", "cd-uid-2")))
        h.journal.observe(Observation(NODES, Change.MODIFIED, node("6", "cd-uid-3")))  # moved on directly
        await h.settle()
        assert h.view.domain("cd-uid-2").get("Node", "", "node-a") is None
        assert h.view.domain("cd-uid-3").get("Node", "", "node-a") is not None
        await h.close()
        resumed = Harness(store)
        await resumed.journal.replay()
        assert set(resumed.view.uids()) == {"cd-uid-3"}  # a restart replays only the domain holding it
        await resumed.close()
