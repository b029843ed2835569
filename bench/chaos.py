"""Chaos on the simulated cluster (not a test): racks form, run and tear down while components are killed.

Each round runs the seeds' scenario on `--racks` racks of `--nodes` nodes (one ComputeDomain and one job per
rack, every node a worker), with two controller replicas under leader election, while a seeded monkey
(cdctl.sim.rack.chaos) kills with -9, one after another at random moments, controller replicas, kubelet
plugins, IMEX daemon containers and simulated kubelets; `--before-teardown` of the round's `--kills` land
while the domains form and run, the rest during teardown. A Restarter brings each killed container back as
the kubelet would (after `--restart-delay`). Per round it reports the kills by kind, the restarts, formation
and teardown times, how long the domains took to converge again after the last kill before teardown, and
every invariant that broke: a worker without its channel, a claim prepared for two allocations or a device
held twice, a prepare the kubelet saw missing from the node's log, an event log `cdctl verify` refuses
(checked here with the `cdctl verify` command itself, on every log), anything left behind. Writes
bench/results/chaos-<UTC time>.json; the exit code is 1 if any invariant broke.

    .venv/bin/python bench/chaos.py [--racks 2] [--nodes 18] [--rounds 3] [--kills 12]
                                    [--before-teardown 8] [--seed 1] [--restart-delay 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cdctl.sim.rack.chaos import ChaosPlan, Monkey, Witness, event_logs, invariants, settle, tolerated
from cdctl.sim.rack.checks import worker_states
from cdctl.sim.rack.faults import Restarter
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.observe import domain_shape, unsettled
from cdctl.sim.rack.scenario import DomainPlan, Progress, run_scenario
from cdctl.sim.rack.settings import RackSettings

RESULTS = Path(__file__).parent / "results"
SLOW_STEP_S = 15.0  # a scenario step slower than this gets what the kubelets waited on recorded


def not_converged(rack: Rack, plans: list[DomainPlan]) -> str | None:
    for plan in plans:
        workers = [w for job in plan.job_names for w in worker_states(rack, plan.namespace, job)]
        running = {w.node for w in workers if w.done}
        if len(running) != plan.nodes:
            return f"{plan.name}: {len(running)}/{plan.nodes} workers"
        if (why := unsettled(domain_shape(rack, plan.namespace, plan.name), running)) is not None:
            return f"{plan.name}: {why}"
    return None


def cdctl_verify(db: Path) -> str | None:
    """`cdctl verify --db DB`; its complaint, or None when it passes."""
    cdctl = Path(sys.executable).parent / "cdctl"
    result = subprocess.run(
        [str(cdctl), "verify", "--db", str(db)], capture_output=True, text=True, timeout=300, check=False
    )
    return None if result.returncode == 0 else (result.stderr.strip() or result.stdout.strip())


async def one_round(
    rack: Rack, plans: list[DomainPlan], args: argparse.Namespace, number: int, monkeys: list[Monkey]
) -> dict[str, Any]:
    """One round; `monkeys` are the earlier rounds' (what they killed still explains problems the kubelets
    keep, such as a broken health stream)."""
    monkey = Monkey(rack, ChaosPlan(seed=args.seed * 1000 + number, kills=args.kills))
    monkeys.append(monkey)
    converge: dict[str, float] = {}

    async def under_chaos(rack: Rack) -> None:
        deadline = time.monotonic() + 600
        while True:
            if len(monkey.kills) >= args.before_teardown or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        began = time.monotonic()
        while (missing := not_converged(rack, plans)) is not None:
            if time.monotonic() - began > 300:
                raise RuntimeError(f"not converged after 300 s: {missing}")
            await asyncio.sleep(0.05)
        converge["after_kills_s"] = time.monotonic() - began

    slow: dict[str, list[str]] = {}
    phase_began: dict[str, float] = {}

    def watch_slow_steps(progress: Progress) -> None:
        """A step that has taken over SLOW_STEP_S: note once what the kubelets were waiting on."""
        began = phase_began.setdefault(progress.phase, time.monotonic())
        if time.monotonic() - began > SLOW_STEP_S and progress.phase not in slow:
            kubelets = sorted(rack.cluster.kubelets.items())
            slow[progress.phase] = (
                [f"{node}: {error}" for node, kubelet in kubelets for error in kubelet.last_errors.values()]
                + [
                    f"{node}: claims of {len(pods)} pods deleted while its kubelet was down wait for its DRA "
                    f"reconcile (every {kubelet.dra_reconcile_s:.0f} s)"
                    for node, kubelet in kubelets
                    if (pods := kubelet.awaiting_dra_reconcile())
                ]
                + [f"{c.name} is down" for c in rack.exited()]
                + [
                    f"{node}: still holds the claims of {len(gone)} pods that are gone"
                    for node, kubelet in kubelets
                    if (
                        gone := set(kubelet.claim_refs)
                        - {p["metadata"]["uid"] for p in rack.store.pods_on_node(node)}
                    )
                ]
            )

    async with Restarter(rack, delay_s=args.restart_delay) as restarter:
        with Witness(rack) as witness:
            chaos = asyncio.create_task(monkey.run())
            report = await run_scenario(
                rack, plans, while_formed=under_chaos, timeout_s=600, observe=watch_slow_steps
            )
            monkey.stop()
            await chaos
            down = await settle(rack, 120)
    problems = tolerated(report.problems, *monkeys) + down + await invariants(rack, witness)
    return {
        "round": number,
        "kills": [str(k) for k in monkey.kills],
        "kills_by_kind": dict(collections.Counter(k.kind for k in monkey.kills)),
        "restarts": restarter.restarts,
        "formation_s": round(report.formation_s, 3) if report.formation_s is not None else None,
        "teardown_s": round(report.teardown_s, 3) if report.teardown_s is not None else None,
        "converged_after_kills_s": round(converge["after_kills_s"], 3) if converge else None,
        "workers_ran": len(witness.ran),
        "steps": {name: round(seconds, 3) for name, seconds in report.steps},
        "slow_steps": slow,
        "problems": problems[:20],
        "problem_count": len(problems),
    }


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    work_dir = Path(tempfile.mkdtemp(prefix="cdchaos-", dir="/tmp"))
    try:
        settings = RackSettings(
            work_dir,
            racks=args.racks,
            nodes_per_rack=args.nodes,
            controller_replicas=2,
            start_timeout_s=600.0,
        )
        plans = [
            DomainPlan(f"chaos{r}", f"chaos-{r}", workers=args.nodes, num_nodes=0) for r in range(args.racks)
        ]
        async with Rack(settings) as rack:
            rounds: list[dict[str, Any]] = []
            monkeys: list[Monkey] = []
            for number in range(1, args.rounds + 1):
                started = time.perf_counter()
                result = await one_round(rack, plans, args, number, monkeys)
                rounds.append(result)
                print(
                    f"round {number}: {len(result['kills'])} kills {result['kills_by_kind']}, "
                    f"{len(result['restarts'])} restarts, formation {result['formation_s']} s, "
                    f"converged {result['converged_after_kills_s']} s after the kills, "
                    f"teardown {result['teardown_s']} s, {result['problem_count']} problems "
                    f"({time.perf_counter() - started:.0f} s)",
                    flush=True,
                )
                for problem in result["problems"]:
                    print(f"    {problem}", flush=True)
                for phase, waits in result["slow_steps"].items():
                    print(f"    slow step '{phase}': {waits[:5]}", flush=True)
            logs = event_logs(rack)
            refused = {str(db): complaint for db in logs if (complaint := cdctl_verify(db)) is not None}
            print(f"cdctl verify: {len(logs) - len(refused)} of {len(logs)} event logs pass", flush=True)
            return {"rounds": rounds, "logs_verified": len(logs), "verify_refused": refused}
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--racks", type=int, default=2)
    parser.add_argument("--nodes", type=int, default=18, help="Nodes per rack.")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kills", type=int, default=12, help="Kills per round.")
    parser.add_argument("--before-teardown", type=int, default=8, help="Kills before teardown begins.")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--restart-delay", type=float, default=1.0, help="Seconds before a restart.")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    outcome = asyncio.run(measure(args))
    broken = sum(r["problem_count"] for r in outcome["rounds"]) + len(outcome["verify_refused"])
    document = {
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
        },
        "settings": vars(args),
        "load_average_before": round(load_before, 2),
        "load_average_after": round(os.getloadavg()[0], 2),
        "seconds": round(time.perf_counter() - started, 1),
        "invariants_broken": broken,
        **outcome,
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"chaos-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"{broken} invariants broken; wrote {path}", flush=True)
    sys.exit(1 if broken else 0)


if __name__ == "__main__":
    main()
