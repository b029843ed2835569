"""A warm standby: it follows the cluster into its own log, writes nothing to the API until it leads, records
its takeover before its first reconcile, and never reconciles from a view whose watches have not listed.

Both replicas connect with tokens bound to their pods under the chart's RBAC and admission policies, and the
simulated API server's audit log says what each pod asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from prometheus_client import generate_latest
from structlog.testing import capture_logs

from cdctl.controller.manager import ControllerManager
from cdctl.domain.events import RecordedEvent
from cdctl.projections.explainload import load_explanations
from cdctl.projections.timeline import EventSource
from cdctl.sim.apiserver.identity import service_account_token
from cdctl.store.sqlite import SqliteEventStore
from tests.chart.conftest import chart_policies, chart_rbac
from tests.controller.harness import DRIVER_NAMESPACE, Cluster, eventually, eventually_async

LEASE_NAME = "cdctl-controller"
LEASE = {
    "enabled": True,
    "lease_lock_namespace": DRIVER_NAMESPACE,
    "lease_lock_name": LEASE_NAME,
    # Not 1 s: on a loaded 2-core machine a leader can miss a 0.6 s renewal and its standby rightly takes
    # over, which these tests do not mean to stage.
    "lease_duration_s": 3.0,
    "renew_deadline_s": 2.0,
    "retry_period_s": 0.1,
}
ELECTED = {"controller": {"leaderElection": {"enabled": True}}}


def as_pod(cluster: Cluster, pod: str) -> str:
    """A kubeconfig whose token is the chart's controller service account bound to `pod`."""
    token = service_account_token(DRIVER_NAMESPACE, "cdctl-controller", pod=pod, node="cp")
    return str(cluster.server.write_kubeconfig(cluster.tmp_path / f"{pod}.kubeconfig", token))


def enforce_chart(cluster: Cluster) -> None:
    cluster.server.rbac.load(chart_rbac(DRIVER_NAMESPACE, ELECTED))
    cluster.server.load_policies(chart_policies(DRIVER_NAMESPACE, ELECTED))


async def start(cluster: Cluster, pod: str, db: Path) -> tuple[asyncio.Task[None], ControllerManager]:
    return await cluster.start_controller(
        wait_synced=False,
        pod_name=pod,
        kubeconfig=as_pod(cluster, pod),
        db_path=str(db),
        leader_election=LEASE,
    )


