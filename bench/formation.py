"""ComputeDomain formation and teardown time on the simulated rack, for 1, 2, 4 and 8 racks (18 to 144 nodes).

Each size runs the `cdctl sim rack` scenario (cdctl.sim.rack.launch + cdctl.sim.rack.scenario): the real
controller, one real kubelet-plugin process per node and, in driver-managed mode, a real `cdctl daemon`
process per node, against the simulated cluster. One ComputeDomain spans every rack; one job per rack (18
workers, 4 GPUs each, pod affinity on the rack's clique) claims its channel. Formation is "domain created ->
every worker Running with channel0 in its CDI edits"; teardown is "jobs deleted -> nothing left" (claims
unprepared, CDI files, labels, DaemonSet, templates, finalizers). Start-up (processes up, plugins registered)
is reported apart. Where formation's time and CPU go, per size: the CPU seconds each kind of process spent
during formation (the controller, the plugins, the daemons with the IMEX they run, the daemons' readiness
probes, and the simulated cluster: this process, which hosts the API server, scheduler, controllers and
kubelets), the API requests per node formed by component, verb and resource (the simulated server counts
them by the user each request authenticated as), and the critical path of the slowest node with the cause of
its longest wait (cdctl explain over the rack's collected logs). Writes bench/results/formation.json (with
the load average: other work on the same cores skews the figures) and draws bench/results/formation.png
(seconds vs nodes, with matplotlib: title, axis units, a legend for every mark, the targets as red squares
and the load average of each size; under it each size's CPU split and the largest size's critical path).
Targets (cdctl.sim.rack.scenario.FORMATION_TARGETS_S, which `cdctl sim rack` prints beside its figure): 18
nodes < 3 s, 144 nodes < 15 s.

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
import resource
import shutil
import sys
import tempfile
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cdctl.projections.explain import Explanation
from cdctl.sim.node.proctree import descendants
from cdctl.sim.node.topology import NODES_PER_RACK
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.scenario import FORMATION_TARGETS_S, DomainPlan, run_scenario
from cdctl.sim.rack.settings import RackSettings
from cdctl.sim.rack.timelines import draw_timelines

RESULTS = Path(__file__).parent / "results"
TARGETS_S = FORMATION_TARGETS_S


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int, children: bool = True) -> float:
    """CPU seconds of `pid` so far (and of the children it has reaped: a daemon's IMEX and probes)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / CLOCK_TICKS


def _processes(rack: Rack) -> dict[str, dict[int, float]]:
    """kind -> pid -> CPU seconds now, for the rack's processes (a daemon with what it runs)."""
    out: dict[str, dict[int, float]] = {"controller": {}, "plugins": {}, "daemons": {}, "probes": {}}
    for component in rack.controllers.values():
        out["controller"][component.process.pid] = _cpu_s(component.process.pid)
    for component in rack.plugins.values():
        out["plugins"][component.process.pid] = _cpu_s(component.process.pid)
    for running in list(rack.runtime.running.values()):
        pid = running.process.pid
        out["daemons"][pid] = _cpu_s(pid) + sum(_cpu_s(p, children=False) for p in descendants(pid))
    if rack.probe_server is not None and rack.probe_server.process is not None:
        pid = rack.probe_server.process.pid  # the probes it forks are reaped by it
        out["probes"][pid] = _cpu_s(pid)
    return out


def _self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class FormationCost:
    """CPU and API requests from the domain's creation to its formation (the scenario's two hooks)."""

    def __init__(self) -> None:
        self.before: dict[str, dict[int, float]] = {}
        self.cpu_s: dict[str, float] = {}
        self.requests: dict[tuple[str, str, str], int] = {}
        self._self_before = 0.0

    async def started(self, rack: Rack) -> None:
        rack.cluster.apiserver.requests.reset()
        self.before, self._self_before = _processes(rack), _self_cpu_s()

    async def formed(self, rack: Rack) -> None:
        after = _processes(rack)
        self.cpu_s = {
            kind: round(sum(cpu - self.before.get(kind, {}).get(pid, 0.0) for pid, cpu in pids.items()), 2)
            for kind, pids in after.items()
        }
        self.cpu_s["simulated cluster"] = round(_self_cpu_s() - self._self_before, 2)
        self.requests = rack.cluster.apiserver.requests.by_user_verb_and_resource()


def component_of(user: str) -> str:
    """Which part of the rack a request's user is (the chart's service accounts, the kubelets' nodes)."""
    if user.startswith("system:node:"):
        return "kubelet"
    if user.endswith("-controller") and ":nvidia-dra-driver:" in user:
        return "controller"
    if user.endswith("-kubelet-plugin"):
        return "plugin"
    if "daemon" in user:
        return "daemon"
    return user.rsplit(":", 1)[-1] or "unauthenticated"


def per_node(requests: dict[tuple[str, str, str], int], nodes: int) -> dict[str, float]:
    """'component verb resource' -> requests per node formed, largest first."""
    merged: dict[str, int] = {}
    for (user, verb, resource_name), count in requests.items():
        key = f"{component_of(user)} {verb} {resource_name}"
        merged[key] = merged.get(key, 0) + count
    return {k: round(v / nodes, 2) for k, v in sorted(merged.items(), key=lambda kv: -kv[1])}


def critical_path(explanation: Explanation | None) -> dict[str, Any] | None:
    if explanation is None or not explanation.path:
        return None
    return {
        "node": explanation.path_node,
        "steps": [
            {
                "step": s.label,
                "start_s": round(s.start_s, 3),
                "end_s": round(s.end_s, 3),
                "wait_s": round(s.wait_s, 3),
            }
            for s in explanation.path
        ],
        "longest": explanation.longest.label if explanation.longest else None,
        "why": [c.text for c in explanation.chain],
    }


async def measure(racks: int, mode: str) -> dict[str, Any]:
    work_dir = Path(tempfile.mkdtemp(prefix="cdbench-", dir="/tmp"))
    load_before = os.getloadavg()[0]
    try:
        settings = RackSettings(work_dir, racks=racks, mode=mode, start_timeout_s=600.0)
        async with Rack(settings) as rack:
            plan = DomainPlan("bench", "bench", workers=NODES_PER_RACK, jobs=racks)
            cost = FormationCost()
            report = await run_scenario(
                rack, [plan], timeout_s=600.0, during_formation=cost.started, while_formed=cost.formed
            )
            drawn = await draw_timelines(rack, [(plan.namespace, plan.name)])
            nodes = racks * NODES_PER_RACK
            product = sum(cost.cpu_s.get(k, 0.0) for k in ("controller", "plugins", "daemons", "probes"))
            return {
                "racks": racks,
                "nodes": racks * NODES_PER_RACK,
                "mode": mode,
                "start_s": round(rack.timings.cluster_s + rack.timings.components_s, 3),
                "formation_s": round(report.formation_s, 3) if report.formation_s is not None else None,
                "teardown_s": round(report.teardown_s, 3) if report.teardown_s is not None else None,
                "steps": {name: round(seconds, 3) for name, seconds in report.steps},
                "formation_cpu_s": cost.cpu_s,
                "product_cpu_per_node_s": round(product / nodes, 3),
                "controller_cpu_per_node_ms": round(1000 * cost.cpu_s.get("controller", 0.0) / nodes, 1),
                "api_requests_per_node": per_node(cost.requests, nodes),
                "critical_path": critical_path(drawn.explanations[0] if drawn.explanations else None),
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
    notes = [part for line in cost_lines(points) for part in textwrap.wrap(line, 140, subsequent_indent="  ")]
    figure, axes = plt.subplots(figsize=(9, 5.6 + 0.17 * len(notes)), dpi=100)
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
    figure.tight_layout(rect=(0, 0.03 * len(notes) / (1 + 0.03 * len(notes)), 1, 1))
    for index, line in enumerate(notes):
        figure.text(0.01, 0.01 + 0.028 * (len(notes) - 1 - index) * 5.6 / (5.6 + 0.17 * len(notes)), line,
                    fontsize=7.5, family="monospace", color="#333333")  # fmt: skip
    figure.savefig(path, format="png")
    plt.close(figure)


def cost_lines(points: list[dict[str, Any]]) -> list[str]:
    """Under the plot: where formation's CPU went at each size, and the largest size's critical path."""
    lines = []
    for r in points:
        cpu = r.get("formation_cpu_s")
        if cpu:
            split = ", ".join(f"{kind} {seconds:g}" for kind, seconds in cpu.items())
            per_node_ms = r.get("controller_cpu_per_node_ms")
            lines.append(
                f"{r['nodes']} nodes, CPU s during formation: {split}; product per node "
                f"{r.get('product_cpu_per_node_s')} s, controller {per_node_ms} ms/node"
            )
    largest = next((r for r in reversed(points) if r.get("critical_path")), None)
    if largest is not None:
        path = largest["critical_path"]
        steps = "; ".join(
            f"{s['step'].split(' -> ')[1]} +{s['end_s']:.2f} (wait {s['wait_s']:.2f})" for s in path["steps"]
        )
        lines.append(f"critical path at {largest['nodes']} nodes ({path['node']}): {steps}")
        if path.get("why"):
            lines.append("  why the longest wait: " + " <- ".join(path["why"])[:170])
    return lines


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
