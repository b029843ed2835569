"""Leader election on a Lease: one leader among two, takeover after the leader dies, exit on a lost lease."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from cdctl.controller.leader import LeadershipLost
from tests.controller.harness import DRIVER_NAMESPACE, Cluster, eventually

LEASE = {
    "enabled": True,
    "lease_lock_namespace": DRIVER_NAMESPACE,
    "lease_lock_name": "cdctl-controller",
    # Not 1 s: on a loaded 2-core machine a leader can miss a 0.6 s renewal and its standby rightly takes
    # over, which these tests do not mean to stage.
    "lease_duration_s": 3.0,
    "renew_deadline_s": 2.0,
    "retry_period_s": 0.1,
}


def holder(cluster: Cluster) -> str:
    lease = cluster.get("coordination.k8s.io", "leases", DRIVER_NAMESPACE, "cdctl-controller")
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


async def test_one_leader_and_a_standby_that_takes_over_when_the_leader_dies(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        first_task, first = await cluster.start_controller(
            wait_synced=False, pod_name="controller-a", leader_election=LEASE
        )
        await asyncio.wait_for(first.synced.wait(), 30)
        second_task, second = await cluster.start_controller(
            wait_synced=False, pod_name="controller-b", leader_election=LEASE
        )
        assert first.elector is not None and second.elector is not None
        assert holder(cluster) == first.elector.identity
        assert first.elector.identity.startswith("controller-a-")
        uid = cluster.create_domain("cd1")["metadata"]["uid"]
        await eventually(
            lambda: cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, f"computedomain-daemon-{uid}")
        )
        # A warm standby: it follows the cluster (its view holds the domain) but does not reconcile.
        await asyncio.wait_for(second.synced.wait(), 30)
        assert not second.elector.is_leader and not second.leading
        await eventually(lambda: second.view.domain(uid).cd is not None)

        # The leader dies without releasing the lease (a force-deleted pod).
        first.elector.is_leader = False  # nothing left to release
        first_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first_task
        await eventually(lambda: second.leading)
        assert holder(cluster) == second.elector.identity
        uid2 = cluster.create_domain("cd2")["metadata"]["uid"]
        await eventually(
            lambda: cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, f"computedomain-daemon-{uid2}")
        )
        lease = cluster.get("coordination.k8s.io", "leases", DRIVER_NAMESPACE, "cdctl-controller")
        assert lease["spec"]["leaseTransitions"] == 1

        # A clean stop releases the lease at once.
        await cluster.stop_controller(second_task)
        assert holder(cluster) == ""


async def test_a_leader_that_loses_its_lease_stops(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        task, manager = await cluster.start_controller(pod_name="controller-a", leader_election=LEASE)
        await eventually(lambda: manager.leading)  # synced is not leading: a standby syncs too
        lease = cluster.get("coordination.k8s.io", "leases", DRIVER_NAMESPACE, "cdctl-controller")
        lease["spec"]["holderIdentity"] = "intruder"
        lease["spec"]["leaseDurationSeconds"] = 3600
        cluster.server.store.update(
            cluster.type_of("coordination.k8s.io", "leases"), DRIVER_NAMESPACE, "cdctl-controller", lease
        )
        with pytest.raises(LeadershipLost):
            await asyncio.wait_for(task, 30)
        assert manager.elector is not None and not manager.elector.is_leader
        assert holder(cluster) == "intruder"
