"""Continuous export on the simulated rack: the controller and every kubelet plugin, started with
`--otlp-endpoint` (the chart's eventLog.otlpEndpoint), send each event they commit to a real OTLP/HTTP
receiver, with their source and the event's position and hash. A plugin killed with `kill -9` has already
sent what it committed (its last minutes are outside the node); at the end every event of every log is at
the receiver, under the right source."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from cdctl.sim.rack.faults import kill_plugin
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.scenario import DomainPlan, run_scenario
from cdctl.sim.rack.settings import RackSettings
from tests.integration.support import beyond_faults, until
from tests.store.otlpreceiver import Receiver, receiver

__all__ = ["receiver"]
pytestmark = pytest.mark.integration
NODES = 2


def logged(path: Path) -> set[tuple[int, str]]:
    """(position, hash) of every event in a component's log."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {(int(p), str(h)) for p, h in db.execute("SELECT position, hash FROM events")}
    finally:
        db.close()


def received(got: Receiver, component: str, node: str = "") -> set[tuple[int, str]]:
    return {
        (int(a["cdctl.event.position"]), str(a["cdctl.event.hash"]))
        for resource, a, _ in got.records
        if a["cdctl.component"] == component
        and a["cdctl.node"] == node
        and resource["service.name"] == f"cdctl-{component}"
    }


async def test_every_component_exports_what_it_commits(work_dir: Path, receiver: Receiver) -> None:
    settings = RackSettings(work_dir, nodes_per_rack=NODES, probe_period_s=0.5, otlp_endpoint=receiver.url)
    killed: dict[str, set[tuple[int, str]]] = {}

    async def while_formed(rack: Rack) -> None:
        node = sorted(rack.plugins)[0]
        before = logged(rack.plugin_db(node))

        def unsent() -> str | None:
            missing = before - received(receiver, "kubelet-plugin", node)
            return f"{len(missing)} events not yet at the receiver" if missing else None

        await until("the plugin's events reach the receiver", unsent)
        await kill_plugin(rack, node)
        await asyncio.wait_for(rack.plugins[node].process.wait(), 60)
        killed[node] = logged(rack.plugin_db(node)) - before  # committed in the moment before the kill
        await rack.launch_plugin(node)
        await rack.wait_until_registered({node})

    async with Rack(settings) as rack:
        report = await run_scenario(
            rack, [DomainPlan("nvl", "team-a", workers=NODES)], while_formed=while_formed
        )
        assert beyond_faults(report.problems, set(killed)) == [] and report.teardown_s is not None
        plugin_dbs = {node: rack.plugin_db(node) for node in rack.plugins}
        controller_db = rack.controller_db
    # The components have stopped (SIGTERM), each flushing its queue.
    controller = logged(controller_db)
    assert controller and controller <= received(receiver, "controller")
    for node, db in plugin_dbs.items():
        events = logged(db)
        missing = events - received(receiver, "kubelet-plugin", node)
        assert len(events) > 5 and missing <= killed.get(node, set()), (node, sorted(missing))
    pods = {a["cdctl.pod"] for _, a, _ in receiver.records}
    assert {"cdctl-controller-0", *(f"cdctl-kubelet-plugin-{n}" for n in plugin_dbs)} <= pods
