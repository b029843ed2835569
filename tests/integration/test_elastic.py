"""A running domain that changes shape, on a 4-node rack with the real controller, plugins and daemons.

The seeds promise that a ComputeDomain follows its workload as it grows and shrinks. A 4-worker job is scaled
to 2 and back to 4 (`kubectl scale job`): the leaving nodes' daemons leave the clique, the joining ones get
the smallest free indices, no IMEX of a staying node restarts (DNS-names mode: the fake IMEX counts its
starts), and `status.nodes` follows the pods in order (worker, node label, daemon, clique entry, status) and
converges; the lags are printed, not asserted. A daemon whose own slot changes (someone rewrote the clique)
restarts its IMEX, which takes its node id only at start; the others only signal theirs. Each test takes a few
seconds on 2 cores.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cdctl.sim.node.topology import NODES_PER_RACK
from cdctl.sim.rack.checks import list_pods, worker_states
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.observe import Timeline, domain_shape, imex_starts
from cdctl.sim.rack.scenario import DomainPlan, run_scenario
from cdctl.sim.rack.settings import RackSettings
from tests.integration.support import domain_uid, scale_job, until

pytestmark = pytest.mark.integration
NODES = 4
NAMESPACE, DOMAIN, JOB = "team-a", "nvl", "nvl-job"
MAX_NODES = max(NODES, NODES_PER_RACK)  # the controller's --max-nodes-per-imex-domain on this rack

# A deleted pod is Terminating until its kubelet has stopped it and unprepared its claims: the worker's
# unprepare removes the node's label, the daemon leaves the clique on SIGTERM, then each pod goes.
SHRINK_ORDER = ["worker terminating", "label removed", "daemon terminating", "index gone", "status unlisted"]
# The worker's pod goes after its unprepare removed the label; the daemon's pod and its clique entry go in
# either order (the daemon leaves on SIGTERM, the controller drops what a gone daemon left).
GONE_AFTER = {"worker gone": "label removed", "daemon gone": "daemon terminating"}
GROW_ORDER = ["worker bound", "label added", "daemon bound", "daemon Ready", "status Ready"]


def _settings(work_dir: Path) -> RackSettings:
    return RackSettings(work_dir, nodes_per_rack=NODES, probe_period_s=0.5)


def _worker_nodes(rack: Rack) -> set[str]:
    return {w.node for w in worker_states(rack, NAMESPACE, JOB) if w.node}


def _in_order(timeline: Timeline, node: str, steps: list[str], after: float) -> list[float]:
    """The time of each step on `node` after `after`; each must exist and come after the one before."""
    times = []
    for step in steps:
        at = timeline.first(node, step, after)
        assert at is not None, f"{node}: no '{step}' after the change; saw {timeline.of(node)}"
        times.append(at)
    assert times == sorted(times), f"{node}: out of order: {list(zip(steps, times, strict=True))}"
    return times


async def _grow_and_shrink(rack: Rack) -> None:
    uid = domain_uid(rack, NAMESPACE, DOMAIN)
    everyone = set(rack.topology.nodes)
    before = domain_shape(rack, NAMESPACE, DOMAIN)
    assert set(before.indices) == everyone and before.status_nodes == dict.fromkeys(everyone, "Ready")
    assert sorted(before.indices.values()) == list(range(NODES))
    assert {imex_starts(rack, ip) for ip in before.daemons.values()} == {1}

    with Timeline(rack, uid, NAMESPACE) as timeline:
        shrunk_at = time.monotonic()
        scale_job(rack, NAMESPACE, JOB, NODES // 2)

        def not_shrunk() -> str | None:
            shape, workers = domain_shape(rack, NAMESPACE, DOMAIN), _worker_nodes(rack)
            if len(workers) != NODES // 2:
                return f"workers on {sorted(workers)}"
            expected = dict.fromkeys(workers, "Ready")
            if (
                set(shape.indices) != workers
                or shape.status_nodes != expected
                or set(shape.daemons) != workers
            ):
                return f"clique {shape.indices}, status {shape.status_nodes}, daemons {sorted(shape.daemons)}"
            return None

        await until("the domain shrinks with its job", not_shrunk)
        staying = _worker_nodes(rack)
        leaving = everyone - staying
        shrunk = domain_shape(rack, NAMESPACE, DOMAIN)
        assert shrunk.indices == {n: before.indices[n] for n in staying}, "staying daemons keep their index"
        assert shrunk.status == "Ready" and shrunk.labelled == staying
        assert {n: imex_starts(rack, before.daemons[n]) for n in staying} == dict.fromkeys(staying, 1)
        assert all(w.done for w in worker_states(rack, NAMESPACE, JOB)), "the staying workers run on"

        def pods_left() -> str | None:
            left = [n for n in leaving if timeline.first(n, "daemon gone", shrunk_at) is None]
            return f"daemon pods still terminating on {sorted(left)}" if left else None

        await until("the leaving daemons' pods are removed by their kubelets", pods_left)
        shrink_lags = {}
        for node in sorted(leaving):
            times = _in_order(timeline, node, SHRINK_ORDER, shrunk_at)
            for gone, before_it in GONE_AFTER.items():
                _in_order(timeline, node, [before_it, gone], shrunk_at)
            shrink_lags[node] = (times[-1] - times[0], times[-1] - times[2])
        for node in staying:
            assert not {"index gone", "daemon terminating", "daemon gone"} & set(timeline.of(node))

        grown_at = time.monotonic()
        scale_job(rack, NAMESPACE, JOB, NODES)

        def not_grown() -> str | None:
            states = worker_states(rack, NAMESPACE, JOB)
            shape = domain_shape(rack, NAMESPACE, DOMAIN)
            if len(states) != NODES or not all(w.done for w in states):
                return f"workers {[(w.name, w.node, w.phase, w.channel0) for w in states]}"
            if shape.status_nodes != dict.fromkeys(everyone, "Ready") or shape.status != "Ready":
                return f"status {shape.status} {shape.status_nodes}"
            return None

        await until("the domain grows back with its job", not_grown)
        grown = domain_shape(rack, NAMESPACE, DOMAIN)
        joining = set(grown.indices) - staying
        assert joining == everyone - staying
        free = sorted(set(range(MAX_NODES)) - {before.indices[n] for n in staying})
        assert sorted(grown.indices[n] for n in joining) == free[: len(joining)], "the smallest free indices"
        assert {n: grown.indices[n] for n in staying} == {n: before.indices[n] for n in staying}
        starts = {n: imex_starts(rack, grown.daemons[n]) for n in everyone}
        assert starts == dict.fromkeys(everyone, 1), "no staying IMEX restarted; each joiner's started once"
        grow_lags = {}
        for node in sorted(joining):
            times = _in_order(timeline, node, GROW_ORDER, grown_at)
            indexed = timeline.first(node, f"index {grown.indices[node]}", grown_at)
            assert indexed is not None and times[2] < indexed, f"{node}: {timeline.of(node)}"
            grow_lags[node] = (times[-1] - times[0], times[-1] - times[3])
    print()
    for node, (total, lag) in shrink_lags.items():
        print(f"shrink {node}: worker deleted -> status unlisted {total * 1000:.0f} ms "
              f"(daemon deleted -> status {lag * 1000:.0f} ms)")  # fmt: skip
    for node, (total, lag) in grow_lags.items():
        print(f"grow {node}: worker bound -> status Ready {total * 1000:.0f} ms "
              f"(daemon Ready -> status Ready {lag * 1000:.0f} ms)")  # fmt: skip


async def test_a_job_scaled_down_and_up_takes_its_domain_with_it(work_dir: Path) -> None:
    async with Rack(_settings(work_dir)) as rack:
        plan = DomainPlan(DOMAIN, NAMESPACE, workers=NODES, num_nodes=0)
        report = await run_scenario(rack, [plan], while_formed=_grow_and_shrink, timeout_s=60)
        assert report.problems == []
        assert report.ok


def _swap_two_indices(rack: Rack, uid: str) -> tuple[str, str]:
    """Rewrite the domain's clique as a hand (or a buggy tool) might: two daemons trade their slots."""
    cliques = rack.store.type_of("resource.nvidia.com", "computedomaincliques")
    clique = next(
        c
        for c in rack.store.list_objects(cliques)[0]
        if c["metadata"]["labels"].get("resource.nvidia.com/computeDomain") == uid
    )
    entries = sorted(clique["daemons"], key=lambda e: e["index"])
    first, second = entries[1], entries[2]
    first["index"], second["index"] = second["index"], first["index"]
    rack.store.update(cliques, clique["metadata"]["namespace"], clique["metadata"]["name"], clique)
    return str(first["nodeName"]), str(second["nodeName"])


