"""Controller benchmark on the simulated cluster (not a test): three phases, figures printed and saved.

1. Scale-out: from creating 1,000 ComputeDomains to every one having its workload ResourceClaimTemplate and
   its daemon DaemonSet (target: under 20 s).
2. Readiness: one domain with 144 daemon pods (8 cliques of 18) turning Ready one after another; from the last
   pod turning Ready to the domain's status reading Ready with 144 nodes (target: within 2 s). Also counts the
   clique and status writes made meanwhile (batching: far fewer than one per pod change).
3. Failover (bench/failover.py): two `cdctl controller` processes with leader election (the chart's lease
   settings by default); the leader is killed with SIGKILL several times. Figures: from the kill to the Lease
   taken (target with the chart's defaults: under 5 s, to the first action too), from the Lease to the first
   reconcile (target: within 1 s), and each replica's Lease requests a minute.

The simulated API server runs in this process (one event loop, as the controller in phases 1 and 2); the
controller runs without a client-side rate limit (--kube-api-qps 0), with its event log in a SQLite file (as
deployed) or in memory. Results go to bench/results/controller-<UTC time>.json.
Run: `.venv/bin/python -m bench.controller [--domains N] [--event-log sqlite|memory]
[--phases scale-out,readiness,failover] [--failover-rounds N] [--lease 3s,2s,500ms]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from bench.failover import CHART_LEASE, failover_phase
from cdctl.controller.app import run_controller
from cdctl.controller.manager import ControllerManager
from cdctl.controller.settings import ControllerSettings
from cdctl.domain.computedomains import DomainActionSucceeded
from cdctl.domain.events import decode
from cdctl.sim.apiserver.server import ApiServer
from cdctl.sim.apiserver.settings import ServerSettings
from cdctl.sim.rack.chart import cluster_bootstrap_objects
from cdctl.store.base import EventStore
from cdctl.store.memory import InMemoryEventStore
from cdctl.store.sqlite import SqliteEventStore

DRIVER_NAMESPACE = "nvidia-dra"
USER_NAMESPACE = "bench"
RESULTS = Path(__file__).parent / "results"


class Bench:
    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self.store = server.store

    def type_of(self, group: str, plural: str) -> Any:
        return self.store.type_of(group, plural)

    def bootstrap(self) -> None:
        for obj in cluster_bootstrap_objects():
            group, _, _ = obj["apiVersion"].rpartition("/")
            plural = (
                "customresourcedefinitions" if obj["kind"] == "CustomResourceDefinition" else "deviceclasses"
            )
            self.store.create(self.type_of(group, plural), "", obj)
        for namespace in (DRIVER_NAMESPACE, USER_NAMESPACE):
            self.store.create(self.type_of("", "namespaces"), "", {"metadata": {"name": namespace}})

    def create_domain(self, name: str, num_nodes: int = 0) -> dict[str, Any]:
        body = {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomain",
            "metadata": {"name": name, "namespace": USER_NAMESPACE},
            "spec": {
                "numNodes": num_nodes,
                "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}},
            },
        }
        return self.store.create(self.type_of("resource.nvidia.com", "computedomains"), USER_NAMESPACE, body)

    def count(self, group: str, plural: str, namespace: str) -> int:
        items, _ = self.store.list_objects(self.type_of(group, plural), namespace)
        return len(items)

    def daemon_pod(self, uid: str, node: str, ip: str, clique: str) -> dict[str, Any]:
        labels = {
            "resource.nvidia.com/computeDomain": uid,
            "resource.nvidia.com/computeDomain.cliqueID": clique,
        }
        pods = self.type_of("", "pods")
        pod = self.store.create(
            pods,
            DRIVER_NAMESPACE,
            {
                "metadata": {"name": f"daemon-{node}", "labels": labels},
                "spec": {"nodeName": node, "containers": [{"name": "d", "image": "i"}]},
            },
        )
        return self.set_ready(pod, ip, ready=False)

    def set_ready(self, pod: dict[str, Any], ip: str, ready: bool) -> dict[str, Any]:
        pods = self.type_of("", "pods")
        current = self.store.get(pods, DRIVER_NAMESPACE, pod["metadata"]["name"])
        current["status"] = {
            "podIP": ip,
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        }
        return self.store.update(
            pods, DRIVER_NAMESPACE, pod["metadata"]["name"], current, subresource="status"
        )

    def exists(self, group: str, plural: str, namespace: str, name: str) -> bool:
        return bool(self.store.exists_name(self.type_of(group, plural), namespace, name))

    def domain_status(self, name: str) -> dict[str, Any]:
        cd = self.store.get(self.type_of("resource.nvidia.com", "computedomains"), USER_NAMESPACE, name)
        return cd.get("status") or {}


async def until(condition: Any, give_up_s: float = 600.0, poll_s: float = 0.01) -> None:
    deadline = time.monotonic() + give_up_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark condition never held")
        await asyncio.sleep(poll_s)


def converged(manager: ControllerManager, uids: list[str]) -> bool:
    """Every domain's workload template and DaemonSet exist, as the API server's watch events report them.

    (Reading the controller's view keeps polling cheap; listing 1,000 objects every few ms would compete for
    the one CPU the server and the controller share. The final count below is read from the server.)
    """
    for uid in uids:
        state = manager.view.domain(uid)
        templates = state.of_kind("ResourceClaimTemplate")
        if not state.of_kind("DaemonSet") or not any(
            t.summary.get("target") == "Workload" for t in templates
        ):
            return False
    return True


async def scale_out(bench: Bench, manager: ControllerManager, domains: int) -> dict[str, Any]:
    started = time.monotonic()
    uids = [bench.create_domain(f"cd-{index:04d}")["metadata"]["uid"] for index in range(domains)]
    created = time.monotonic()
    await until(lambda: converged(manager, uids), poll_s=0.05)
    done = time.monotonic()
    templates = bench.count("resource.k8s.io", "resourceclaimtemplates", USER_NAMESPACE)
    daemon_sets = bench.count("apps", "daemonsets", DRIVER_NAMESPACE)
    if templates < domains or daemon_sets < domains:
        raise RuntimeError(
            f"server has {templates} templates and {daemon_sets} DaemonSets for {domains} domains"
        )
    return {
        "domains": domains,
        "create_s": round(created - started, 3),
        "converged_s": round(done - started, 3),
    }


async def readiness(bench: Bench, manager: ControllerManager, log: EventStore) -> dict[str, Any]:
    nodes, per_clique = 144, 18
    uid = bench.create_domain("big", num_nodes=nodes)["metadata"]["uid"]
    pods = [
        bench.daemon_pod(uid, f"gb200-{i:03d}", f"10.1.{i // 256}.{i % 256}", f"fabric.{i // per_clique}")
        for i in range(nodes)
    ]
    await until(lambda: len(bench.domain_status("big").get("nodes") or []) == nodes)
    before = await writes(log, uid)
    first_ready = time.monotonic()
    for i, pod in enumerate(pods):  # daemons turn Ready one after another, over about a second
        bench.set_ready(pod, f"10.1.{i // 256}.{i % 256}", ready=True)
        await asyncio.sleep(0.005)
    last_ready = time.monotonic()
    await until(lambda: bench.domain_status("big").get("status") == "Ready", give_up_s=120)
    ready_after = time.monotonic() - last_ready
    after = await writes(log, uid)
    status = bench.domain_status("big")
    return {
        "nodes": len(status["nodes"]),
        "cliques": nodes // per_clique,
        "readiness_spread_s": round(last_ready - first_ready, 3),
        "ready_after_last_pod_s": round(ready_after, 3),
        "status_writes": after["update-status"] - before["update-status"],
        "clique_writes": after["update-clique"] - before["update-clique"],
    }


async def writes(log: EventStore, uid: str) -> dict[str, int]:
    counts = {"update-status": 0, "update-clique": 0}
    for recorded in await log.read_stream(f"domain/{uid}"):
        event = decode(recorded)
        if isinstance(event, DomainActionSucceeded) and event.action in counts:
            counts[event.action] += 1
    return counts


PHASES = ("scale-out", "readiness", "failover")


async def main(
    domains: int, event_log: str, phases: tuple[str, ...], failover: dict[str, Any]
) -> dict[str, Any]:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    result: dict[str, Any] = {
        "benchmark": "controller",
        "settings": {
            "workers": 32,
            "kube_api_qps": 0,
            "event_log": event_log,
            "api_server": "cdctl.sim in process",
            "phases": list(phases),
        },
    }
    async with ApiServer(settings=ServerSettings(history_window=200_000)) as server:
        bench = Bench(server)
        bench.bootstrap()
        workdir = Path(tempfile.mkdtemp())
        if "scale-out" in phases or "readiness" in phases:
            result.update(await in_process_phases(server, bench, workdir, domains, event_log, phases))
        if "failover" in phases:
            result["failover"] = await failover_phase(
                server,
                bench,
                namespace=DRIVER_NAMESPACE,
                user_namespace=USER_NAMESPACE,
                workdir=workdir,
                **failover,
            )
    result["at"] = datetime.now(UTC).isoformat(timespec="seconds")
    result["machine"] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),  # other work on the machine skews figures
    }
    return result


async def in_process_phases(
    server: ApiServer, bench: Bench, workdir: Path, domains: int, event_log: str, phases: tuple[str, ...]
) -> dict[str, Any]:
    """Scale-out and readiness: one controller in this process, no leader election."""
    kubeconfig = server.write_kubeconfig(workdir / "kubeconfig")
    settings = ControllerSettings(
        pod_name="bench",
        image_name="example.com/cdctl:bench",
        log_verbosity_cd_daemon=0,
        namespace=DRIVER_NAMESPACE,
        kubeconfig=str(kubeconfig),
        kube_api_qps=0.0,
        workers=32,
    )
    log: EventStore = (
        InMemoryEventStore()
        if event_log == "memory"
        else await SqliteEventStore.open(workdir / "controller.db")
    )
    started: list[ControllerManager] = []
    task = asyncio.create_task(run_controller(settings, started=started, store=log))
    await until(lambda: bool(started) or task.done())
    if task.done():
        task.result()
    manager = started[0]
    await manager.synced.wait()
    figures: dict[str, Any] = {}
    try:
        if "scale-out" in phases:
            figures["scale_out"] = await scale_out(bench, manager, domains)
        if "readiness" in phases:
            figures["readiness"] = await readiness(bench, manager, log)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        figures["events_recorded"] = log.head()
        await log.close()
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", type=int, default=1000)
    parser.add_argument("--event-log", choices=["sqlite", "memory"], default="sqlite")
    parser.add_argument(
        "--phases", default=",".join(PHASES), help=f"comma list of {', '.join(PHASES)} (default: all)"
    )
    parser.add_argument(
        "--failover-domains", type=int, default=300, help="domains converged before the kills"
    )
    parser.add_argument("--failover-rounds", type=int, default=5, help="how many times the leader is killed")
    parser.add_argument(
        "--failover-window", type=float, default=30.0, help="seconds over which Lease requests are counted"
    )
    parser.add_argument(
        "--lease",
        default=",".join(CHART_LEASE[k] for k in ("leaseDuration", "renewDeadline", "retryPeriod")),
        help="leaseDuration,renewDeadline,retryPeriod (default: the chart's)",
    )
    args = parser.parse_args()
    chosen = tuple(p.strip() for p in args.phases.split(",") if p.strip())
    unknown = set(chosen) - set(PHASES)
    if unknown:
        parser.error(f"--phases: unknown {', '.join(sorted(unknown))}; choose from {', '.join(PHASES)}")
    durations = args.lease.split(",")
    if len(durations) != 3:
        parser.error("--lease: want leaseDuration,renewDeadline,retryPeriod, e.g. 3s,2s,500ms")
    failover = {
        "domains": args.failover_domains,
        "rounds": args.failover_rounds,
        "window_s": args.failover_window,
        "lease": dict(zip(("leaseDuration", "renewDeadline", "retryPeriod"), durations, strict=True)),
    }
    result = asyncio.run(main(args.domains, args.event_log, chosen, failover))
    print(json.dumps(result, indent=2))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"controller-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {out}")
