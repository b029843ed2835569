"""A node lost under a running domain and its return, on a 4-node rack with the real components.

The node loses power mid-job: nothing more is heard from its kubelet, so the node lifecycle controller sets
it Ready=Unknown and its pods not Ready; the domain reports the loss (its daemon's entry and the domain go
NotReady, a NodeNotReady Warning on the ComputeDomain) while the other workers run on. Then the node is
deleted: the pod garbage collector removes its pods, its daemon leaves the clique, the domain is Ready again
with three nodes, and the lost worker's replacement waits (no node is free). The node boots again with a new
boot id: its plugin invalidates the claims it held before, the kubelet registers the Node anew, the
replacement lands there and joins the domain at the freed index. Short node timings (2 s grace, 1 s pod GC
quarantine) keep it to seconds; a real cluster takes 40 s and 40 s.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from cdctl.sim.controllers.nodelifecycle import node_condition
from cdctl.sim.rack.checks import list_pods, worker_states
from cdctl.sim.rack.cluster import NodeTimings
from cdctl.sim.rack.faults import power_off, power_on
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.observe import domain_shape, imex_starts, unsettled
from cdctl.sim.rack.scenario import DomainPlan, run_scenario
from cdctl.sim.rack.settings import RackSettings
from tests.integration.support import domain_uid, until

pytestmark = pytest.mark.integration
NODES = 4
NAMESPACE, DOMAIN, JOB = "team-a", "nvl", "nvl-job"
FAST = NodeTimings(
    lease_renew_s=0.3, node_monitor_period_s=0.3, node_monitor_grace_s=2.0, pod_gc_quarantine_s=1.0,
    dra_reconcile_s=3600.0,
)  # fmt: skip


def _settings(work_dir: Path) -> RackSettings:
    return RackSettings(work_dir, nodes_per_rack=NODES, probe_period_s=0.5, node_timings=FAST)


def _node(rack: Rack, name: str) -> dict[str, Any] | None:
    nodes, _ = rack.store.list_objects(rack.store.type_of("", "nodes"), copies=False)
    return next((n for n in nodes if n["metadata"]["name"] == name), None)


def _events(rack: Rack, reason: str) -> list[dict[str, Any]]:
    events, _ = rack.store.list_objects(rack.store.type_of("", "events"), NAMESPACE, copies=False)
    return [e for e in events if e.get("reason") == reason]


def _invalidated(rack: Rack, node: str) -> dict[str, str]:
    """claim uid -> reason of every ClaimInvalidated in the node's plugin log."""
    connection = sqlite3.connect(f"file:{rack.plugin_db(node)}?mode=ro", uri=True)
    try:
        rows = connection.execute(
            "SELECT stream, data FROM events WHERE type = 'ClaimInvalidated'"
        ).fetchall()
    finally:
        connection.close()
    return {stream.removeprefix("claim/"): json.loads(data)["reason"] for stream, data in rows}


def _running_workers(rack: Rack) -> dict[str, str]:
    """worker pod uid -> node, of the workers Running with channel0."""
    return {w.uid: w.node for w in worker_states(rack, NAMESPACE, JOB) if w.done}


