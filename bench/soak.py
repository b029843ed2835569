"""A week of churn in an hour (not a test): ComputeDomain lifecycles and claim prepares on the simulated rack,
with retention on and small, and the controller and plugins killed every few minutes.

The controller, one kubelet plugin per node and every IMEX daemon run as processes on the simulated rack
(cdctl.sim.rack), all with `--retention-size` small and `--retention-interval` short, so that every log is
compacted many times. Rounds of `--domains` ComputeDomains of `--nodes-per-domain` nodes each form (a
daemon claim and a worker's channel claim prepared on every node), run and tear down, one round after
another, until `--lifecycles` domains have lived or `--duration` has passed. Every `--restart-every`
seconds one component is killed with -9, a plugin and the controller in turn; the rack's Restarter brings it
back as the kubelet or the StatefulSet would.

Every `--sample-every` seconds it records, per process kind (controller, plugin, daemon, and this process:
the simulated cluster): RSS and open descriptors (sum and largest process), the event logs' size on disk,
events held and compactions done, and the append latency p99 since the last sample (from the controller's
and each plugin's `cdctl_event_log_append_duration_seconds`; the daemons serve no metrics port here). At
the end: growth of RSS and descriptors over the last half (per process kind, of the processes that lived
through it: a restarted one starts small), every log through `verify`, and what is left behind (CDI claim
specs, node labels, ResourceClaims, ComputeDomains, IMEX channels held). Writes
bench/results/soak-<UTC time>.json and a PNG of the figures over time.

    .venv/bin/python bench/soak.py [--lifecycles 10000] [--duration 3600] [--domains 6]
                                   [--nodes-per-domain 3] [--restart-every 180]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import shutil
import sqlite3
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cdctl.sim.rack.chaos import event_logs, verify_log
from cdctl.sim.rack.faults import Restarter, kill_controller, kill_plugin
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.scenario import DomainPlan, run_scenario
from cdctl.sim.rack.settings import RackSettings

RESULTS = Path(__file__).resolve().parent / "results"
APPEND_METRIC = "cdctl_event_log_append_duration_seconds_bucket"
LOGGED = ("controller", "plugin", "daemon")  # the process kinds with an event log


def _proc(pid: int) -> tuple[float, int] | None:
    """(RSS in MiB, open descriptors) of a live process."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = sum(1 for _ in Path(f"/proc/{pid}/fd").iterdir())
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    rss_kib = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return rss_kib / 1024, fds


def _log_facts(path: Path) -> tuple[int, int, int]:
    """(bytes on disk with the WAL, events held, compactions done) of one event log."""
    size = sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)) as db:
            events = db.execute("SELECT count(*) FROM events").fetchone()[0]
            compactions = db.execute("SELECT count(*) FROM compactions").fetchone()[0]
    except sqlite3.Error:
        return size, 0, 0
    return size, int(events), int(compactions)


