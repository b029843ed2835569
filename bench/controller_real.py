"""The controller's lifecycle benchmark on a real API server (`bench/controller.py --kubeconfig PATH`).

The same lifecycle as on the simulated server (bench/controller.py): `cdctl controller` as its own process
(client QPS 1000, its event log in a file), N ComputeDomains (default 1,000) created at once, converged
(finalizer and status on each domain, its workload template, daemon template and DaemonSet on the server, as
the benchmark's own watches see them), deleted at once, and gone. The cluster behind PATH (an admin
kubeconfig; the realk8s kit's control plane, `make test-real` builds it) gets the chart's CRDs and
DeviceClasses and the benchmark's namespaces first; its DaemonSet controller writes each DaemonSet's status,
as on any cluster.

Per phase: wall time to converged or gone, the controller's CPU (until it is idle again), and beside it the
CPU of the API server and of etcd (from /proc, when their PID files are in the kit's run directory) and the
API requests the server counted (`apiserver_request_total` from its /metrics, by verb and resource), so that
what bounds each phase can be named: the controller (its CPU near the wall time), the API server (its CPU near
the wall, or both cores busy), or the client (neither busy: the requests wait on QPS or round trips). At the
end, the controller's peak RSS. Results go to bench/results/controller-real-<UTC time>.json.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.process import ControllerProcess, cpu_seconds
from cdctl.domain.computedomains import FINALIZER
from cdctl.k8s.client import api_client
from cdctl.k8s.errors import AlreadyExistsError, KubeApiError, NotFoundError
from cdctl.k8s.informer import Informer
from cdctl.k8s.resources import COMPUTE_DOMAINS, DAEMON_SETS, resource_claim_templates
from cdctl.k8s.rest import KubeApi
from cdctl.sim.rack.chart import cluster_bootstrap_objects

DRIVER_NAMESPACE = "nvidia-dra"
USER_NAMESPACE = "bench"
KIT_RUN = Path(os.environ.get("REALK8S_CACHE", Path.home() / ".cache" / "cdctl-realk8s")) / "run"
CONCURRENCY = 64  # creates and deletes in flight: as many as a busy client sends
PHASE_LIMIT_S = 600.0  # a phase that has not converged by then will not: say what is missing
_REQUEST_TOTAL = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_PLURALS = {"CustomResourceDefinition": "customresourcedefinitions", "DeviceClass": "deviceclasses"}
CDS = f"/apis/resource.nvidia.com/v1beta1/namespaces/{USER_NAMESPACE}/computedomains"


def _pid(component: str) -> int | None:
    try:
        return int((KIT_RUN / f"{component}.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def server_cpu_s() -> dict[str, float]:
    """CPU seconds so far of the kit's API server and etcd (those whose PID file is found)."""
    found = {}
    for component in ("kube-apiserver", "etcd"):
        pid = _pid(component)
        if pid is not None:
            try:
                found[component] = cpu_seconds(pid)
            except OSError:
                continue
    return found


async def request_counts(api: KubeApi) -> dict[str, float]:
    """The API server's own request counters, by verb and resource, summed over codes and scopes."""
    response = await api._send("GET", "/metrics", None, None, {"Accept": "text/plain"}, api._timeout)
    async with response:
        body = (await response.read()).decode()
    counts: dict[str, float] = {}
    for line in body.splitlines():
        match = _REQUEST_TOTAL.match(line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group("labels")))
        key = f"{labels.get('verb', '?')} {labels.get('resource', '?')}"
        counts[key] = counts.get(key, 0.0) + float(match.group("value"))
    return counts


async def refuse_a_used_cluster(api: KubeApi) -> None:
    """Stop with a clear line when the cluster already holds the project's admission policies or domains (a
    real-tier run leaves its chart installed): they would refuse or skew what is measured."""
    policies = await api.list_objects("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies")
    ours = [p["metadata"]["name"] for p in policies.get("items", []) if "cdctl" in p["metadata"]["name"]]
    domains = await api.list_objects("/apis/resource.nvidia.com/v1beta1/computedomains") if ours else {}
    if ours or domains.get("items"):
        raise SystemExit(
            "bench/controller.py --kubeconfig: the cluster is not fresh (admission policies "
            f"{', '.join(ours) or 'none'}; {len(domains.get('items', []))} ComputeDomains); "
            "start a fresh one: "
            "../shared/realk8s/stop.sh --wipe && ../shared/realk8s/start.sh"
        )


async def bootstrap(api: KubeApi) -> None:
    for obj in cluster_bootstrap_objects():
        group, _, version = obj["apiVersion"].rpartition("/")
        path = f"/apis/{group}/{version}/{_PLURALS[obj['kind']]}"
        try:
            await api.create(path, obj)
        except AlreadyExistsError:
            pass
    for namespace in (DRIVER_NAMESPACE, USER_NAMESPACE):
        try:
            await api.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
        except AlreadyExistsError:
            pass
    await asyncio.sleep(2.0)  # the CRDs are served once established


def domain(index: int) -> dict[str, Any]:
    name = f"cd-{index:04d}"
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": USER_NAMESPACE},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    }


async def in_parallel(calls: list[Callable[[], Awaitable[Any]]]) -> None:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(call: Callable[[], Awaitable[Any]]) -> None:
        async with gate:
            await call()

    await asyncio.gather(*(one(c) for c in calls))


