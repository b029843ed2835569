"""`cdctl sim rack --rack-domains`: the rack's real controller process creates one domain per rack, each
rack's job runs on it with channel 0 on every node, and the domain goes when the rack leaves."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from cdctl.cli.sim import sim
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.rackcommand import DOMAIN_NAMESPACE, rack_domain_plans
from cdctl.sim.rack.scenario import run_scenario
from cdctl.sim.rack.settings import HOST_MANAGED, RackSettings
from cdctl.store.sqlite import SqliteEventStore

pytestmark = pytest.mark.integration
NODES = 2
RACKS = 2


@pytest.fixture
def work_dir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="cdrd-", dir="/tmp"))  # unix socket paths stay short
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def test_the_rack_command_has_the_option() -> None:
    result = CliRunner().invoke(sim, ["rack", "--help"])
    assert result.exit_code == 0 and "--rack-domains" in result.output


async def test_each_rack_gets_its_domain_its_job_runs_on_it_and_it_goes_when_the_rack_leaves(
    work_dir: Path,
) -> None:
    plans = rack_domain_plans(NODES, RACKS)
    assert len({plan.name for plan in plans}) == RACKS
    assert all(plan.template == f"imex-channel-{plan.name}" for plan in plans)
    settings = RackSettings(
        work_dir,
        racks=RACKS,
        nodes_per_rack=NODES,
        mode=HOST_MANAGED,
        rack_domains_namespace=DOMAIN_NAMESPACE,
    )
    async with Rack(settings) as rack:
        assert [plan.rack for plan in plans] == [rack.topology.rack(i)[0].clique_id for i in range(RACKS)]
        report = await run_scenario(rack, plans)
        assert report.problems == []
        assert report.ok
        assert sorted(report.domain_uids) == sorted(plan.name for plan in plans)
    store = await SqliteEventStore.open(rack.controller_db)
    try:
        decisions = [(e.stream, e.type) for e in await store.read_all() if e.stream.startswith("rack/")]
    finally:
        await store.close()
    for plan in plans:
        assert [kind for stream, kind in decisions if stream == f"rack/{plan.name}"] == [
            "RackDomainCreated",
            "RackDomainDeleted",
        ]
