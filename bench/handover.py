"""Channel isolation on one rack, run again and again under load: does any workload start without IMEX?
Each run is the four-domain scenario of tests/integration/test_channel_rack.py on an 18-node rack (driver-
managed, shared IMEX daemons, workers as containers with the import checks): 26 single-GPU workers whose first
step is to find their node's IMEX ready (`imex-memcheck worker` exits 1 when it does not). The shared daemons
restart IMEX as the nodes of the clique join (IP mode), which is when a workload could be handed a channel on
an IMEX that is restarting (docs/channel-isolation.md, "Readiness"). `--load N` keeps N busy processes beside
the rack. A run counts as failed when any worker pod ended Failed (a worker that found no IMEX, or no channel)
or the scenario reported a problem. Each run also counts, from the logs, the IMEX restarts for a peer change
and the Prepares held at a closed gate: the race the run exists to exercise, and how often the gate stepped
in. A run whose rack did not start is recorded as such and does not count. Writes
bench/results/handover-<time>.json with each run's formation time, the failed workers and the problems, and
the load average before and after.

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
from cdctl.sim.rack.launch import Rack, RackStartError
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
    try:
        async with Rack(settings) as rack:
            report = await run_scenario(rack, plans, while_formed=failed_workers, timeout_s=180)
    except RackStartError as error:
        return {"start_error": str(error)}
    logs = work_dir / "logs"
    return {
        "formation_s": report.formation_s,
        "failed_workers": failed,
        "problems": report.problems,
        "imex_restarts_for_peers": _count(
            logs / "pods", "*.log", "IMEX daemon started", "peers changed (IP mode)"
        ),
        "prepares_held_at_gate": _count(logs, "plugin-*.log", "IMEX on this node is not ready now ("),
    }


def _count(directory: Path, pattern: str, *texts: str) -> int:
    """Log lines, in the files matching `pattern`, that hold every one of `texts`."""
    return sum(
        all(text in line for text in texts)
        for path in directory.glob(pattern)
        for line in path.read_text(errors="replace").splitlines()
    )


def _is_failed(run: dict[str, Any]) -> bool:
    return bool(run.get("failed_workers") or run.get("problems"))


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
            if "start_error" in result:
                print(
                    f"run {number + 1}/{args.runs}: rack did not start: {result['start_error']}", flush=True
                )
                continue
            verdict = (
                "FAILED " + str(result["failed_workers"] or result["problems"])
                if _is_failed(result)
                else "ok"
            )
            print(f"run {number + 1}/{args.runs}: formation {result['formation_s']} s, "
                  f"{result['imex_restarts_for_peers']} IMEX restarts for peers, "
                  f"{result['prepares_held_at_gate']} prepares held at the gate, {verdict}",
                  flush=True)  # fmt: skip
    finally:
        for process in busy:
            process.kill()
            process.wait()
    elapsed = time.monotonic() - started
    completed = [r for r in runs if "start_error" not in r]
    failed_runs = [r for r in completed if _is_failed(r)]
    summary = {
        "runs": len(completed),
        "racks_not_started": len(runs) - len(completed),
        "failed_runs": len(failed_runs),
        "workers_without_imex": sum(len(r["failed_workers"]) for r in completed),
        "imex_restarts_for_peers": sum(r["imex_restarts_for_peers"] for r in completed),
        "prepares_held_at_gate": sum(r["prepares_held_at_gate"] for r in completed),
        "runs_with_prepares_held": sum(1 for r in completed if r["prepares_held_at_gate"]),
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
    print(f"{len(completed)} runs in {elapsed:.0f} s under {args.load} busy processes "
          f"({summary['racks_not_started']} racks did not start): {len(failed_runs)} failed, "
          f"{summary['workers_without_imex']} workers ended Failed; "
          f"{summary['imex_restarts_for_peers']} IMEX restarts for peers, "
          f"{summary['prepares_held_at_gate']} prepares held at the gate in "
          f"{summary['runs_with_prepares_held']} runs; {out}")  # fmt: skip
    return 1 if failed_runs else 0


if __name__ == "__main__":
    sys.exit(main())