class Mirror:
    """What the server holds of the lifecycle's kinds, followed with one list and a watch each (the
    project's informer), so that telling converged or gone costs the measured server almost nothing."""

    def __init__(self, api: KubeApi) -> None:
        self.informers = {
            "domains": Informer(api, COMPUTE_DOMAINS, namespace=USER_NAMESPACE),
            "templates": Informer(api, resource_claim_templates("v1")),
            "daemon_sets": Informer(api, DAEMON_SETS, namespace=DRIVER_NAMESPACE),
        }
        self.changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def _follow(self, informer: Informer) -> None:
        async for _ in informer.observe():
            self.changed.set()

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._follow(i)) for i in self.informers.values()]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def count(self, kind: str, namespace: str | None = None) -> int:
        known = self.informers[kind].known()
        return sum(1 for o in known if namespace is None or o["metadata"].get("namespace") == namespace)

    def converged(self, domains: int) -> bool:
        cds = self.informers["domains"].known()
        if len(cds) < domains or not all(
            FINALIZER in (cd["metadata"].get("finalizers") or []) and "status" in (cd.get("status") or {})
            for cd in cds
        ):
            return False
        return (
            self.count("templates", USER_NAMESPACE) >= domains
            and self.count("templates", DRIVER_NAMESPACE) >= domains
            and self.count("daemon_sets") >= domains
        )

    def gone(self) -> bool:
        return not any(informer.known() for informer in self.informers.values())

    async def until(self, done: Callable[[], bool], controller: ControllerProcess) -> None:
        deadline = time.monotonic() + PHASE_LIMIT_S
        while not done():
            controller.check_alive()
            if time.monotonic() > deadline:
                counts = {kind: len(informer.known()) for kind, informer in self.informers.items()}
                raise SystemExit(
                    f"bench/controller.py --kubeconfig: not done after {PHASE_LIMIT_S:.0f} s (on the server: "
                    f"{counts}); the controller's last line: {controller.last_line()}"
                )
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self.changed.wait()


async def phase(
    api: KubeApi, mirror: Mirror, controller: ControllerProcess, domains: int,
    act: Callable[[], Awaitable[None]], done: Callable[[], bool],
) -> dict[str, Any]:  # fmt: skip
    from bench.controller import phase_figures, until_quiet

    counts_before, servers_before = await request_counts(api), server_cpu_s()
    cpu_before = controller.cpu_s()
    started = time.monotonic()
    await act()
    acted = time.monotonic()
    await mirror.until(done, controller)
    wall = time.monotonic() - started
    cpu_at_done = controller.cpu_s()
    servers_at_done = server_cpu_s()
    cpu_quiet = await until_quiet(controller)
    counts = await request_counts(api)
    requests = {k: round((v - counts_before.get(k, 0.0)) / domains, 2) for k, v in counts.items()}
    return {
        **phase_figures(started, acted, wall, (cpu_before, cpu_at_done, cpu_quiet), domains),
        "server_cpu_s_at_done": {
            k: round(v - servers_before.get(k, 0.0), 3) for k, v in servers_at_done.items()
        },
        "api_requests_per_domain": {k: v for k, v in sorted(requests.items()) if v > 0},
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


async def lifecycle_on(
    kubeconfig: Path,
    domains: int,
    extra_args: tuple[str, ...] = (),
    sample: Path | None = None,
    profile: Path | None = None,
) -> dict[str, Any]:
    client = await api_client(str(kubeconfig))
    api = KubeApi(client)
    work = Path(tempfile.mkdtemp(prefix="cdctl-bench-real-"))
    try:
        await refuse_a_used_cluster(api)
        await bootstrap(api)
        controller = await ControllerProcess.start(
            kubeconfig, work / "controller.db", work / "controller.log", namespace=DRIVER_NAMESPACE,
            extra_args=extra_args, profile=profile,
        )  # fmt: skip
        try:
            from bench.controller import sampling, until_quiet

            await until_quiet(controller)
            started = {"cpu_s": round(controller.cpu_s(), 3), "rss_mib": controller.rss_mib()}

            async def create() -> None:
                await in_parallel([lambda i=i: api.create(CDS, domain(i)) for i in range(domains)])

            async def delete() -> None:
                async def one(index: int) -> None:
                    try:
                        await api.delete(f"{CDS}/cd-{index:04d}")
                    except NotFoundError:
                        pass

                await in_parallel([lambda i=i: one(i) for i in range(domains)])

            mirror = Mirror(api)
            mirror.start()
            try:
                async with sampling(controller, sample, "create"):
                    created = await phase(
                        api, mirror, controller, domains, create, lambda: mirror.converged(domains)
                    )
                async with sampling(controller, sample, "delete"):
                    deleted = await phase(api, mirror, controller, domains, delete, mirror.gone)
            finally:
                await mirror.stop()
            peak = controller.peak_rss_mib()
        finally:
            await controller.stop()
    except KubeApiError as error:
        raise SystemExit(
            f"bench/controller.py --kubeconfig: the API server refused a request: {error}"
        ) from error
    finally:
        await client.close()
    return {
        "server": "real (--kubeconfig)",
        "domains": domains,
        "started": started,
        "create": created,
        "delete": deleted,
        "controller_cpu_s": round(created["controller_cpu_s"] + deleted["controller_cpu_s"], 3),
        "controller_cpu_ms_per_lifecycle": round(
            created["controller_cpu_ms_per_domain"] + deleted["controller_cpu_ms_per_domain"], 2
        ),
        "peak_rss_mib": peak,
        "profiled": profile is not None or sample is not None,
    }
