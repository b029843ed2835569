"""Controller benchmark on the simulated cluster (not a test): figures printed and saved.

1. Lifecycle (`lifecycle_create`, `lifecycle_delete`): `cdctl controller` runs as its own process, as the rack
   and a cluster run it (bench/process.py, json logs, event log file, client QPS 1000); N ComputeDomains
   (default 1,000) are created at once, converged (finalizer, daemon template, DaemonSet, workload template
   and status on the server), deleted at once, and gone (domains, templates and DaemonSets). Per phase: wall
   time to converged or gone, the controller's own CPU seconds (from /proc, until it is idle again, so work
   deferred past the phase's end, such as the history table, is counted), API requests per domain by verb
   and resource (counted by the simulated API server), and at the end the peak RSS (VmHWM), events appended
   per domain (read from its event log) and log lines per domain. The simulated DaemonSet controller runs
   beside it (it writes each DaemonSet's status, as a cluster's does). Where the time goes: `--sample PATH`
   records the controller with py-spy, if installed (a sampling profile; writes PATH and PATH.txt), and
   `--profile PATH` runs it under cProfile (several times slower; writes PATH and PATH.txt): both for the
   shares, not for the figures.
2. Scale-out (in process): from creating N ComputeDomains to every one having its workload
   ResourceClaimTemplate and its daemon DaemonSet (target: under 20 s).
3. Readiness (in process): one domain with 144 daemon pods (8 cliques of 18) turning Ready one after
   another; from the last pod turning Ready to the domain's status reading Ready with 144 nodes (target:
   within 2 s). Also counts the clique and status writes made meanwhile (batching: far fewer than one per pod
   change).
4. Failover (bench/failover.py): two `cdctl controller` processes with leader election (the chart's lease
   settings by default); the leader is killed with SIGKILL several times. Figures: from the kill to the Lease
   taken (target with the chart's defaults: under 5 s, to the first action too), from the Lease to the first
   reconcile (target: within 1 s), and each replica's Lease requests a minute (`--failover-rounds`,
   `--failover-domains`, `--lease`).

The simulated API server runs in this process; phases 2 and 3 run the controller in it too (one event loop),
without a client-side rate limit (--kube-api-qps 0), with its event log in a SQLite file (as deployed) or in
memory. Results go to bench/results/controller-<UTC time>.json.
Run: `.venv/bin/python -m bench.controller [--domains N] [--phases lifecycle,scale-out,readiness]
[--event-log sqlite|memory] [--controller-args '--workers 16'] [--controller-source DIR] [--sample PATH]
[--profile PATH]`; `--controller-source` runs another checkout's controller (bench/fromsource.py) against the
same simulated server, for before and after figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import platform
import pstats
import signal
import sqlite3
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from typing import Any

import structlog

from bench.failover import CHART_LEASE, failover_phase
from bench.process import ControllerProcess
from bench.samples import summarize
from cdctl.controller.app import run_controller
from cdctl.controller.manager import ControllerManager
from cdctl.controller.settings import ControllerSettings
from cdctl.domain.computedomains import FINALIZER, DomainActionSucceeded
from cdctl.domain.events import decode
from cdctl.sim.apiserver.server import ApiServer
from cdctl.sim.apiserver.settings import ServerSettings
from cdctl.sim.controllers.controllerloop import ControllerLoop
from cdctl.sim.controllers.daemonsets import DaemonSetController
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

    def exists(self, group: str, plural: str, namespace: str, name: str) -> bool:
        return bool(self.store.exists_name(self.type_of(group, plural), namespace, name))

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


# ---- lifecycle: the controller as its own process ---------------------------------------------------------
QUIET_S = 2.0  # the controller counts as idle once its CPU time grows by under 1 % over this long


def lifecycle_converged(bench: Bench, domains: int) -> bool:
    """On the server: every domain has the finalizer and a status, and its template and DaemonSet exist."""
    store = bench.store
    cd_type = bench.type_of("resource.nvidia.com", "computedomains")
    cds, _ = store.list_objects(cd_type, USER_NAMESPACE, copies=False)
    if len(cds) < domains:
        return False
    for cd in cds:
        has_status = "status" in (cd.get("status") or {})
        if not has_status or FINALIZER not in (cd["metadata"].get("finalizers") or []):
            return False
    templates = bench.type_of("resource.k8s.io", "resourceclaimtemplates")
    workload, _ = store.list_objects(templates, USER_NAMESPACE, copies=False)
    daemon, _ = store.list_objects(templates, DRIVER_NAMESPACE, copies=False)
    daemon_sets, _ = store.list_objects(bench.type_of("apps", "daemonsets"), DRIVER_NAMESPACE, copies=False)
    return len(workload) >= domains and len(daemon) >= domains and len(daemon_sets) >= domains


def lifecycle_gone(bench: Bench) -> bool:
    """On the server: no domain, template or DaemonSet is left."""
    kinds = [
        ("resource.nvidia.com", "computedomains"),
        ("resource.k8s.io", "resourceclaimtemplates"),
        ("apps", "daemonsets"),
    ]
    return all(not bench.store.list_objects(bench.type_of(*kind), None, copies=False)[0] for kind in kinds)


async def reconciles(controller: ControllerProcess) -> dict[str, float]:
    """Reconciles so far by result, from the controller's metrics."""
    prefix = 'cdctl_controller_reconcile_total{result="'
    samples = await controller.metrics()
    return {name[len(prefix) : -2]: value for name, value in samples.items() if name.startswith(prefix)}