async def _rewrite_the_clique(rack: Rack) -> None:
    uid = domain_uid(rack, NAMESPACE, DOMAIN)
    before = domain_shape(rack, NAMESPACE, DOMAIN)
    moved = set(_swap_two_indices(rack, uid))
    still = set(before.indices) - moved

    def not_followed() -> str | None:
        shape = domain_shape(rack, NAMESPACE, DOMAIN)
        if shape.indices == before.indices:
            return "the controller has not kept the rewritten clique"
        starts = {n: imex_starts(rack, before.daemons[n]) for n in before.daemons}
        if any(starts[n] != 2 for n in moved):
            return f"IMEX starts {starts}: the daemons whose slot moved ({sorted(moved)}) must restart it"
        return None

    # They restart once the holds of the claims handed out on their nodes run out (cdctl.api.imexgate).
    hold_s = rack.settings.imex_handover_hold_s
    await until("daemons whose slot moved restart IMEX", not_followed, timeout_s=hold_s + 8)
    assert {n: imex_starts(rack, before.daemons[n]) for n in still} == dict.fromkeys(still, 1)
    assert len(list_pods(rack, NAMESPACE)) == NODES


async def test_a_daemon_whose_own_slot_changes_restarts_its_imex(work_dir: Path) -> None:
    async with Rack(_settings(work_dir)) as rack:
        plan = DomainPlan(DOMAIN, NAMESPACE, workers=NODES, num_nodes=0)
        report = await run_scenario(rack, [plan], while_formed=_rewrite_the_clique, timeout_s=60)
        assert report.problems == []