def _buckets(port: int) -> dict[float, float]:
    """The append-latency histogram's cumulative buckets from a component's metrics endpoint."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    out: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith(APPEND_METRIC):
            bound = float(line.split('le="', 1)[1].split('"', 1)[0])  # "+Inf" reads as inf
            out[bound] = out.get(bound, 0.0) + float(line.split()[-1])
    return out


def _p99(deltas: dict[float, float]) -> float | None:
    total = deltas.get(float("inf"), 0.0)
    if total <= 0:
        return None
    for bound in sorted(deltas):
        if deltas[bound] >= 0.99 * total:
            return bound
    return None


class Sampler:
    """The figures over time (see the module docstring)."""

    def __init__(self, rack: Rack) -> None:
        self.rack = rack
        self.samples: list[dict[str, Any]] = []
        self.started = time.monotonic()
        self._last_buckets: dict[str, dict[float, float]] = {}
        self.pids_by_kind: dict[str, set[int]] = {}

    def _processes(self) -> dict[str, dict[str, int]]:
        rack = self.rack
        kinds: dict[str, dict[str, int]] = {"controller": {}, "plugin": {}, "daemon": {}}
        for replica, c in rack.controllers.items():
            if c.returncode is None:
                kinds["controller"][f"controller-{replica}"] = c.process.pid
        for node, c in rack.plugins.items():
            if c.returncode is None:
                kinds["plugin"][node] = c.process.pid
        for uid, running in rack.runtime.running.items():
            if running.process.returncode is None:
                kinds["daemon"][uid] = running.process.pid
        kinds["cluster"] = {"this process": os.getpid()}
        return kinds

    def _append_p99(self, kind: str, ports: list[int]) -> float | None:
        now: dict[float, float] = {}
        for port in ports:
            for bound, count in _buckets(port).items():
                now[bound] = now.get(bound, 0.0) + count
        last = self._last_buckets.get(kind, {})
        self._last_buckets[kind] = now
        deltas = {b: c - last.get(b, 0.0) for b, c in now.items()}
        if any(d < 0 for d in deltas.values()):  # a component restarted: its counters began again
            deltas = now
        return _p99(deltas)

    def sample(self, lifecycles: int, prepares: int) -> dict[str, Any]:
        row: dict[str, Any] = {
            "t_s": round(time.monotonic() - self.started, 1),
            "lifecycles": lifecycles,
            "prepares": prepares,
        }
        for kind, pids in self._processes().items():
            figures = [f for f in (_proc(pid) for pid in pids.values()) if f is not None]
            self.pids_by_kind.setdefault(kind, set()).update(pids.values())
            row[kind] = {
                "processes": len(figures),
                "rss_mib": round(sum(f[0] for f in figures), 1),
                "rss_mib_max": round(max((f[0] for f in figures), default=0.0), 1),
                "fds": sum(f[1] for f in figures),
                "fds_max": max((f[1] for f in figures), default=0),
                "by_pid": {str(pid): f for pid, f in zip(pids.values(), figures, strict=False)},
            }
        logs = {
            "controller": self.rack.controller_dbs(),
            "plugin": [self.rack.plugin_db(n) for n in self.rack.plugins],
            "daemon": self.rack.daemon_dbs(),
        }
        for kind, paths in logs.items():
            facts = [_log_facts(p) for p in paths if p.exists()]
            row[kind]["log_bytes"] = sum(f[0] for f in facts)
            row[kind]["log_bytes_max"] = max((f[0] for f in facts), default=0)
            row[kind]["events"] = sum(f[1] for f in facts)
            row[kind]["compactions"] = sum(f[2] for f in facts)
        ports = self.rack.pods.local_ports
        row["controller"]["append_p99_s"] = self._append_p99(
            "controller", [local for name, (_, local) in ports.items() if "controller" in name]
        )
        row["plugin"]["append_p99_s"] = self._append_p99(
            "plugin", [local for name, (_, local) in ports.items() if "kubelet-plugin" in name]
        )
        self.samples.append(row)
        return row


def growth(samples: list[dict[str, Any]], kind: str, figure: str) -> dict[str, Any]:
    """The change of `figure` over the last half, per process that lived through all of it."""
    half = [s for s in samples if s["t_s"] >= samples[-1]["t_s"] / 2]
    if len(half) < 2:
        return {}
    first, last = half[0][kind]["by_pid"], half[-1][kind]["by_pid"]
    index = 0 if figure == "rss" else 1
    through = [pid for pid in first if pid in last]
    changes = [
        (last[pid][index] - first[pid][index]) / first[pid][index] if first[pid][index] else 0.0
        for pid in through
    ]
    return {
        "processes_through_the_last_half": len(through),
        "largest_growth_pct": round(100 * max(changes), 1) if changes else None,
        "median_growth_pct": round(100 * sorted(changes)[len(changes) // 2], 1) if changes else None,
    }


def by_quarter(samples: list[dict[str, Any]], kind: str, figure: str) -> list[float]:
    """The median of `figure` (of the kind's largest process) in each quarter of the run: flat for a kind
    whose processes do not live through the run (the daemons, one set per domain)."""
    end = samples[-1]["t_s"] or 1.0
    out = []
    for q in range(4):
        values = sorted(
            s[kind][figure]
            for s in samples
            if q * end / 4 <= s["t_s"] <= (q + 1) * end / 4 and s[kind]["processes"]
        )
        out.append(values[len(values) // 2] if values else 0.0)
    return out


def left_behind(rack: Rack) -> dict[str, Any]:
    """What a finished soak must not leave: claim CDI specs, domain labels, claims, domains, and claims or
    IMEX channels a plugin's log still holds."""
    specs = {
        node: sorted(p.name for p in rack.cdi_root(node).glob("*claim_*"))
        for node in rack.plugins
        if rack.cdi_root(node).exists()
    }
    nodes, _ = rack.store.list_objects(rack.store.type_of("", "nodes"))
    labels = {
        n["metadata"]["name"]: k
        for n in nodes
        for k in (n["metadata"].get("labels") or {})
        if k.startswith("resource.nvidia.com/computeDomain")
    }
    held: dict[str, dict[str, int]] = {}
    for node in rack.plugins:
        with contextlib.closing(sqlite3.connect(f"file:{rack.plugin_db(node)}?mode=ro", uri=True)) as db:
            prepared = db.execute("SELECT count(*) FROM claim_lifecycle WHERE state = 'PrepareCompleted'")
            channels = db.execute("SELECT count(*) FROM channel_allocations WHERE released_at IS NULL")
            counts = {"claims_prepared": prepared.fetchone()[0], "channels_held": channels.fetchone()[0]}
        if any(counts.values()):
            held[node] = counts
    claims, _ = rack.store.list_objects(rack.store.type_of("resource.k8s.io", "resourceclaims"))
    domains, _ = rack.store.list_objects(rack.store.type_of("resource.nvidia.com", "computedomains"))
    return {
        "cdi_claim_specs": {n: s for n, s in specs.items() if s},
        "domain_labels": labels,
        "resource_claims": [f"{c['metadata']['namespace']}/{c['metadata']['name']}" for c in claims],
        "compute_domains": [f"{d['metadata']['namespace']}/{d['metadata']['name']}" for d in domains],
        "held_in_plugin_logs": held,
    }


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    # The components inherit the rack's environment; the controller hands the policy on to the daemons.
    os.environ.update(
        CDCTL_RETENTION_AGE="0",
        CDCTL_RETENTION_SIZE=args.retention_size,
        CDCTL_RETENTION_INTERVAL=args.retention_interval,
    )
    work_dir = Path(tempfile.mkdtemp(prefix="cdsoak-", dir="/tmp"))
    RESULTS.mkdir(exist_ok=True)
    partial = RESULTS / "soak-partial.json"
    rng = random.Random(args.seed)
    nodes = args.domains * args.nodes_per_domain
    settings = RackSettings(work_dir, racks=1, nodes_per_rack=nodes, start_timeout_s=600.0)
    rounds: list[dict[str, Any]] = []
    killed: list[str] = []
    try:
        async with Rack(settings) as rack, Restarter(rack, delay_s=1.0) as restarter:
            sampler = Sampler(rack)
            lifecycles = 0

            def prepares() -> int:
                return sum(
                    len(uids) for k in rack.cluster.kubelets.values() for _, _, uids in k.prepare_calls
                )

            async def sample_forever() -> None:
                while True:
                    row = sampler.sample(lifecycles, prepares())
                    # Written as it goes: a run that fails at its end keeps its figures over time.
                    partial.write_text(
                        json.dumps({"settings": vars(args), "samples": sampler.samples}) + "\n"
                    )
                    print(
                        f"[{row['t_s']:7.0f} s] {lifecycles} lifecycles, {row['prepares']} prepares; RSS MiB "
                        f"controller {row['controller']['rss_mib']} plugins {row['plugin']['rss_mib']} "
                        f"daemons {row['daemon']['rss_mib']} cluster {row['cluster']['rss_mib']}; logs "
                        f"{sum(row[k]['log_bytes'] for k in LOGGED) / 2**20:.1f} MiB, "
                        f"{sum(row[k]['compactions'] for k in LOGGED)} compactions",
                        flush=True,
                    )
                    await asyncio.sleep(args.sample_every)

            async def restart_forever() -> None:
                turn = 0
                while True:
                    await asyncio.sleep(args.restart_every)
                    if turn % 2 == 0:
                        node = rng.choice(sorted(rack.plugins))
                        killed.append(f"plugin {node}")
                        await kill_plugin(rack, node)
                    else:
                        killed.append("controller")
                        await kill_controller(rack, 0)
                    turn += 1

            background = [asyncio.create_task(sample_forever()), asyncio.create_task(restart_forever())]
            deadline = time.monotonic() + args.duration
            number = 0
            try:
                while lifecycles < args.lifecycles and time.monotonic() < deadline:
                    plans = [
                        DomainPlan(f"s{number}-{i}", f"soak-{i}", workers=args.nodes_per_domain)
                        for i in range(args.domains)
                    ]
                    began = time.monotonic()
                    report = await run_scenario(rack, plans, timeout_s=600)
                    # What the kills explain: a killed process's exit, and a killed plugin's broken health
                    # stream, which its kubelet keeps reporting (bench/chaos.py tolerates the same).
                    broken = tuple(
                        f"{k.split()[1]}: NodeWatchResources of " for k in killed if k.startswith("plugin")
                    )
                    problems = [
                        p for p in report.problems if "exited with -9" not in p and not p.startswith(broken)
                    ]
                    lifecycles += len(plans)
                    rounds.append({
                        "round": number, "s": round(time.monotonic() - began, 2),
                        "formation_s": report.formation_s, "teardown_s": report.teardown_s,
                        "problems": problems[:5],
                    })  # fmt: skip
                    if problems:
                        print(f"round {number}: {problems[:3]}", flush=True)
                    number += 1
            finally:
                for task in background:
                    task.cancel()
                await asyncio.gather(*background, return_exceptions=True)
            await asyncio.sleep(5)  # the last teardown's unprepares and label removals land
            sampler.sample(lifecycles, prepares())
            unprepares = sum(len(u) for k in rack.cluster.kubelets.values() for _, _, u in k.unprepare_calls)
            verify: dict[str, list[str]] = {}
            for db in event_logs(rack):
                if db.exists():  # a domain's daemon log moves to imex-history, or is pruned, meanwhile
                    verify[str(db)] = await verify_log(db)
            result = {
                "lifecycles": lifecycles,
                "prepares": prepares(),
                "unprepares": unprepares,
                "rounds": len(rounds),
                "rounds_with_problems": [r for r in rounds if r["problems"]][:20],
                "kills": killed,
                "restarts": restarter.restarts,
                "samples": sampler.samples,
                "growth_over_last_half": {
                    kind: {
                        "rss": growth(sampler.samples, kind, "rss"),
                        "fds": growth(sampler.samples, kind, "fds"),
                    }
                    for kind in ("controller", "plugin", "daemon", "cluster")
                },
                "largest_process_by_quarter": {
                    kind: {
                        "rss_mib": by_quarter(sampler.samples, kind, "rss_mib_max"),
                        "fds": by_quarter(sampler.samples, kind, "fds_max"),
                    }
                    for kind in ("controller", "plugin", "daemon", "cluster")
                },
                "largest_log_mib_by_quarter": {
                    kind: [round(b / 2**20, 2) for b in by_quarter(sampler.samples, kind, "log_bytes_max")]
                    for kind in LOGGED
                },
                "logs_verified": len(verify),
                "verify_refused": {db: problems for db, problems in verify.items() if problems},
                "left_behind": left_behind(rack),
            }
            return result
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result["samples"]
    t = [s["t_s"] / 60 for s in samples]
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    for kind in ("controller", "plugin", "daemon", "cluster"):
        axes[0][0].plot(t, [s[kind]["rss_mib_max"] for s in samples], label=kind)
        axes[0][1].plot(t, [s[kind]["fds_max"] for s in samples], label=kind)
    for kind in LOGGED:
        axes[1][0].plot(t, [s[kind]["log_bytes_max"] / 2**20 for s in samples], label=kind)
    for kind in ("controller", "plugin"):  # the daemons serve no metrics port on the simulated rack
        axes[1][1].plot(t, [(s[kind].get("append_p99_s") or 0) * 1e3 for s in samples], label=kind)
    titles = ("RSS of the largest process (MiB)", "open descriptors of the largest process",
              "largest event log on disk (MiB)", "append latency p99 since the last sample (ms)")  # fmt: skip
    for ax, title in zip([a for row in axes for a in row], titles, strict=True):
        ax.set_title(title)
        ax.set_xlabel("minutes")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lifecycles", type=int, default=10_000)
    parser.add_argument("--duration", type=float, default=3600.0, help="Seconds at most.")
    parser.add_argument("--domains", type=int, default=6, help="ComputeDomains per round.")
    parser.add_argument("--nodes-per-domain", type=int, default=3)
    parser.add_argument("--restart-every", type=float, default=180.0, help="Seconds between kills.")
    parser.add_argument("--sample-every", type=float, default=30.0)
    parser.add_argument("--retention-size", default="1MiB")
    parser.add_argument("--retention-interval", default="20s")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    started = time.perf_counter()
    result = asyncio.run(soak(args))
    result["wall_s"] = round(time.perf_counter() - started, 1)
    result["settings"] = vars(args)
    result["machine"] = {"python": platform.python_version(), "cpus": len(os.sched_getaffinity(0)),
                         "load_after": os.getloadavg()}  # fmt: skip
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"soak-{stamp}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / "soak-partial.json").unlink(missing_ok=True)
    with contextlib.suppress(ImportError):
        plot(result, out.with_suffix(".png"))
    print(
        f"{result['lifecycles']} lifecycles, {result['prepares']} prepares, {result['unprepares']} "
        f"unprepares in {result['wall_s']} s; {len(result['kills'])} kills, {len(result['restarts'])}"
        " restarts"
    )
    for kind, g in result["growth_over_last_half"].items():
        print(f"  {kind}: RSS {g['rss']}, descriptors {g['fds']}")
        quarters = result["largest_process_by_quarter"][kind]
        print(f"    largest process by quarter: RSS MiB {quarters['rss_mib']}, descriptors {quarters['fds']}")
    print(f"  largest log by quarter (MiB): {result['largest_log_mib_by_quarter']}")
    print(
        f"  verify: {result['logs_verified'] - len(result['verify_refused'])} of "
        f"{result['logs_verified']} pass"
    )
    print(f"  left behind: {result['left_behind']}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
