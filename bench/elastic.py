"""A domain that changes shape on a full rack (not a test): the 18-node versions of the rack tests.

1. Grow and shrink: one ComputeDomain (numNodes 0) and an 18-worker job on an 18-node rack; the job is scaled
   to 9 and back to 18 (`kubectl scale job`). Reported: how long until the domain's clique and status match
   the job each way, the per-node lag from a worker's change to `status.nodes` following it (worker gone ->
   node unlisted; daemon Ready -> node Ready), whether each joining daemon got the smallest free index, and
   how many IMEX processes of staying nodes restarted (none should).
2. Node loss and return: a node loses power mid-job; reported: power off -> the domain reports it
   (NodeNotReady Event and the node NotReady in status), node deleted -> its daemon out of the clique, power
   on -> the replacement worker Running with its channel and the node Ready in the domain again.
The node timings are short (2 s node-monitor grace, 1 s pod GC quarantine; a real cluster waits 40 s and
40 s): the figures show the driver's part, not the cluster's waits. Writes bench/results/elastic-<UTC>.json.

    .venv/bin/python bench/elastic.py [--nodes 18]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cdctl.sim.rack.checks import worker_states
from cdctl.sim.rack.cluster import NodeTimings
from cdctl.sim.rack.faults import power_off, power_on
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.observe import Timeline, domain_shape, imex_starts
from cdctl.sim.rack.scenario import DomainPlan, run_scenario
from cdctl.sim.rack.settings import RackSettings

RESULTS = Path(__file__).parent / "results"
NAMESPACE, DOMAIN, JOB = "elastic", "elastic", "elastic-job"
FAST = NodeTimings(lease_renew_s=0.5, node_monitor_period_s=0.5, node_monitor_grace_s=2.0,
                   pod_gc_quarantine_s=1.0, dra_reconcile_s=5.0)  # fmt: skip


async def until(missing: Callable[[], str | None], timeout_s: float = 300.0) -> float:
    began = time.monotonic()
    while (left := missing()) is not None:
        if time.monotonic() - began > timeout_s:
            raise RuntimeError(f"still waiting after {timeout_s:.0f} s: {left}")
        await asyncio.sleep(0.05)
    return time.monotonic() - began


def ms(seconds: list[float]) -> dict[str, float]:
    if not seconds:
        return {}
    return {"median_ms": round(statistics.median(seconds) * 1000), "max_ms": round(max(seconds) * 1000)}


def scale(rack: Rack, parallelism: int) -> None:
    jobs = rack.store.type_of("batch", "jobs")
    body = rack.store.get(jobs, NAMESPACE, JOB)
    body["spec"]["parallelism"] = parallelism
    rack.store.update(jobs, NAMESPACE, JOB, body)


def workers_done(rack: Rack) -> dict[str, str]:
    return {w.uid: w.node for w in worker_states(rack, NAMESPACE, JOB) if w.done}


async def grow_and_shrink(rack: Rack, nodes: int, out: dict[str, Any]) -> None:
    uid = str(rack.store.get(rack.store.type_of("resource.nvidia.com", "computedomains"), NAMESPACE, DOMAIN)
              ["metadata"]["uid"])  # fmt: skip
    before = domain_shape(rack, NAMESPACE, DOMAIN)
    with Timeline(rack, uid, NAMESPACE) as timeline:
        shrunk_at = time.monotonic()
        scale(rack, nodes // 2)

        def not_shrunk() -> str | None:
            running = set(workers_done(rack).values())
            shape = domain_shape(rack, NAMESPACE, DOMAIN)
            ok = len(running) == nodes // 2 and set(shape.status_nodes) == running == set(shape.indices)
            return None if ok else f"{len(running)} workers, {len(shape.status_nodes)} in status"

        out["shrink_converged_s"] = round(await until(not_shrunk), 3)
        staying = set(workers_done(rack).values())
        leaving = set(before.indices) - staying
        lags = [
            end - start
            for node in leaving
            if (start := timeline.first(node, "worker gone", shrunk_at)) is not None
            and (end := timeline.first(node, "status unlisted", shrunk_at)) is not None
        ]
        out["shrink_worker_gone_to_unlisted"] = ms(lags)
        grown_at = time.monotonic()
        scale(rack, nodes)

        def not_grown() -> str | None:
            running = set(workers_done(rack).values())
            shape = domain_shape(rack, NAMESPACE, DOMAIN)
            ready = shape.status_nodes == dict.fromkeys(running, "Ready") and shape.status == "Ready"
            return None if len(running) == nodes and ready else f"{len(running)} workers, {shape.status}"

        out["grow_converged_s"] = round(await until(not_grown), 3)
        grown = domain_shape(rack, NAMESPACE, DOMAIN)
        joining = set(grown.indices) - staying
        free = sorted(set(range(max(nodes, 18))) - {before.indices[n] for n in staying})
        out["joiners_got_smallest_free_indices"] = (
            sorted(grown.indices[n] for n in joining) == free[: len(joining)]
        )
        lags = [
            end - start
            for node in joining
            if (start := timeline.first(node, "daemon Ready", grown_at)) is not None
            and (end := timeline.first(node, "status Ready", grown_at)) is not None
        ]
        out["grow_daemon_ready_to_status_ready"] = ms(lags)
        out["staying_imex_restarts"] = sum(imex_starts(rack, before.daemons[n]) - 1 for n in staying)
        out["staying_indices_kept"] = all(grown.indices[n] == before.indices[n] for n in staying)


async def lose_a_node(rack: Rack, out: dict[str, Any]) -> None:
    lost = sorted(rack.topology.nodes)[len(rack.topology.nodes) // 2]
    workers = len(workers_done(rack))
    began = time.monotonic()
    await power_off(rack, lost)

    def not_reported() -> str | None:
        events, _ = rack.store.list_objects(rack.store.type_of("", "events"), NAMESPACE, copies=False)
        shape = domain_shape(rack, NAMESPACE, DOMAIN)
        reported = any(e.get("reason") == "NodeNotReady" and lost in e.get("message", "") for e in events)
        return None if reported and shape.status_nodes.get(lost) == "NotReady" else "not reported"

    out["power_off_to_reported_s"] = round(await until(not_reported), 3)
    deleted = time.monotonic()
    rack.store.delete(rack.store.type_of("", "nodes"), "", lost)

    def not_left() -> str | None:
        shape = domain_shape(rack, NAMESPACE, DOMAIN)
        return None if lost not in shape.indices and lost not in shape.status_nodes else "still listed"

    out["node_deleted_to_left_clique_s"] = round(await until(not_left), 3)
    booted = time.monotonic()
    await power_on(rack, lost)

    def not_back() -> str | None:
        shape = domain_shape(rack, NAMESPACE, DOMAIN)
        running = workers_done(rack)
        back = len(running) == workers and shape.status_nodes.get(lost) == "Ready"
        return None if back else f"{len(running)} workers, {lost}: {shape.status_nodes.get(lost)}"

    out["power_on_to_rejoined_s"] = round(await until(not_back), 3)
    out["loss_total_s"] = round(time.monotonic() - began, 3)
    out["node_deleted_after_s"] = round(deleted - began, 3)
    out["node_booted_after_s"] = round(booted - began, 3)


async def measure(nodes: int) -> dict[str, Any]:
    work_dir = Path(tempfile.mkdtemp(prefix="cdelastic-", dir="/tmp"))
    out: dict[str, Any] = {"nodes": nodes}
    try:
        settings = RackSettings(work_dir, nodes_per_rack=nodes, node_timings=FAST, start_timeout_s=600.0)
        async with Rack(settings) as rack:
            plan = DomainPlan(DOMAIN, NAMESPACE, workers=nodes, num_nodes=0)

            async def scenario(rack: Rack) -> None:
                await grow_and_shrink(rack, nodes, out)
                await lose_a_node(rack, out)

            report = await run_scenario(rack, [plan], while_formed=scenario, timeout_s=600)
            out["formation_s"] = round(report.formation_s, 3) if report.formation_s is not None else None
            out["teardown_s"] = round(report.teardown_s, 3) if report.teardown_s is not None else None
            out["problems"] = report.problems[:10]
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=18)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    result = asyncio.run(measure(args.nodes))
    for key, value in result.items():
        print(f"{key}: {value}", flush=True)
    document = {
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
        },
        "node_timings": dataclasses.asdict(FAST),
        "load_average_before": round(load_before, 2),
        "load_average_after": round(os.getloadavg()[0], 2),
        "result": result,
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"elastic-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {path}", flush=True)
    sys.exit(1 if result.get("problems") else 0)


if __name__ == "__main__":
    main()