async def until_quiet(controller: ControllerProcess, give_up_s: float = 600.0) -> float:
    """Wait until the controller's CPU time stops growing (deferred work done); its CPU seconds then."""
    deadline = time.monotonic() + give_up_s
    before = controller.cpu_s()
    while time.monotonic() < deadline:
        await asyncio.sleep(QUIET_S)
        controller.check_alive()
        now = controller.cpu_s()
        if now - before < 0.01 * QUIET_S:
            return now
        before = now
    raise TimeoutError("the controller never went idle")


class CollectorClock:
    """CPU seconds this process (the simulated server) spends in the garbage collector, by generation,
    while in use: full collections walk every stored version in the watch history."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self._started = 0.0

    def _on_collect(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.thread_time()
        else:
            self.seconds[info["generation"]] += time.thread_time() - self._started

    def __enter__(self) -> CollectorClock:
        gc.callbacks.append(self._on_collect)
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self._on_collect)


def phase_figures(
    started: float, acted: float, wall: float, cpu: tuple[float, float, float], domains: int
) -> dict[str, float]:
    """A lifecycle phase's timings: requests sent, done, and the controller's CPU (before, at done, once
    idle again), also per domain."""
    before, at_done, quiet = cpu
    return {
        "requests_s": round(acted - started, 3),
        "wall_s": round(wall, 3),
        "controller_cpu_s_at_done": round(at_done - before, 3),
        "controller_cpu_s": round(quiet - before, 3),
        "controller_cpu_ms_per_domain": round((quiet - before) * 1000 / domains, 2),
    }


async def lifecycle_phase(
    bench: Bench, controller: ControllerProcess, domains: int, act: Any, done: Any
) -> dict[str, Any]:
    """Run `act()`, wait for `done()`, then for the controller to go idle; the phase's figures."""
    requests = bench.server.requests
    requests.reset()
    reconciles_before = await reconciles(controller)
    cpu_before, server_cpu_before = controller.cpu_s(), time.process_time()
    system_before = controller.system_s()
    threads_before = controller.thread_cpu_s()
    io_before = controller.io()
    started = time.monotonic()
    act()
    acted = time.monotonic()

    def finished() -> bool:
        controller.check_alive()
        return bool(done())

    with CollectorClock() as collector:
        await until(finished, poll_s=0.2)
    wall = time.monotonic() - started
    cpu_at_done, server_cpu_at_done = controller.cpu_s(), time.process_time()
    cpu_quiet = await until_quiet(controller)
    system = controller.system_s() - system_before
    io_after = controller.io()
    threads = {
        role: round(seconds - threads_before.get(role, 0.0), 3)
        for role, seconds in controller.thread_cpu_s().items()
    }
    counts = requests.by_verb_and_resource()
    reconciles_after = await reconciles(controller)
    reconciled = {
        k: round((n - reconciles_before.get(k, 0)) / domains, 2) for k, n in reconciles_after.items()
    }
    return {
        **phase_figures(started, acted, wall, (cpu_before, cpu_at_done, cpu_quiet), domains),
        "controller_system_cpu_s": round(system, 3),  # of controller_cpu_s: the kernel's (fsync, sockets)
        "controller_io_per_domain": {
            key: round((io_after[key] - io_before[key]) / domains, 1)
            for key in ("syscw", "wchar", "write_bytes")
        },
        "controller_cpu_s_by_thread": threads,  # its event loop's thread, and SQLite's and the others
        # this process: the simulated API server, its DaemonSet controller and the benchmark's polling
        "server_cpu_s_at_done": round(server_cpu_at_done - server_cpu_before, 3),
        "server_gc_cpu_s_by_generation": [round(seconds, 3) for seconds in collector.seconds],
        "api_requests_per_domain": {key: round(n / domains, 3) for key, n in counts.items()},
        "api_writes_per_domain": round(requests.writes() / domains, 3),
        "reconciles_per_domain": reconciled,
        "api_requests_failed": requests.failed(),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


async def lifecycle_create(bench: Bench, controller: ControllerProcess, domains: int) -> dict[str, Any]:
    def create() -> None:
        for index in range(domains):
            bench.create_domain(f"cd-{index:04d}")

    return await lifecycle_phase(
        bench, controller, domains, create, lambda: lifecycle_converged(bench, domains)
    )


async def lifecycle_delete(bench: Bench, controller: ControllerProcess, domains: int) -> dict[str, Any]:
    cds = bench.type_of("resource.nvidia.com", "computedomains")

    def delete() -> None:
        for index in range(domains):
            bench.store.delete(cds, USER_NAMESPACE, f"cd-{index:04d}")

    return await lifecycle_phase(bench, controller, domains, delete, lambda: lifecycle_gone(bench))


def events_per_domain(db: Path, domains: int) -> dict[str, Any]:
    """What the controller appended to its log for the domains' streams, per domain and by type."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute(
            "SELECT type, COUNT(*) FROM events WHERE stream LIKE 'domain/%' GROUP BY type ORDER BY type"
        ).fetchall()
        total = conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
        size = conn.execute("SELECT SUM(LENGTH(data) + LENGTH(metadata)) FROM events").fetchone()[0] or 0
    by_type = {str(kind): round(n / domains, 2) for kind, n in rows}
    return {
        "per_domain": round(sum(n for _, n in rows) / domains, 2),
        "by_type_per_domain": by_type,
        "total_in_log": int(total),
        "json_bytes_per_event": round(size / max(1, total)),
    }


def profile_summary(profile: Path, lines: int = 40) -> str:
    """The top functions by cumulative and by own time, as text."""
    out = []
    for order in ("cumulative", "tottime"):
        buffer = StringIO()
        stats = pstats.Stats(str(profile), stream=buffer)
        stats.strip_dirs().sort_stats(order).print_stats(lines)
        out.append(buffer.getvalue())
    return "\n".join(out)


def py_spy() -> Path:
    spy = Path(sys.executable).parent / "py-spy"
    if not spy.is_file():
        raise SystemExit("--sample needs py-spy beside the interpreter (pip install py-spy)")
    return spy


async def sampled(pid: int, out: Path) -> asyncio.subprocess.Process:
    """py-spy recording process `pid` until it is stopped (raw stacks in `out`): samples of the thread
    holding the GIL, so Python work; SQLite and the kernel (fsync) run outside it."""
    return await asyncio.create_subprocess_exec(
        str(py_spy()), "record", "--pid", str(pid), "--format", "raw", "--rate", "200",
        "--nonblocking", "--gil", "--output", str(out),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip


@contextlib.asynccontextmanager
async def sampling(controller: ControllerProcess, sample: Path | None, phase: str) -> AsyncIterator[None]:
    """Record the controller and this process (the simulated server) during one phase, each to its own
    file beside `sample` (`<sample>.<phase>.controller`, `.server`), with a summary of each."""
    if sample is None:
        yield
        return
    sample.parent.mkdir(parents=True, exist_ok=True)
    outputs = {who: sample.with_name(f"{sample.name}.{phase}.{who}") for who in ("controller", "server")}
    spies = [
        await sampled(controller.pid, outputs["controller"]),
        await sampled(os.getpid(), outputs["server"]),
    ]
    try:
        yield
    finally:
        for spy in spies:
            with contextlib.suppress(ProcessLookupError):
                spy.send_signal(signal.SIGINT)  # py-spy writes what it has on SIGINT
            await spy.wait()
    for out in outputs.values():
        if out.is_file():
            out.with_suffix(out.suffix + ".txt").write_text(summarize(out))


async def lifecycle(
    domains: int,
    profile: Path | None,
    sample: Path | None = None,
    event_log: str = "sqlite",
    extra_args: tuple[str, ...] = (),
    source: Path | None = None,
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="cdctl-bench-"))
    async with ApiServer(settings=ServerSettings(history_window=200_000)) as server:
        bench = Bench(server)
        bench.bootstrap()
        # The DaemonSet controller writes each new DaemonSet's status, as a cluster's does (one more change
        # the controller observes per domain).
        daemon_sets = DaemonSetController(server.store)
        daemon_set_loop = ControllerLoop("daemonsets", server.store, daemon_sets.kinds, daemon_sets.reconcile)
        daemon_set_loop.start()
        kubeconfig = server.write_kubeconfig(work / "kubeconfig")
        (work / "none.pem").touch()  # plain http: do not parse the system CA bundle
        db = work / "controller.db"
        controller = await ControllerProcess.start(
            kubeconfig,
            db if event_log == "sqlite" else None,
            work / "controller.log",
            namespace=DRIVER_NAMESPACE,
            profile=profile,
            extra_args=extra_args,
            source=source,
            env={"SSL_CERT_FILE": str(work / "none.pem"), "SSL_CERT_DIR": str(work)},
        )
        if sample is not None:
            py_spy()
        try:
            await until_quiet(controller)
            started = {"cpu_s": round(controller.cpu_s(), 3), "rss_mib": controller.rss_mib()}
            lines_before = controller.log_lines()
            async with sampling(controller, sample, "create"):
                create = await lifecycle_create(bench, controller, domains)
            create["rss_mib_after"] = controller.rss_mib()
            async with sampling(controller, sample, "delete"):
                delete = await lifecycle_delete(bench, controller, domains)
            delete["rss_mib_after"] = controller.rss_mib()
            peak = controller.peak_rss_mib()
            log_lines = controller.log_lines() - lines_before
        finally:
            await controller.stop()
            await daemon_set_loop.stop()
    result: dict[str, Any] = {
        "domains": domains,
        "started": started,
        "create": create,
        "delete": delete,
        "controller_cpu_ms_per_lifecycle": round(
            create["controller_cpu_ms_per_domain"] + delete["controller_cpu_ms_per_domain"], 2
        ),
        "peak_rss_mib": peak,
        "event_log": event_log,
        "controller_args": list(extra_args),
        "controller_source": str(source) if source is not None else "this tree",
        "events": events_per_domain(db, domains) if event_log == "sqlite" else None,
        "log_lines_per_domain": round(log_lines / domains, 2),
        "profiled": profile is not None or sample is not None,
    }
    if profile is not None:
        summary = profile.with_suffix(profile.suffix + ".txt")
        summary.write_text(profile_summary(profile))
        result["profile"] = str(profile)
    if sample is not None:
        result["samples"] = sorted(
            str(path) for path in sample.parent.glob(f"{sample.name}.*.*") if path.suffix != ".txt"
        )
    return result


async def in_process(domains: int, event_log: str, phases: set[str]) -> dict[str, Any]:
    """Phases 2 and 3: the controller in this process."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    async with ApiServer(settings=ServerSettings(history_window=200_000)) as server:
        bench = Bench(server)
        bench.bootstrap()
        kubeconfig = server.write_kubeconfig(Path(tempfile.mkdtemp()) / "kubeconfig")
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
            else await SqliteEventStore.open(Path(tempfile.mkdtemp()) / "controller.db")
        )
        started: list[ControllerManager] = []
        task = asyncio.create_task(run_controller(settings, started=started, store=log))
        await until(lambda: bool(started) or task.done())
        if task.done():
            task.result()
        manager = started[0]
        await manager.synced.wait()
        try:
            first = await scale_out(bench, manager, domains) if "scale-out" in phases else None
            second = await readiness(bench, manager, log) if "readiness" in phases else None
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            events_recorded = log.head()
            await log.close()
    return {
        "settings": {
            "workers": 32,
            "kube_api_qps": 0,
            "event_log": event_log,
            "api_server": "cdctl.sim in process",
        },
        "scale_out": first,
        "readiness": second,
        "events_recorded": events_recorded,
    }


