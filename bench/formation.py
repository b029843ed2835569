"""ComputeDomain formation and teardown time on the simulated rack, for 1, 2, 4 and 8 racks (18 to 144 nodes).

Each size runs the `cdctl sim rack` scenario (cdctl.sim.rack.launch + cdctl.sim.rack.scenario): the real
controller, one real kubelet-plugin process per node and, in driver-managed mode, a real `cdctl daemon`
process per node, against the simulated cluster. One ComputeDomain spans every rack; one job per rack (18
workers, 4 GPUs each, pod affinity on the rack's clique) claims its channel. Formation is "domain created ->
every worker Running with channel0 in its CDI edits"; teardown is "jobs deleted -> nothing left" (claims
unprepared, CDI files, labels, DaemonSet, templates, finalizers). Start-up (processes up, plugins registered)
is reported apart. Writes bench/results/formation.json (with the load average: other work on the same cores
skews the figures) and draws bench/results/formation.png (seconds vs nodes, with matplotlib: title, axis
units, a legend for every mark, the targets as red squares and the load average of each size). Targets
(cdctl.sim.rack.scenario.FORMATION_TARGETS_S, which `cdctl sim rack` prints beside its figure): 18 nodes
< 3 s, 144 nodes < 15 s.

    .venv/bin/python bench/formation.py [--racks 1,2,4,8] [--repeat N] [--quiet-load L] [--merge]
                                        [--mode driver-managed|host-managed]
    .venv/bin/python bench/formation.py --redraw   # formation.png again from formation.json

`--repeat N` measures each size N times and reports the run with the median formation time (all N
formation times are kept under `formation_runs_s`): hundreds of processes share two cores, and when each
gets the CPU varies from run to run (a daemon's readiness probe that catches IMEX between two peers' starts
waits for its next tick), so single runs of a size vary. `--quiet-load L` waits
(up to 5 minutes) before each run until the 1-minute load average is below L, so that one run's processes
do not weigh on the next. `--merge` keeps the results already in formation.json for sizes this run does
not measure.
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

from cdctl.sim.node.topology import NODES_PER_RACK
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.scenario import FORMATION_TARGETS_S, DomainPlan, run_scenario
from cdctl.sim.rack.settings import RackSettings

RESULTS = Path(__file__).parent / "results"
TARGETS_S = FORMATION_TARGETS_S


async def measure(racks: int, mode: str) -> dict[str, Any]:
    work_dir = Path(tempfile.mkdtemp(prefix="cdbench-", dir="/tmp"))
    load_before = os.getloadavg()[0]
    try:
        settings = RackSettings(work_dir, racks=racks, mode=mode, start_timeout_s=600.0)
        async with Rack(settings) as rack:
            plan = DomainPlan("bench", "bench", workers=NODES_PER_RACK, jobs=racks)
            report = await run_scenario(rack, [plan], timeout_s=600.0)
            return {
                "racks": racks,
                "nodes": racks * NODES_PER_RACK,
                "mode": mode,
                "start_s": round(rack.timings.cluster_s + rack.timings.components_s, 3),
                "formation_s": round(report.formation_s, 3) if report.formation_s is not None else None,
                "teardown_s": round(report.teardown_s, 3) if report.teardown_s is not None else None,
                "steps": {name: round(seconds, 3) for name, seconds in report.steps},
                "ok": report.ok,
                "problems": report.problems[:10],
                "load_average_before": round(load_before, 2),
                "load_average_after": round(os.getloadavg()[0], 2),
            }
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


# ---- the plot ---------------------------------------------------------------------------------------------
SERIES = (  # key, label, colour, marker
    ("formation_s", "formation: domain created -> every worker Running with channel0", "#1f77b4", "o"),
    ("teardown_s", "teardown: jobs deleted -> nothing left", "#ff7f0e", "o"),
    ("start_s", "rack start-up: processes up, plugins registered (not formation)", "#7f7f7f", "o"),
)


def draw(results: list[dict[str, Any]], path: Path, recorded_at: str = "", cpus: int | None = None) -> None:
    """Seconds vs nodes: one line per measured figure, each repeated run of formation as a faint dot, the
    targets as red squares, the load average each size was measured at beside its point; title, axis
    labels with units and a legend that names every mark."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    points = [r for r in results if r.get("formation_s") is not None]
    figure, axes = plt.subplots(figsize=(9, 5.6), dpi=100)
    for key, label, colour, marker in SERIES:
        shown = [r for r in points if r.get(key) is not None]
        axes.plot(
            [r["nodes"] for r in shown], [r[key] for r in shown], marker=marker, color=colour, label=label
        )
    runs = [(r["nodes"], s) for r in points for s in r.get("formation_runs_s") or [] if s is not None]
    if runs:
        axes.scatter(
            *zip(*runs, strict=True),
            s=14,
            color="#1f77b4",
            alpha=0.35,
            zorder=3,
            label="formation, each repeated run (the line: the median run)",
        )
    targets = sorted(TARGETS_S.items())
    axes.scatter(
        [n for n, _ in targets],
        [s for _, s in targets],
        marker="s",
        s=70,
        color="#d62728",
        zorder=4,
        label="target: formation under " + ", ".join(f"{s:g} s at {n} nodes" for n, s in targets),
    )
    for r in points:
        axes.annotate(
            f"load {r.get('load_average_before', '?')}",
            (r["nodes"], r["formation_s"]),
            textcoords="offset points",
            xytext=(6, -14),
            fontsize=8,
            color="#555555",
        )
    axes.set_xlabel("nodes in the ComputeDomain (18 per rack)")
    axes.set_ylabel("seconds (wall clock)")
    axes.set_xticks(sorted({r["nodes"] for r in points} | {n for n, _ in targets}))
    axes.set_xlim(left=0)
    axes.set_ylim(bottom=0)
    axes.grid(True, color="#e0e0e0")
    where = f"{cpus} CPU cores" if cpus else "this machine"
    when = f", {recorded_at[:10]}" if recorded_at else ""
    axes.set_title(
        f"ComputeDomain formation on the simulated rack (cdctl sim rack){when}\n"
        f"{where}; 'load N': 1-minute load average before that size's runs",
        fontsize=11,
    )
    axes.legend(loc="upper left", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, format="png")
    plt.close(figure)


