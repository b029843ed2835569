"""Channel isolation at scale: 64 ComputeDomains of mixed sizes on 8 racks (144 nodes), an IMEX domain a rack.

The simulated rack (cdctl.sim.rack) with the real controller, one kubelet-plugin process per node and, driver-
managed, the shared per-node IMEX daemons, under `imex.isolation: channel`. Each rack carries 8 domains of
single-GPU pods, sizes 1, 2, 3, 4, 4, 6, 8 and 8 (36 pods a rack, several of a domain on one node, domains
mixed on nodes), each domain in its own namespace with its job pinned to its rack (nodeSelector on the rack
label): 64 domains, 288 pods, 64 channel assignments. It reports:
- time to all Running: every domain created -> every worker Running Ready with its domain's channel;
- the controller's CPU per assignment: the controller process's CPU seconds (user + system, from /proc) spent
  from the first domain created to all Running, divided by the channel assignments its log holds (stream
  `channels/*`). That CPU covers everything the controller did meanwhile (templates, status, cliques), so it
  is an upper bound on an assignment's own cost;
- teardown: jobs and domains deleted -> nothing left, with every channel released.
The workers run without containers by default (the control plane alone); `--workers` runs them as
containers and adds the import checks (cdctl.sim.rack.isolation). Writes
bench/results/channel-rack-<time>.json with the load average before and after (other work on the same cores
skews the figures).

    .venv/bin/python -m bench.channel_rack [--racks 8] [--mode driver-managed|host-managed] [--workers]
                                           [--probe-period 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.process import cpu_seconds
from cdctl.sim.rack.checks import log_rows
from cdctl.sim.rack.cluster import RACK_LABEL, NodeTimings
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.scenario import DomainPlan, run_scenario
from cdctl.sim.rack.settings import DRIVER_MANAGED, MODES, RackSettings

RESULTS = Path(__file__).parent / "results"
SIZES_PER_RACK = (1, 2, 3, 4, 4, 6, 8, 8)  # single-GPU pods of the 8 domains of one rack


def plans(racks: int) -> list[DomainPlan]:
    return [
        DomainPlan(
            f"cd-r{rack}-{index}",
            f"tenant-r{rack}-{index}",
            workers=size,
            gpus_per_pod=1,
            node_selector=((RACK_LABEL, str(rack)),),
        )
        for rack in range(racks)
        for index, size in enumerate(SIZES_PER_RACK)
    ]


def channel_events(db: Path) -> dict[str, int]:
    """Event type -> count in the controller log's `channels/*` streams."""
    rows = log_rows(db, "SELECT type, count(*) FROM events WHERE stream LIKE 'channels/%' GROUP BY type")
    return {str(kind): int(count) for kind, count in rows}


async def measure(racks: int, mode: str, workers: bool, probe_period_s: float) -> dict[str, Any]:
    work_dir = Path(tempfile.mkdtemp(prefix="cdchan-", dir="/tmp"))
    load_before = os.getloadavg()[0]
    try:
        settings = RackSettings(
            work_dir,
            racks=racks,
            mode=mode,
            isolation="channel",
            worker_containers=workers,
            start_timeout_s=900.0,
            # Every probe of every node's daemon runs on this one machine: the chart's 2 s period for 144
            # shared daemons is 72 probes a second, more than two shared cores keep up with.
            probe_period_s=probe_period_s,
            # A process serving 144 kubelets on two busy cores renews their Leases late: with the real 40 s
            # grace the node lifecycle controller taints them unreachable and nothing schedules. Node loss is
            # not what this measures.
            node_timings=NodeTimings(node_monitor_grace_s=900.0, pod_gc_quarantine_s=900.0),
        )
        async with Rack(settings) as rack:
            controller = rack.controller
            assert controller is not None
            marks: dict[str, float] = {}

            async def formed(_: Rack) -> None:
                marks["formed_cpu_s"] = cpu_seconds(controller.process.pid)
                marks["formed_at"] = time.perf_counter()

            cpu_before = cpu_seconds(controller.process.pid)
            domains = plans(racks)
            report = await run_scenario(rack, domains, timeout_s=900.0, while_formed=formed)
            events = channel_events(rack.controller_db)
            assignments = sum(n for kind, n in events.items() if "Assign" in kind)
            formation_cpu = marks.get("formed_cpu_s", cpu_seconds(controller.process.pid)) - cpu_before
            return {
                "racks": racks,
                "nodes": len(rack.topology.nodes),
                "mode": mode,
                "worker_containers": workers,
                "probe_period_s": probe_period_s,
                "domains": len(domains),
                "pods": sum(p.nodes for p in domains),
                "start_s": round(rack.timings.cluster_s + rack.timings.components_s, 3),
                "all_running_s": round(report.formation_s, 3) if report.formation_s is not None else None,
                "teardown_s": round(report.teardown_s, 3) if report.teardown_s is not None else None,
                "controller_cpu_formation_s": round(formation_cpu, 3),
                "channel_events": events,
                "assignments": assignments,
                "controller_cpu_per_assignment_ms": (
                    round(1000 * formation_cpu / assignments, 2) if assignments else None
                ),
                "steps": {name: round(seconds, 3) for name, seconds in report.steps},
                "channels": report.isolation.lines() if report.isolation else [],
                "ok": report.ok,
                "problems": report.problems[:10],
                "load_average_before": round(load_before, 2),
                "load_average_after": round(os.getloadavg()[0], 2),
            }
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--racks", type=int, default=8)
    parser.add_argument("--mode", choices=MODES, default=DRIVER_MANAGED)
    parser.add_argument("--workers", action="store_true", help="run the workers as containers, with imports")
    parser.add_argument("--probe-period", type=float, default=10.0, help="seconds between daemon probes")
    args = parser.parse_args()
    result = asyncio.run(measure(args.racks, args.mode, args.workers, args.probe_period))
    result["recorded_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    result["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"channel-rack-{stamp}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    for key in (
        "nodes", "domains", "pods", "start_s", "all_running_s", "teardown_s",
        "controller_cpu_formation_s", "assignments", "controller_cpu_per_assignment_ms", "ok",
    ):  # fmt: skip
        print(f"{key}: {result[key]}")
    for problem in result["problems"]:
        print(f"problem: {problem}", file=sys.stderr)
    print(f"written to {path}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