PHASES = ("lifecycle", "scale-out", "readiness", "failover")


async def failover(options: dict[str, Any]) -> dict[str, Any]:
    """Two `cdctl controller` processes with leader election (bench/failover.py); the leader is killed with
    SIGKILL `rounds` times: kill to Lease taken, Lease to first reconcile, Lease requests a minute."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    async with ApiServer(settings=ServerSettings(history_window=200_000)) as server:
        bench = Bench(server)
        bench.bootstrap()
        return await failover_phase(
            server,
            bench,
            namespace=DRIVER_NAMESPACE,
            user_namespace=USER_NAMESPACE,
            workdir=Path(tempfile.mkdtemp()),
            **options,
        )


async def main(
    domains: int,
    event_log: str,
    phases: set[str],
    profile: Path | None,
    sample: Path | None = None,
    extra_args: tuple[str, ...] = (),
    source: Path | None = None,
    failover_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "benchmark": "controller",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average_1m_at_start": round(
                os.getloadavg()[0], 2
            ),  # other work on the machine skews figures
        },
    }
    if "lifecycle" in phases:
        result["lifecycle"] = await lifecycle(domains, profile, sample, event_log, extra_args, source)
    if phases & {"scale-out", "readiness"}:
        result["in_process"] = await in_process(domains, event_log, phases)
    if "failover" in phases:
        result["failover"] = await failover(failover_options or {})
    result["machine"]["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", type=int, default=1000)
    parser.add_argument(
        "--kubeconfig", type=Path, default=None,
        help="run the lifecycle on this real cluster, not the simulated server (bench/controller_real.py)",
    )  # fmt: skip
    parser.add_argument("--event-log", choices=["sqlite", "memory"], default="sqlite")
    parser.add_argument("--phases", default=",".join(PHASES), help=f"comma list of {', '.join(PHASES)}")
    parser.add_argument(
        "--profile", type=Path, default=None, help="run the lifecycle's controller under cProfile"
    )
    parser.add_argument("--sample", type=Path, default=None, help="record the controller with py-spy")
    parser.add_argument("--controller-args", default="", help="more flags for the lifecycle's controller")
    parser.add_argument(
        "--controller-source", type=Path, default=None, help="run the controller from this source tree"
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
    durations = args.lease.split(",")
    if len(durations) != 3:
        parser.error("--lease: want leaseDuration,renewDeadline,retryPeriod, e.g. 3s,2s,500ms")
    failover_options = {
        "domains": args.failover_domains,
        "rounds": args.failover_rounds,
        "window_s": args.failover_window,
        "lease": dict(zip(("leaseDuration", "renewDeadline", "retryPeriod"), durations, strict=True)),
    }
    chosen = {p.strip() for p in args.phases.split(",") if p.strip()}
    if not chosen <= set(PHASES):
        parser.error(f"unknown phases: {', '.join(sorted(chosen - set(PHASES)))}")
    extra = tuple(args.controller_args.split())
    if args.kubeconfig is not None:
        from bench.controller_real import lifecycle_on

        real = asyncio.run(lifecycle_on(args.kubeconfig, args.domains, extra, args.sample, args.profile))
        if args.profile is not None:
            args.profile.with_suffix(args.profile.suffix + ".txt").write_text(profile_summary(args.profile))
        result = {"benchmark": "controller", "at": datetime.now(UTC).isoformat(timespec="seconds"),
                  "machine": {"cpus": os.cpu_count(), "load_average_1m_at_end": round(os.getloadavg()[0], 2)},
                  "lifecycle": real}  # fmt: skip
        print(json.dumps(result, indent=2))
        RESULTS.mkdir(parents=True, exist_ok=True)
        out = RESULTS / f"controller-real-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"written to {out}")
        raise SystemExit(0)
    result = asyncio.run(
        main(
            args.domains,
            args.event_log,
            chosen,
            args.profile,
            args.sample,
            extra,
            args.controller_source,
            failover_options,
        )
    )
    print(json.dumps(result, indent=2))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"controller-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {out}")
