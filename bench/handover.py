"""Channel isolation on one rack, run again and again under load: does any workload start without IMEX?

Each run is the four-domain scenario of tests/integration/test_channel_rack.py on an 18-node rack (driver-
managed, shared IMEX daemons, workers as containers with the import checks): 26 single-GPU workers whose
first step is to find their node's IMEX ready (`imex-memcheck worker` exits 1 when it does not). The shared
daemons restart IMEX as the nodes of the clique join (IP mode), which is when a workload could be handed a
channel on an IMEX that is restarting (docs/channel-isolation.md, "Readiness"). `--load N` keeps N busy
processes beside the rack. A run counts as failed when any worker pod ended Failed (a worker that found no
IMEX, or no channel) or the scenario reported a problem. Writes bench/results/handover-<time>.json with each
run's formation time, the failed workers and the problems, and the load average before and after.

    .venv/bin/python -m bench.handover [--runs 200] [--load 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cdctl.sim.rack.checks import list_pods
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.scenario import DomainPlan, run_scenario
from cdctl.sim.rack.settings import RackSettings

RESULTS = Path(__file__).parent / "results"
SIZES = (5, 7, 6, 8)
NODES = 18


def _plans() -> list[DomainPlan]:
    return [
        DomainPlan(f"cd-{letter}", f"team-{letter}", workers=size, gpus_per_pod=1)
        for letter, size in zip("abcd", SIZES, strict=True)
    ]


async def one_run(work_dir: Path) -> dict[str, Any]:
    plans = _plans()
    failed: list[str] = []

    async def failed_workers(rack: Rack) -> None:
        for plan in plans:
            for pod in list_pods(rack, plan.namespace):
                if (pod.get("status") or {}).get("phase") == "Failed":
                    failed.append(f"{plan.namespace}/{pod['metadata']['name']}")

    settings = RackSettings(work_dir, nodes_per_rack=NODES, probe_period_s=0.5, isolation="channel")
    async with Rack(settings) as rack:
        report = await run_scenario(rack, plans, while_formed=failed_workers, timeout_s=180)
    return {"formation_s": report.formation_s, "failed_workers": failed, "problems": report.problems}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--load", type=int, default=2, help="busy processes beside the rack")
    args = parser.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    load_before = os.getloadavg()
    started = time.monotonic()
    runs: list[dict[str, Any]] = []
    try:
        for number in range(args.runs):
            work_dir = Path(tempfile.mkdtemp(prefix="cdho-", dir="/tmp"))
            try:
                result = asyncio.run(one_run(work_dir))
            finally:
                shutil.rmtree(work_dir, ignore_errors=True)
            runs.append(result)
            bad = bool(result["failed_workers"] or result["problems"])
            print(f"run {number + 1}/{args.runs}: formation {result['formation_s']} s, "
                  f"{'FAILED ' + str(result['failed_workers'] or result['problems']) if bad else 'ok'}",
                  flush=True)  # fmt: skip
    finally:
        for process in busy:
            process.kill()
            process.wait()
    elapsed = time.monotonic() - started
    failed_runs = [r for r in runs if r["failed_workers"] or r["problems"]]
    summary = {
        "runs": len(runs),
        "failed_runs": len(failed_runs),
        "workers_without_imex": sum(len(r["failed_workers"]) for r in runs),
        "elapsed_s": round(elapsed, 1),
        "load": args.load,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "runs_detail": runs,
    }
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"handover-{stamp}.json"
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"{len(runs)} runs in {elapsed:.0f} s under {args.load} busy processes: {len(failed_runs)} failed, "
          f"{summary['workers_without_imex']} workers ended Failed; {out}")  # fmt: skip
    return 1 if failed_runs else 0


if __name__ == "__main__":
    sys.exit(main())