async def synced_or_failed(
    task: asyncio.Task[None], manager: ControllerManager, timeout_s: float = 60
) -> None:
    """Wait for the manager's view to sync, but not forever: a controller task that died (its follow ended
    by an error) never syncs, and nothing else would report it."""
    synced = asyncio.create_task(manager.synced.wait())
    done, _ = await asyncio.wait({synced, task}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    synced.cancel()
    if task in done:
        raise AssertionError(f"the controller ended before its view synced: {task.exception()!r}")
    assert done, f"the view did not sync within {timeout_s:g} s"


async def read_log(db: Path) -> list[RecordedEvent]:
    reader = await SqliteEventStore.open(db, read_only=True)
    try:
        return await reader.read_all()
    finally:
        await reader.close()


def first(events: list[RecordedEvent], type_: str, **data: object) -> RecordedEvent:
    return next(e for e in events if e.type == type_ and all(e.data.get(k) == v for k, v in data.items()))


async def test_a_standby_records_what_it_sees_writes_nothing_and_takes_over_before_reconciling(
    tmp_path: Path,
) -> None:
    async with Cluster(tmp_path) as cluster:
        enforce_chart(cluster)
        leader_task, leader = await start(cluster, "controller-a", tmp_path / "a.db")
        await eventually(lambda: leader.leading)
        standby_task, standby = await start(cluster, "controller-b", tmp_path / "b.db")
        await synced_or_failed(standby_task, standby)
        uid = cluster.create_domain("cd1")["metadata"]["uid"]
        daemon_set = f"computedomain-daemon-{uid}"
        await eventually(lambda: cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, daemon_set))
        # The standby follows: what the leader created is in the standby's own view and log.
        await eventually(lambda: standby.view.domain(uid).get("DaemonSet", DRIVER_NAMESPACE, daemon_set))
        assert standby.synced.is_set() and not standby.leading and standby.queue.depth == 0
        assert cluster.server.audit.writes(pod="controller-b") == []
        assert cluster.server.audit.select(pod="controller-b", resource="leases", verbs={"get"})
        # Only the leader reports the domains, so a sum over both replicas stays right.
        standby_metrics = generate_latest(standby.metrics.registry).decode()
        assert "cdctl_leader 0.0" in standby_metrics
        assert "nvidia_dra_compute_domain_info{" not in standby_metrics
        leader_metrics = generate_latest(leader.metrics.registry).decode()
        assert "cdctl_leader 1.0" in leader_metrics
        assert 'nvidia_dra_compute_domain_info{status="' in leader_metrics

        # The leader dies without releasing the Lease (kill -9: nothing runs after it).
        assert leader.elector is not None and standby.elector is not None
        leader.elector.is_leader = False
        leader_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await leader_task
        uid2 = cluster.create_domain("cd2")["metadata"]["uid"]  # created while nobody leads
        await eventually(lambda: standby.leading)
        await eventually(
            lambda: cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, f"computedomain-daemon-{uid2}")
        )
        writes = cluster.server.audit.writes(pod="controller-b")
        assert (writes[0].resource, writes[0].verb) == ("leases", "update")  # its first write won the Lease
        assert cluster.server.rbac.denials == [] and cluster.server.store.policies.denials == []

    events = await read_log(tmp_path / "b.db")
    acquired = first(events, "LeadershipAcquired")
    assert acquired.stream == f"lease/{DRIVER_NAMESPACE}/{LEASE_NAME}"
    assert acquired.data["identity"] == standby.elector.identity
    assert acquired.data["previous_holder"] == leader.elector.identity
    assert acquired.data["how"] == "expired" and acquired.data["lease_transitions"] == 1
    assert acquired.data["view_synced"] is True
    assert acquired.data["silent_s"] >= LEASE["lease_duration_s"]  # it waited the lease out
    # The standby's log: what it observed before leading, then the takeover, then its first actions.
    observed = first(events, "DomainObjectObserved", kind="DaemonSet", name=daemon_set)
    seen_cd2 = first(events, "ComputeDomainObserved", uid=uid2)
    assert observed.position < acquired.position and seen_cd2.position < acquired.position
    actions = [e for e in events if e.type == "DomainActionIntended"]
    assert actions and all(e.position > acquired.position for e in actions)
    assert any(e.stream == f"domain/{uid2}" and e.data["kind"] == "DaemonSet" for e in actions)
    # cdctl explain, from the standby's own log: cd2 waited for the failover, and says so.
    async with await SqliteEventStore.open(tmp_path / "b.db", read_only=True) as store:
        source = EventSource(lambda sql, params: store.query(sql, params), False, "b.db")
        [explained] = await load_explanations(source, f"domain/{uid2}")
    [failover] = [c for c in explained.chain if c.code == "controller-failover"]
    assert failover.evidence is not None and failover.evidence.position == acquired.position
    assert f"took the Lease from {leader.elector.identity} (expired" in failover.text


async def test_a_leader_whose_watches_have_not_listed_waits_for_them_before_its_first_reconcile(
    tmp_path: Path,
) -> None:
    async with Cluster(tmp_path) as cluster:
        enforce_chart(cluster)
        uid = cluster.create_domain("cd1")["metadata"]["uid"]
        cluster.server.faults.slow("/computedomains", 2.0)  # the ComputeDomain listing is slow to answer
        with capture_logs() as logs:
            task, manager = await start(cluster, "controller-a", tmp_path / "a.db")
            await eventually(lambda: manager.elector is not None and manager.elector.is_leader)
            assert not manager.synced.is_set() and not manager.leading  # the Lease is won, the view is not
            await synced_or_failed(task, manager)
            cluster.server.faults.heal()
            await eventually(lambda: manager.leading)
            await eventually(
                lambda: cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, f"computedomain-daemon-{uid}")
            )
        said = [entry["event"] for entry in logs]
        waiting = said.index("waiting for every watch to list once before the first reconcile")
        assert waiting < said.index("caches populated") < said.index("first reconcile")

    async def acted() -> list[RecordedEvent]:
        events = await read_log(tmp_path / "a.db")
        return events if any(e.type == "DomainActionIntended" for e in events) else []

    events = await eventually_async(acted)
    acquired = first(events, "LeadershipAcquired")
    assert acquired.data["view_synced"] is False and acquired.data["how"] == "created"
    observed = first(events, "ComputeDomainObserved", uid=uid)
    action = first(events, "DomainActionIntended")
    assert acquired.position < observed.position < action.position
