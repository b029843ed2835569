"""Chaos: two racks form, run and tear down their domains while random components are killed with -9.

Two racks of three nodes, two controller replicas (leader election), one domain and one 3-worker job per
rack; a seeded monkey (cdctl.sim.rack.chaos) kills controller replicas, kubelet plugins, IMEX daemon
containers and simulated kubelets at random moments, four while the domains form and run and the rest during
teardown, and a Restarter brings each killed container back as the kubelet would. Before teardown the
domains must have converged again; afterwards the invariants hold: every worker ran with its channel, no
claim was prepared for two allocations nor a device held twice, no prepare the kubelets saw is missing from
the nodes' logs, every event log verifies, and nothing leaked. Bounded: about half a minute on 2 cores.
bench/chaos.py runs the longer version.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from cdctl.sim.rack.chaos import ChaosPlan, Monkey, Witness, invariants, settle, tolerated
from cdctl.sim.rack.checks import worker_states
from cdctl.sim.rack.faults import Restarter
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.observe import domain_shape, unsettled
from cdctl.sim.rack.scenario import DomainPlan, run_scenario
from cdctl.sim.rack.settings import RackSettings
from tests.integration.support import until

pytestmark = pytest.mark.integration
SEED = 20261125
PLANS = [
    DomainPlan("left", "team-a", workers=3, num_nodes=0),
    DomainPlan("right", "team-b", workers=3, num_nodes=0),
]
KILLS, BEFORE_TEARDOWN = 6, 4


def converged(rack: Rack, plans: list[DomainPlan]) -> Callable[[], str | None]:
    def missing() -> str | None:
        for plan in plans:
            workers = [w for job in plan.job_names for w in worker_states(rack, plan.namespace, job)]
            running = {w.node for w in workers if w.done}
            if len(running) != plan.nodes:
                return f"{plan.name}: {len(running)} of {plan.nodes} workers Running with channel0"
            if (why := unsettled(domain_shape(rack, plan.namespace, plan.name), running)) is not None:
                return f"{plan.name}: {why}"
        return None

    return missing


async def test_random_kills_while_two_racks_form_run_and_tear_down_leave_the_invariants_whole(
    work_dir: Path,
) -> None:
    settings = RackSettings(work_dir, racks=2, nodes_per_rack=3, probe_period_s=0.5, controller_replicas=2)
    async with Rack(settings) as rack:
        monkey = Monkey(rack, ChaosPlan(seed=SEED, kills=KILLS))

        async def run_under_chaos(rack: Rack) -> None:
            await until(
                "the monkey's first kills", lambda: None if len(monkey.kills) >= BEFORE_TEARDOWN else "", 60
            )
            await until("the domains converge after the kills", converged(rack, PLANS), 90)

        async with Restarter(rack, delay_s=0.3) as restarter:
            with Witness(rack) as witness:
                chaos = asyncio.create_task(monkey.run())
                report = await run_scenario(rack, PLANS, while_formed=run_under_chaos, timeout_s=120)
                monkey.stop()
                await chaos
                down = await settle(rack)
        problems = tolerated(report.problems, monkey) + down + await invariants(rack, witness)
        print("\nkills:", *monkey.kills, sep="\n  ")
        print(f"restarts: {restarter.restarts}; workers that ran: {len(witness.ran)}")
        assert problems == []
        assert report.formation_s is not None and report.teardown_s is not None
        assert len(monkey.kills) >= BEFORE_TEARDOWN
        assert len(witness.ran) >= sum(p.nodes for p in PLANS)