async def _lose_a_node_and_bring_it_back(rack: Rack) -> None:
    uid = domain_uid(rack, NAMESPACE, DOMAIN)
    before = domain_shape(rack, NAMESPACE, DOMAIN)
    workers = _running_workers(rack)
    lost = sorted(rack.topology.nodes)[1]
    others = {pod: node for pod, node in workers.items() if node != lost}
    kubelet = rack.cluster.kubelets[lost]
    old_claims = {ref.uid for refs in kubelet.claim_refs.values() for by in refs.values() for ref in by}
    assert len(old_claims) == 2, "the lost node held a channel claim and a daemon claim"

    await power_off(rack, lost)

    def not_reported() -> str | None:
        node = _node(rack, lost)
        shape = domain_shape(rack, NAMESPACE, DOMAIN)
        if node is None or (node_condition(node) or {}).get("status") != "Unknown":
            return "the node is not Ready=Unknown yet"
        if shape.status_nodes.get(lost) != "NotReady" or shape.status != "NotReady":
            return f"status {shape.status} {shape.status_nodes}"
        return None if _events(rack, "NodeNotReady") else "no NodeNotReady Event"

    await until("the domain reports the lost node", not_reported)
    event = _events(rack, "NodeNotReady")[0]
    assert event["involvedObject"]["uid"] == uid and lost in event["message"]
    assert f"index {before.indices[lost]}" in event["message"]
    assert {p: n for p, n in _running_workers(rack).items() if n != lost} == others, "the others run on"

    rack.store.delete(rack.store.type_of("", "nodes"), "", lost)  # the node is removed from the cluster

    def not_left() -> str | None:
        shape = domain_shape(rack, NAMESPACE, DOMAIN)
        if lost in shape.indices or lost in shape.status_nodes or lost in shape.daemons:
            return f"{lost} still in the domain: {shape.indices} {shape.status_nodes}"
        if shape.status != "Ready":
            return f"domain {shape.status}"
        return None

    await until("the lost node's daemon leaves the clique", not_left)
    assert any(name.startswith(f"{NAMESPACE}/{JOB}-") for name in rack.cluster.pod_gc.collected)
    left = domain_shape(rack, NAMESPACE, DOMAIN)
    assert left.indices == {n: i for n, i in before.indices.items() if n != lost}
    assert _running_workers(rack) == others, "the other workers kept running, untouched"
    assert all(imex_starts(rack, before.daemons[n]) == 1 for n in left.indices), "no other IMEX restarted"
    pending = [w for w in worker_states(rack, NAMESPACE, JOB) if w.uid not in workers]
    assert len(pending) == 1 and not pending[0].node, "the replacement waits for a node"

    boot_id = await power_on(rack, lost)

    def not_rejoined() -> str | None:
        running = _running_workers(rack)
        if len(running) != NODES:
            return f"workers {sorted(running.values())}"
        return unsettled(domain_shape(rack, NAMESPACE, DOMAIN), set(before.indices))

    await until("the replacement joins the domain on the returned node", not_rejoined)
    back = domain_shape(rack, NAMESPACE, DOMAIN)
    assert back.indices == before.indices, "the returned node takes the freed index"
    assert _running_workers(rack)[pending[0].uid] == lost
    assert imex_starts(rack, back.daemons[lost]) == 1
    invalidated = _invalidated(rack, lost)
    assert set(invalidated) == old_claims, "the claims of the old boot are invalidated"
    assert all(boot_id in reason for reason in invalidated.values())
    # The kubelet's DRA reconcile comes round (every 60 s): it unprepares the claims of the pods that were
    # deleted while the node was down, which the plugin no longer holds.
    await kubelet.reconcile_dra()
    assert not old_claims & {
        ref.uid for refs in kubelet.claim_refs.values() for by in refs.values() for ref in by
    }
    await asyncio.sleep(0)
    assert len(list_pods(rack, NAMESPACE)) == NODES


async def test_a_lost_node_leaves_the_domain_and_rejoins_it_after_a_reboot(work_dir: Path) -> None:
    async with Rack(_settings(work_dir)) as rack:
        plan = DomainPlan(DOMAIN, NAMESPACE, workers=NODES, num_nodes=0)
        report = await run_scenario(rack, [plan], while_formed=_lose_a_node_and_bring_it_back, timeout_s=60)
        assert report.problems == []
        assert report.ok


async def _reboot_under_the_domain_then_reconcile(rack: Rack) -> None:
    """The node reboots with its pods deleted meanwhile (as the pod GC would), the replacement joins the
    domain there, and only then does the kubelet's DRA reconcile unprepare the claims of the old boot."""
    uid = domain_uid(rack, NAMESPACE, DOMAIN)
    lost = sorted(rack.topology.nodes)[1]
    kubelet = rack.cluster.kubelets[lost]
    await power_off(rack, lost)
    pods = rack.store.type_of("", "pods")
    for namespace in (NAMESPACE, rack.settings.driver_namespace):
        for pod in list_pods(rack, namespace):
            if pod["spec"].get("nodeName") == lost:
                rack.store.delete(pods, namespace, pod["metadata"]["name"])
    await power_on(rack, lost)

    def not_rejoined() -> str | None:
        running = _running_workers(rack)
        if len(running) != NODES:
            return f"{len(running)} workers Running"
        # Each node's own daemon Ready in the clique: until the controller has seen the old daemon pod go,
        # the clique can still list the old daemon there.
        return unsettled(domain_shape(rack, NAMESPACE, DOMAIN), set(running.values()))

    await until("the replacement joins the domain on the rebooted node", not_rejoined)
    await kubelet.reconcile_dra()
    for _ in range(30):  # 3 s: the label, the daemon and the node's place in the domain must stay
        shape = domain_shape(rack, NAMESPACE, DOMAIN)
        assert lost in shape.labelled, f"the label of domain {uid} in use on {lost} was removed"
        assert shape.status_nodes.get(lost) == "Ready", f"{lost} left the domain: {shape.status_nodes}"
        await asyncio.sleep(0.1)


async def test_unpreparing_claims_of_an_old_boot_keeps_the_label_of_the_domain_in_use(work_dir: Path) -> None:
    async with Rack(_settings(work_dir)) as rack:
        plan = DomainPlan(DOMAIN, NAMESPACE, workers=NODES, num_nodes=0)
        report = await run_scenario(
            rack, [plan], while_formed=_reboot_under_the_domain_then_reconcile, timeout_s=60
        )
        assert report.problems == []
