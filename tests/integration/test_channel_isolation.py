"""IMEX isolation proven from inside the workers, on the simulated rack with the real components.

The workers run as containers (`imex-memcheck worker`, cdctl.sim.node.fakeimexmem) and import each other's
buffers (cdctl.sim.rack.isolation). Under `domain` isolation, two domains on disjoint halves of a rack both
hold channel 0, yet a worker cannot import the other domain's buffer, since the two are separate IMEX
domains; within a domain it can.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cdctl.sim.rack.checks import worker_states
from cdctl.sim.rack.isolation import DomainWorkers, IsolationReport, prove_isolation
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.scenario import DomainPlan, run_scenario
from cdctl.sim.rack.settings import RackSettings

pytestmark = pytest.mark.integration


async def test_domain_isolation_workers_import_within_their_domain_only(work_dir: Path) -> None:
    settings = RackSettings(work_dir, nodes_per_rack=4, probe_period_s=0.5, worker_containers=True)
    plans = [DomainPlan("left", "team-a", workers=2), DomainPlan("right", "team-b", workers=2)]
    proofs: list[IsolationReport] = []

    async def prove(rack: Rack) -> None:
        domains = [
            DomainWorkers(p.name, p.namespace, "", worker_states(rack, p.namespace, p.job_names[0]))
            for p in plans
        ]
        proofs.append(await prove_isolation(rack, domains))

    async with Rack(settings) as rack:
        report = await run_scenario(rack, plans, while_formed=prove, timeout_s=60)
    assert report.problems == []
    (proof,) = proofs
    assert proof.problems == []
    held = {domain: sorted(set().union(*by_clique.values())) for domain, by_clique in proof.held.items()}
    assert held == {"left": [0], "right": [0]}
    assert proof.same_domain_imports == 4 and proof.cross_domain_imports == 4
