"""Faults on the way: dropped watches, injected 409s and 5xx, a restart mid-teardown, orphans, conflicts."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdctl.controller import journal
from cdctl.domain.computedomains import (
    ComputeDomainObserved,
    ComputeDomainTornDown,
    DomainActionIntended,
    DomainObjectObserved,
)
from cdctl.domain.events import decode
from cdctl.store.memory import InMemoryEventStore
from cdctl.store.sqlite import SqliteEventStore
from tests.controller.harness import DRIVER_NAMESPACE, USER_NAMESPACE, Cluster, eventually, eventually_async

RCT = ("resource.k8s.io", "resourceclaimtemplates")
LABEL = "resource.nvidia.com/computeDomain"


async def test_dropped_watches_and_injected_conflicts_do_not_stop_convergence(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller()
        cluster.server.faults.fail_next(409, 409, 500, 409, 503)
        uid = cluster.create_domain("cd1", num_nodes=1)["metadata"]["uid"]
        cluster.server.drop_watches()
        await eventually(
            lambda: cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, f"computedomain-daemon-{uid}")
        )
        pod = cluster.run_daemon(uid, "node-a", "10.0.0.1", "c.1")
        cluster.server.drop_watches()
        cluster.server.faults.fail_next(409, 409)
        cluster.set_pod(pod, ready=True)
        await eventually(lambda: (cluster.domain("cd1") or {}).get("status", {}).get("status") == "Ready")
        await eventually(lambda: cluster.get(*RCT, USER_NAMESPACE, "cd1-channel"))
        assert cluster.server.faults.injected == 7


async def test_a_restart_in_the_middle_of_teardown_still_finishes(tmp_path: Path) -> None:
    log = InMemoryEventStore()
    async with Cluster(tmp_path) as cluster:
        task, _ = await cluster.start_controller(store=log)
        uid = cluster.create_domain("cd1")["metadata"]["uid"]
        workload = await eventually(lambda: cluster.get(*RCT, USER_NAMESPACE, "cd1-channel"))
        await eventually(
            lambda: cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, f"computedomain-daemon-{uid}")
        )
        cluster.label_node("node-a", uid)
        # Someone else holds the workload template: teardown stops at "workload template still exists".
        workload["metadata"]["finalizers"].append("example.com/hold")
        cluster.server.store.update(cluster.type_of(*RCT), USER_NAMESPACE, "cd1-channel", workload)
        cluster.delete_domain("cd1")
        await eventually(
            lambda: (
                "resource.nvidia.com/computeDomain"
                not in (
                    (cluster.get(*RCT, USER_NAMESPACE, "cd1-channel") or {})
                    .get("metadata", {})
                    .get("finalizers", [])
                )
            )
        )
        node_labels = cluster.get("", "nodes", "", "node-a")["metadata"].get("labels", {})
        assert LABEL not in node_labels
        assert cluster.domain("cd1") is not None
        await cluster.stop_controller(task)

        held = cluster.get(*RCT, USER_NAMESPACE, "cd1-channel")
        held["metadata"]["finalizers"] = []
        cluster.server.store.update(cluster.type_of(*RCT), USER_NAMESPACE, "cd1-channel", held)
        _, restarted = await cluster.start_controller(store=log)
        await eventually(lambda: cluster.domain("cd1") is None)
        assert cluster.list("apps", "daemonsets") == []
        assert cluster.list(*RCT) == []

    events = [decode(e) for e in await log.read_stream(f"domain/{uid}")]
    types = [type(e).__name__ for e in events]
    assert types[0] == "ComputeDomainObserved"
    assert types.count("ComputeDomainTornDown") == 1
    # Each write is an intention, then its outcome, in the log of the domain.
    intended = [(e.action, e.kind) for e in events if isinstance(e, DomainActionIntended)]
    assert ("create", "DaemonSet") in intended and ("delete", "ResourceClaimTemplate") in intended
    assert ("remove-finalizer", "ComputeDomain") in intended
    # The restarted controller listed everything again, yet no (uid, resourceVersion) was recorded twice.
    observed = [(e.uid, e.resource_version, e.change) for e in events if isinstance(e, DomainObjectObserved)]
    observed += [
        (e.uid, e.resource_version, e.change) for e in events if isinstance(e, ComputeDomainObserved)
    ]
    assert len(observed) == len(set(observed))
    assert restarted.journal.recorded > 0


async def test_objects_of_domains_that_no_longer_exist_are_swept(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        ghost = "00000000-dead-4000-8000-000000000000"
        store = cluster.server.store
        store.create(
            cluster.type_of(*RCT),
            USER_NAMESPACE,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {
                    "name": "leftover",
                    "labels": {LABEL: ghost, "resource.nvidia.com/computeDomainTarget": "Workload"},
                    "finalizers": ["resource.nvidia.com/computeDomain"],
                },
                "spec": {"spec": {"devices": {"requests": []}}},
            },
        )
        store.create(
            cluster.type_of("apps", "daemonsets"),
            DRIVER_NAMESPACE,
            {
                "metadata": {
                    "name": f"computedomain-daemon-{ghost}",
                    "labels": {LABEL: ghost},
                    "finalizers": ["resource.nvidia.com/computeDomain"],
                },
                "spec": {
                    "selector": {"matchLabels": {LABEL: ghost}},
                    "template": {
                        "metadata": {"labels": {LABEL: ghost}},
                        "spec": {"containers": [{"name": "c", "image": "i"}]},
                    },
                },
            },
        )
        cluster.label_node("node-z", ghost)
        await cluster.start_controller()
        await eventually(lambda: cluster.list(*RCT) == [] and cluster.list("apps", "daemonsets") == [])
        await eventually(
            lambda: LABEL not in cluster.get("", "nodes", "", "node-z")["metadata"].get("labels", {})
        )


async def test_a_failure_retrying_cannot_fix_is_reported_on_the_domain(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller(gates="HostManagedIMEX=true")
        cd = cluster.create_domain("cd1", template="Not_A_Valid_Name")
        event = await eventually(
            lambda: next(
                (
                    e
                    for e in cluster.list("", "events", USER_NAMESPACE)
                    if e.get("reason") == "ReconcileFailed"
                ),
                None,
            )
        )
        assert event["involvedObject"]["uid"] == cd["metadata"]["uid"]
        assert "Not_A_Valid_Name" in event["message"]


async def test_the_sqlite_event_log_survives_a_restart_without_duplicates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal, "SNAPSHOT_EVERY", 10)
    db = tmp_path / "controller.db"
    async with Cluster(tmp_path) as cluster:
        task, _ = await cluster.start_controller(db_path=str(db))
        uid = cluster.create_domain("cd1", num_nodes=1)["metadata"]["uid"]
        cluster.run_daemon(uid, "node-a", "10.0.0.1", "c.1", ready=True)
        await eventually(lambda: (cluster.domain("cd1") or {}).get("status", {}).get("status") == "Ready")
        await cluster.stop_controller(task)
        _, restarted = await cluster.start_controller(db_path=str(db))
        assert restarted.journal.replayed >= restarted.journal.from_snapshot > 0  # snapshot, then the tail
        state = restarted.view.domain(uid)
        assert state.cd is not None and state.cd.status.get("status") == "Ready"
        assert [pod.node_name for _, pod in state.daemon_pods()] == ["node-a"]

        async def history_rows() -> int:
            reader = await SqliteEventStore.open(db, read_only=True)
            try:
                rows = await reader.query("SELECT count(*) FROM domain_history WHERE domain_uid = ?", (uid,))
            finally:
                await reader.close()
            return int(rows[0][0])

        assert await eventually_async(history_rows) > 0  # `cdctl sql` sees what the controller did
        cluster.delete_domain("cd1")
        await eventually(lambda: cluster.domain("cd1") is None)
        await restarted.queue.wait_idle()  # the teardown's last event is written after the domain is gone

    log = await SqliteEventStore.open(db, read_only=True)
    try:
        events = [decode(e) for e in await log.read_stream(f"domain/{uid}")]
    finally:
        await log.close()
    observed = [
        (e.uid, e.resource_version, e.change)
        for e in events
        if isinstance(e, DomainObjectObserved | ComputeDomainObserved)
    ]
    assert len(observed) == len(set(observed))
    kinds = {e.kind for e in events if isinstance(e, DomainObjectObserved)}
    assert {"Pod", "DaemonSet", "ResourceClaimTemplate", "ComputeDomainClique"} <= kinds
    assert sum(isinstance(e, ComputeDomainTornDown) for e in events) == 1
