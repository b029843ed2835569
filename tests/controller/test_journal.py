"""The journal: observations become domain events once, the view folds them, replay rebuilds the view."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from cdctl.controller.journal import Journal
from cdctl.controller.view import DomainProjection
from cdctl.domain.computedomains import ComputeDomainObserved, DomainActionIntended, DomainObjectObserved
from cdctl.domain.events import Actor, NewEvent, decode
from cdctl.k8s.informer import Change, Observation
from cdctl.k8s.resources import COMPUTE_DOMAINS, PODS
from cdctl.projections.lifecycle import DomainHistory, lifecycle_projections
from cdctl.projections.replay import VerifyReport, verify_chain, verify_projections
from cdctl.projections.sinks import SqliteSink
from cdctl.store import SqliteEventStore
from cdctl.store.memory import InMemoryEventStore
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
