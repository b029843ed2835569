"""Prepare/Unprepare latency of the kubelet plugin through its unix socket (p50/p99 over N claims).

Runs the real plugin pieces (gRPC server, prepare path, SQLite event log, CDI writer, Kubernetes adapter
with its informers) against the simulated API server on loopback (`cdctl sim apiserver`, a separate process
like a real one), with the readiness condition already met (the domain's clique lists this node's daemon as
Ready) and the informers listed. Each claim is allocated to this node and reserved; it is prepared and then
unprepared, one after the other (a node has one channel-0). Runs with the event log on tmpfs (/dev/shm) and
on disk, counting the API requests each call makes; then the prepare path alone (no gRPC, no API server: an
in-process cluster port with readiness met) to separate the plugin's own cost. The projection runner follows
the log as in the plugin process (the same loop and batch pause). Prints the figures and writes
bench/results/prepare-<UTC time>.json (with the machine's load average before and after, since other work
on the same cores skews p99).

    .venv/bin/python bench/prepare.py [--claims 1000] [--watch-claims]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import logging
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog
from grpclib.client import Channel

from cdctl._proto.k8s.io.kubelet.pkg.apis.dra import v1
from cdctl.api.refs import DomainInfo
from cdctl.k8s.plugincluster import KubeClusterPort, connect, disconnect
from cdctl.k8s.rest import KubeApi
from cdctl.plugin.checkpoint import ClaimBook
from cdctl.plugin.devices import parse_claim
from cdctl.plugin.driver import Driver
from cdctl.plugin.pluginconfig import PluginConfig
from cdctl.plugin.prepare import DeviceState
from cdctl.plugin.preparesettings import FabricStatus, PrepareSettings
from cdctl.plugin.server import PluginServers, ServerPaths
from cdctl.projections.lifecycle import lifecycle_projections
from cdctl.projections.runner import ProjectionRunner
from cdctl.sim.rack.chart import crds
from cdctl.store import SqliteEventStore

NODE = "bench-node"
NS = "default"
CLIQUE = "6a130f54-faaa-4b8f-847f-be44ab70f917.32766"
DRIVER = "compute-domain.nvidia.com"
PROC_DEVICES = "Character devices:\n234 nvidia-caps-imex-channels\n235 nvidia-caps\n\nBlock devices:\n"
RESULTS = Path(__file__).resolve().parent / "results"
INFORMERS = ("computedomain", "node", "clique", "resourceclaim")


async def seed(api: KubeApi, claims: int) -> str:
    for crd in crds():
        await api.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    await api.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    cd = await api.create(
        f"/apis/resource.nvidia.com/v1beta1/namespaces/{NS}/computedomains",
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomain",
            "metadata": {"name": "bench"},
            "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "bench-channel"}}},
        },
    )
    uid = str(cd["metadata"]["uid"])
    await api.create(
        f"/apis/resource.nvidia.com/v1beta1/namespaces/{NS}/computedomaincliques",
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomainClique",
            "metadata": {"name": f"{uid}.{CLIQUE}"},
            "daemons": [
                {"nodeName": NODE, "ipAddress": "10.0.0.1", "cliqueID": CLIQUE, "index": 0, "status": "Ready"}
            ],
        },
    )
    params = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainChannelConfig",
        "domainID": uid,
    }
    for i in range(claims):
        path = f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims"
        claim = await api.create(
            path,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": f"c{i}"},
                "spec": {"devices": {"requests": [{"name": "channel", "exactly": {"deviceClassName": "x"}}]}},
            },
        )
        claim["status"] = {
            "reservedFor": [{"resource": "pods", "name": f"p{i}", "uid": f"pod-uid-{i}"}],
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "channel", "driver": DRIVER, "pool": NODE, "device": "channel-0"}
                    ],
                    "config": [
                        {
                            "source": "FromClaim",
                            "requests": ["channel"],
                            "opaque": {"driver": DRIVER, "parameters": params},
                        }
                    ],
                }
            },
        }
        await api.replace(f"{path}/c{i}/status", claim)
    return uid


@contextlib.asynccontextmanager
async def sim_apiserver(kubeconfig: Path) -> AsyncIterator[Path]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cdctl", "sim", "apiserver", "--port", "0", "--kubeconfig-out", str(kubeconfig),
        "--history-window", "100000",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        async with asyncio.timeout(60):
            while not await asyncio.to_thread(kubeconfig.exists):  # noqa: ASYNC110 - another process writes it
                await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)  # the file is written once the port is bound; let the listener settle
        yield kubeconfig
    finally:
        proc.terminate()
        await proc.wait()


class RequestCounter:
    """Counts the API requests (method and path, claim names folded) made while `phase` is set."""

    def __init__(self, api: KubeApi) -> None:
        self.phase = ""
        self.counts: collections.Counter[str] = collections.Counter()
        inner = api.request

        async def counted(method: str, path: str, **kwargs: Any) -> dict[str, Any]:
            if self.phase:
                self.counts[f"{self.phase} {method} {re.sub(r'/c[0-9]+$', '/c<i>', path)}"] += 1
            return await inner(method, path, **kwargs)

        api.request = counted  # type: ignore[method-assign]

    def per_call(self, calls: int) -> dict[str, float]:
        return {key: count / calls for key, count in sorted(self.counts.items())}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run(log_dir: Path, claims: int, watch_claims: bool = False) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="cdb", dir="/tmp"))
    try:
        (base / "devices").write_text(PROC_DEVICES)
        async with sim_apiserver(base / "kubeconfig") as kubeconfig:
            api = await connect(str(kubeconfig), 0, 0)
            store = None
            servers = None
            projecting: asyncio.Task[None] | None = None
            cluster = None
            try:
                await seed(api, claims)
                node_uid = (await api.get(f"/api/v1/nodes/{NODE}"))["metadata"]["uid"]
                cluster = KubeClusterPort(
                    api, resource_version="v1", driver_namespace=NS, node_uid=node_uid, use_cliques=True,
                    watch_claims=watch_claims,
                )  # fmt: skip
                cluster.start(NODE)
                # a running plugin has listed long before a Prepare arrives
                informers = INFORMERS if watch_claims else INFORMERS[:-1]
                await cluster.until(lambda: cluster.synced(*informers))
                store = await SqliteEventStore.open(log_dir / "events.db")
                runner = ProjectionRunner(store, lifecycle_projections())  # as in the plugin process
                await runner.start()
                projecting = asyncio.create_task(runner.run(batch_pause=PluginConfig.projection_batch_s))
                book = await ClaimBook.load(store, NODE)
                settings = PrepareSettings(
                    node=NODE,
                    plugin_dir=base / "plugins" / DRIVER,
                    cdi_root=log_dir / "cdi",
                    proc_devices=str(base / "devices"),
                )
                state = DeviceState(settings, book, cluster, FabricStatus(clique_id=CLIQUE))
                paths = ServerPaths(base / "registry", settings.plugin_dir)
                servers = PluginServers(paths, Driver(state, cluster), lambda: None)
                await servers.start()
                channel = Channel(path=str(paths.dra))
                stub = v1.DraPluginStub(channel)
                prep: list[float] = []
                unprep: list[float] = []
                counter = RequestCounter(api)
                try:
                    for i in range(claims):
                        ref = v1.Claim(namespace=NS, name=f"c{i}", uid=await _uid(api, i))
                        counter.phase = "prepare"
                        t0 = time.perf_counter()
                        resp = await stub.node_prepare_resources(v1.NodePrepareResourcesRequest(claims=[ref]))
                        t1 = time.perf_counter()
                        counter.phase = "unprepare"
                        assert resp.claims[ref.uid].error == "", resp.claims[ref.uid].error
                        uresp = await stub.node_unprepare_resources(
                            v1.NodeUnprepareResourcesRequest(claims=[ref])
                        )
                        t2 = time.perf_counter()
                        counter.phase = ""
                        assert uresp.claims[ref.uid].error == ""
                        prep.append((t1 - t0) * 1000)
                        unprep.append((t2 - t1) * 1000)
                finally:
                    channel.close()
            finally:
                if servers is not None:
                    await servers.close()
                if projecting is not None:
                    projecting.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await projecting
                if store is not None:
                    await store.close()
                if cluster is not None:
                    await cluster.close()
                await disconnect(api)
        return {**summary(claims, prep, unprep), "api_requests_per_call": counter.per_call(claims)}
    finally:
        shutil.rmtree(base, ignore_errors=True)


class ReadyCluster:
    """An in-process ClusterPort with the readiness condition met: isolates the plugin's own cost."""

    def __init__(self, uid: str) -> None:
        self.domain = DomainInfo(uid, "bench", NS)
        self.labels: dict[str, str] = {}

    def cached_claim(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        return None

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    async def get_compute_domain(self, uid: str) -> DomainInfo | None:
        return self.domain if uid == self.domain.uid else None

    async def add_node_label(self, node: str, domain_uid: str) -> None:
        self.labels[node] = domain_uid

    async def remove_node_label(self, node: str, domain_uid: str) -> None:
        self.labels.pop(node, None)

    async def daemon_ready(self, domain: DomainInfo, node: str, clique_id: str) -> bool:
        return True

    async def until_ready(self, domain: DomainInfo, node: str, clique_id: str) -> None:
        return None

    async def node_event(self, node: str, reason: str, message: str, warning: bool = True) -> None:
        return None


async def run_plugin_only(log_dir: Path, claims: int) -> dict[str, Any]:
    """The prepare path alone (event log appends, CDI write with fsync), no gRPC and no API server."""
    base = Path(tempfile.mkdtemp(prefix="cdb", dir="/tmp"))
    store = await SqliteEventStore.open(log_dir / "events.db")
    try:
        (base / "devices").write_text(PROC_DEVICES)
        book = await ClaimBook.load(store, NODE)
        settings = PrepareSettings(
            node=NODE, plugin_dir=base / DRIVER, cdi_root=log_dir / "cdi", proc_devices=str(base / "devices")
        )
        state = DeviceState(settings, book, ReadyCluster("dom"), FabricStatus(clique_id=CLIQUE))
        params = {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomainChannelConfig",
            "domainID": "dom",
        }
        prep: list[float] = []
        unprep: list[float] = []
        for i in range(claims):
            claim = parse_claim(
                {
                    "metadata": {"uid": f"uid-{i}", "namespace": NS, "name": f"c{i}"},
                    "status": {"allocation": {"devices": {
                        "results": [{"request": "channel", "driver": DRIVER, "pool": NODE,
                                     "device": "channel-0"}],
                        "config": [{"source": "FromClaim", "requests": ["channel"],
                                    "opaque": {"driver": DRIVER, "parameters": params}}],
                    }}},
                }
            )  # fmt: skip
            t0 = time.perf_counter()
            await state.prepare(claim, book.version(claim.ref.uid))
            t1 = time.perf_counter()
            await state.unprepare(claim.ref)
            t2 = time.perf_counter()
            prep.append((t1 - t0) * 1000)
            unprep.append((t2 - t1) * 1000)
        return summary(claims, prep, unprep)
    finally:
        await store.close()
        shutil.rmtree(base, ignore_errors=True)


def summary(claims: int, prep: list[float], unprep: list[float]) -> dict[str, Any]:
    return {
        "claims": claims,
        "prepare_ms": {"p50": pct(prep, 0.5), "p99": pct(prep, 0.99), "mean": statistics.fmean(prep)},
        "unprepare_ms": {"p50": pct(unprep, 0.5), "p99": pct(unprep, 0.99), "mean": statistics.fmean(unprep)},
    }


async def _uid(api: KubeApi, i: int) -> str:
    obj = await api.get(f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/c{i}")
    return str(obj["metadata"]["uid"])


async def main(claims: int, watch_claims: bool) -> None:
    report: dict[str, Any] = {
        "machine": platform.platform(),
        "python": platform.python_version(),
        "watch_claims": watch_claims,
        "load_average_before": os.getloadavg(),
    }

    async def adapter(log_dir: Path, claims: int) -> dict[str, Any]:
        return await run(log_dir, claims, watch_claims)

    runs = [
        ("tmpfs", Path("/dev/shm"), adapter),
        ("disk", Path("/var/tmp"), adapter),
        ("plugin-only-tmpfs", Path("/dev/shm"), run_plugin_only),
        ("plugin-only-disk", Path("/var/tmp"), run_plugin_only),
    ]
    for label, parent, fn in runs:
        log_dir = Path(tempfile.mkdtemp(prefix="cdctl-bench-", dir=parent))
        try:
            report[label] = await fn(log_dir, claims)
        finally:
            shutil.rmtree(log_dir, ignore_errors=True)
        r = report[label]
        print(
            f"{label:17}  prepare p50 {r['prepare_ms']['p50']:.2f} ms  p99 {r['prepare_ms']['p99']:.2f} ms   "
            f"unprepare p50 {r['unprepare_ms']['p50']:.2f} ms  p99 {r['unprepare_ms']['p99']:.2f} ms  "
            f"({claims} claims)"
        )
        for request, per_call in r.get("api_requests_per_call", {}).items():
            print(f"{'':17}  {per_call:.2f} x {request}")
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    report["recorded_at"] = stamp
    report["load_average"] = os.getloadavg()
    out = RESULTS / f"prepare-{stamp}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {out}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=1000)
    parser.add_argument(
        "--watch-claims",
        action=argparse.BooleanOptionalAction,
        default=PluginConfig.watch_claims,
        help="serve a claim's first Prepare from a ResourceClaim watch (default: as the plugin, off: a GET)",
    )
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    args = parser.parse_args()
    try:
        import uvloop  # the plugin runs on it when installed (extra "fast")

        uvloop.run(main(args.claims, args.watch_claims))
    except ImportError:
        asyncio.run(main(args.claims, args.watch_claims))