def write(results: list[dict[str, Any]]) -> None:
    RESULTS.mkdir(exist_ok=True)
    document = {
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
        },
        "targets_s": {str(k): v for k, v in TARGETS_S.items()},
        "results": results,
    }
    (RESULTS / "formation.json").write_text(json.dumps(document, indent=2) + "\n")
    draw(results, RESULTS / "formation.png", document["recorded_at"], os.cpu_count())
    print(f"wrote {RESULTS / 'formation.json'} and {RESULTS / 'formation.png'}", flush=True)


def wait_for_quiet(load: float, limit_s: float = 300.0) -> None:
    deadline = time.monotonic() + limit_s
    while load > 0 and os.getloadavg()[0] >= load and time.monotonic() < deadline:
        time.sleep(5)


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median formation time (a run that did not form counts as the slowest)."""
    ordered = sorted(runs, key=lambda r: float("inf") if r["formation_s"] is None else r["formation_s"])
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    if len(runs) > 1:
        chosen["formation_runs_s"] = [r["formation_s"] for r in runs]
        chosen["ok_runs"] = sum(1 for r in runs if r["ok"])
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--racks", default="1,2,4,8", help="Comma list of rack counts (18 nodes each).")
    parser.add_argument("--mode", default="driver-managed", choices=["driver-managed", "host-managed"])
    parser.add_argument("--merge", action="store_true", help="Keep earlier results of other sizes.")
    parser.add_argument("--repeat", type=int, default=1, help="Runs per size; the median run is reported.")
    parser.add_argument("--quiet-load", type=float, default=0.0, help="Wait for a load average below this.")
    parser.add_argument(
        "--redraw", action="store_true", help="Only draw formation.png again from formation.json (no run)."
    )
    args = parser.parse_args()
    if args.redraw:
        document = json.loads((RESULTS / "formation.json").read_text())
        cpus = (document.get("machine") or {}).get("cpus")
        draw(document["results"], RESULTS / "formation.png", document.get("recorded_at", ""), cpus)
        print(f"drew {RESULTS / 'formation.png'} from {RESULTS / 'formation.json'}", flush=True)
        return
    sizes = [int(r) for r in args.racks.split(",")]
    results: list[dict[str, Any]] = []
    if args.merge and (RESULTS / "formation.json").exists():
        earlier = json.loads((RESULTS / "formation.json").read_text())["results"]
        results = [r for r in earlier if r["racks"] not in sizes]
    for racks in sizes:
        started = time.perf_counter()
        runs = []
        for _ in range(max(1, args.repeat)):
            wait_for_quiet(args.quiet_load)
            runs.append(asyncio.run(measure(racks, args.mode)))
        result = median_run(runs)
        results = sorted([*results, result], key=lambda r: int(r["nodes"]))
        print(
            f"{result['nodes']:4d} nodes: start {result['start_s']:7.2f} s  "
            f"formation {result['formation_s']} s  "
            f"teardown {result['teardown_s']} s  ok={result['ok']}  (load {result['load_average_before']}, "
            f"{time.perf_counter() - started:.0f} s in all)",
            flush=True,
        )
        write(results)  # after every size, so a long run that is stopped keeps what it measured


if __name__ == "__main__":
    main()
