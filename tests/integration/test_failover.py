"""The Go driver's failover cases (its bats suite, test_cd_failover and test_cd_leader_election), and the
controller and plugin dying at the worst moment, on small racks with the real components.

Each runs the seeds' scenario (form, fault, converge, tear down) and passes only if the workers end up
Running with their channel again and nothing is left behind (`checks.leftovers`, asserted by the scenario's
teardown), with every component that died restarted as the kubelet would (`faults.Restarter`):
- a worker pod force-deleted (grace period 0: gone from the API at once), then another deleted gracefully
  (Terminating until its kubelet has stopped its container and unprepared its claim);
- every IMEX daemon pod force-deleted at once (`-l resource.nvidia.com/computeDomain --force`);
- the controller pod deleted mid-formation (its StatefulSet brings it back, on its event log or, with the
  volume lost, on an empty one);
- the kubelet plugin killed while a channel Prepare waits for its daemon;
- the leader of two controller replicas force-deleted mid-formation: another replica takes the Lease.
Two or three nodes each; seconds apiece.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from cdctl.domain.computedomains import LABEL_COMPUTE_DOMAIN
from cdctl.sim.rack.checks import list_pods, worker_states
from cdctl.sim.rack.faults import Restarter, delete_controller_pod, kill_plugin
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.observe import domain_shape, unsettled
from cdctl.sim.rack.scenario import DomainPlan, ScenarioReport, run_scenario
from cdctl.sim.rack.settings import RackSettings
from tests.integration.support import at_mid_formation, beyond_faults, leader, until

pytestmark = pytest.mark.integration
NAMESPACE, DOMAIN, JOB = "team-a", "nvl", "nvl-job"
Fault = Callable[[Rack], Awaitable[None]]


def _settings(work_dir: Path, nodes: int, replicas: int = 1) -> RackSettings:
    return RackSettings(work_dir, nodes_per_rack=nodes, probe_period_s=0.5, controller_replicas=replicas)


async def _scenario(
    rack: Rack, workers: int, *, while_formed: Fault | None = None, while_forming: Fault | None = None
) -> tuple[ScenarioReport, list[str]]:
    """Run the scenario with a Restarter; `while_forming` runs beside the formation (it waits for its own
    moment). Returns the report and the restarts made."""
    plan = DomainPlan(DOMAIN, NAMESPACE, workers=workers, num_nodes=0)
    async with Restarter(rack, delay_s=0.3) as restarter:
        fault = asyncio.create_task(while_forming(rack)) if while_forming is not None else None
        report = await run_scenario(rack, [plan], while_formed=while_formed, timeout_s=60)
        if fault is not None:
            await fault
    return report, restarter.restarts


def _workers(rack: Rack) -> dict[str, str]:
    """pod uid -> node of the workers Running with channel0."""
    return {w.uid: w.node for w in worker_states(rack, NAMESPACE, JOB) if w.done}


def _converged(rack: Rack, workers: int) -> Callable[[], str | None]:
    def missing() -> str | None:
        running = _workers(rack)
        if len(running) != workers:
            return f"{len(running)} of {workers} workers Running with channel0"
        return unsettled(domain_shape(rack, NAMESPACE, DOMAIN), set(running.values()))

    return missing


def _delete_worker(index: int) -> Fault:
    async def fault(rack: Rack) -> None:
        before = _workers(rack)
        pod = next(p for p in list_pods(rack, NAMESPACE) if p["metadata"]["name"] == f"{JOB}-{index}")
        grace = 0 if index == 0 else None  # `kubectl delete --force --grace-period=0`, or a plain delete
        rack.store.delete(
            rack.store.type_of("", "pods"), NAMESPACE, pod["metadata"]["name"], grace_period_s=grace
        )
        await until("the job's replacement worker runs in the domain", _converged(rack, len(before)))
        after = _workers(rack)
        assert pod["metadata"]["uid"] not in after
        kept = {uid: node for uid, node in before.items() if uid != pod["metadata"]["uid"]}
        assert {uid: after[uid] for uid in kept} == kept, "the other workers were not touched"

    return fault


@pytest.mark.parametrize("index", [0, 1], ids=["force-delete worker 0", "delete worker 1"])
async def test_a_deleted_worker_is_replaced_and_rejoins_the_domain(work_dir: Path, index: int) -> None:
    async with Rack(_settings(work_dir, 2)) as rack:
        report, restarts = await _scenario(rack, 2, while_formed=_delete_worker(index))
        assert report.problems == [] and report.ok
        assert restarts == []


def _daemon_pods(rack: Rack) -> list[dict[str, Any]]:
    namespace = rack.settings.driver_namespace
    return [p for p in list_pods(rack, namespace) if LABEL_COMPUTE_DOMAIN in p["metadata"]["labels"]]


async def _delete_every_daemon(rack: Rack) -> None:
    before = _workers(rack)
    pods = rack.store.type_of("", "pods")
    daemons = _daemon_pods(rack)
    assert len(daemons) == len(before)
    for pod in daemons:
        rack.store.delete(pods, rack.settings.driver_namespace, pod["metadata"]["name"], grace_period_s=0)
    old = {p["metadata"]["uid"] for p in daemons}

    def not_reformed() -> str | None:
        fresh = _daemon_pods(rack)
        if {p["metadata"]["uid"] for p in fresh} & old or len(fresh) != len(old):
            return f"{len(fresh)} daemon pods, old ones among them"
        return _converged(rack, len(before))()

    await until("new daemons re-form the domain", not_reformed)
    assert _workers(rack) == before, "the workers ran on while their daemons were replaced"


async def test_force_deleting_every_imex_daemon_reforms_the_domain(work_dir: Path) -> None:
    async with Rack(_settings(work_dir, 2)) as rack:
        report, restarts = await _scenario(rack, 2, while_formed=_delete_every_daemon)
        assert report.problems == [] and report.ok
        assert restarts == []


async def _at_mid_formation(rack: Rack) -> None:
    await at_mid_formation(rack, lambda: bool(_workers(rack)))


@pytest.mark.parametrize("keep_log", [True, False], ids=["on its volume", "log lost"])
async def test_the_controller_pod_deleted_mid_formation_comes_back_and_formation_completes(
    work_dir: Path, keep_log: bool
) -> None:
    """The StatefulSet's pod comes back on its event log; without it (persistence off, or the volume lost)
    the controller starts from an empty log and rebuilds what it needs from the cluster."""

    async def fault(rack: Rack) -> None:
        await _at_mid_formation(rack)
        await delete_controller_pod(rack, keep_log=keep_log)

    async with Rack(_settings(work_dir, 2)) as rack:
        report, restarts = await _scenario(rack, 2, while_forming=fault)
        assert report.problems == [] and report.ok
        assert restarts == []
        assert len(rack.controller_dbs()) == (1 if keep_log else 2)


async def test_a_plugin_killed_during_prepare_restarts_and_the_claim_is_prepared(work_dir: Path) -> None:
    killed: list[str] = []

    async def fault(rack: Rack) -> None:
        def waiting_prepare() -> str | None:
            workers = {p["metadata"]["uid"] for p in list_pods(rack, NAMESPACE)}
            for name, kubelet in sorted(rack.cluster.kubelets.items()):
                # A worker's claims are known to the kubelet before its NodePrepareResources call, and the
                # pod runs once the call answered: in between, the Prepare waits (for the node's daemon).
                if any(uid in workers and uid not in kubelet.running for uid in kubelet.claim_refs):
                    killed.append(name)
                    return None
            return "no Prepare waiting yet"

        await until("a channel Prepare waits for its daemon", waiting_prepare, timeout_s=60)
        await kill_plugin(rack, killed[0])

    async with Rack(_settings(work_dir, 3)) as rack:
        report, restarts = await _scenario(rack, 3, while_forming=fault)
        assert beyond_faults(report.problems, set(killed)) == []
        assert report.formation_s is not None and report.teardown_s is not None
        assert restarts == [f"plugin {killed[0]} (exit -9)"]


async def test_a_new_leader_takes_over_when_the_leader_is_force_deleted(work_dir: Path) -> None:
    """As the bats case checks: a new holder of the Lease (the standby, or the deleted leader's replacement
    pod if it asks first: both wait out the lease duration), and the domain forms."""
    took_over: list[tuple[float, str]] = []

    async def fault(rack: Rack) -> None:
        await _at_mid_formation(rack)
        holder = leader(rack)
        replica = next(r for r in rack.controllers if holder.startswith(rack.controller_pod(r) + "-"))
        began = time.monotonic()
        await delete_controller_pod(rack, replica)
        await until(
            "another replica takes the Lease", lambda: None if leader(rack) not in ("", holder) else holder
        )
        took_over.append((time.monotonic() - began, leader(rack)))

    async with Rack(_settings(work_dir, 2, replicas=2)) as rack:
        report, restarts = await _scenario(rack, 2, while_forming=fault)
        assert report.problems == [] and report.ok
        assert restarts == []
    seconds, holder = took_over[0]
    print(f"\n{holder.rsplit('-', 5)[0]} took the Lease {seconds:.1f} s after the leader's pod was deleted")
