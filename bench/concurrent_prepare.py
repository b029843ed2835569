"""Prepares on one node under a slow API server: wall time of concurrent claims against one claim alone.

The real prepare path (cdctl.plugin.prepare: claim book on a SQLite event log in /dev/shm, CDI specs written)
runs against an in-process cluster port that answers like the plugin's Kubernetes adapter but makes each
API request take `--latency-ms` (200 by default): the node label PATCH (and the fresh GET that decides a
conflict), the daemon pod GET of a daemon claim's authorization. The ComputeDomain and the daemon's readiness
come from watches in the adapter, so they cost no request here either. One attempt per claim:

* `1 claim`: a channel claim alone, its daemon Ready: one label PATCH, prepared.
* `4 domains`: four channel claims of four domains while no daemon is Ready yet (a domain forming). Each
  makes one request: the first labels the node and is told its daemon is not ready, the other three read
  the Node and are told it carries another domain's label; all four are retriable. A real node does not get
  four channel claims at once (the scheduler allocates its one channel-0 to one claim at a time): this is
  the plugin's own serialization, measured.
* `channel + daemon`: the channel claim and the daemon claim of one domain (what a node of a forming domain
  really gets at once), its daemon Ready: both complete.

Each runs as the plugin does now (claims side by side) and serialized, one attempt after another, which is
what the node-wide lock the plugin held before did (`serialized` below). Prints the figures and the most
requests in flight at once, and writes bench/results/concurrent-prepare-<UTC time>.json.

    .venv/bin/python bench/concurrent_prepare.py [--latency-ms 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from cdctl.api.refs import DomainInfo
from cdctl.domain.errors import CdctlError, RetriableError
from cdctl.plugin.checkpoint import ClaimBook
from cdctl.plugin.devices import AllocatedClaim, parse_claim
from cdctl.plugin.prepare import DeviceState
from cdctl.plugin.preparesettings import FabricStatus, PrepareSettings
from cdctl.store import SqliteEventStore

NODE = "bench-node"
NS = "default"
DRIVER_NS = "nvidia-dra"
DRIVER = "compute-domain.nvidia.com"
API = "resource.nvidia.com/v1beta1"
CLIQUE = "6a130f54-faaa-4b8f-847f-be44ab70f917.32766"
PROC_DEVICES = "Character devices:\n234 nvidia-caps-imex-channels\n235 nvidia-caps\n\nBlock devices:\n"
DOMAINS = [f"d0000000-0000-4000-8000-00000000000{i}" for i in range(1, 5)]
RESULTS = Path(__file__).resolve().parent / "results"


class SlowCluster:
    """A ClusterPort whose API requests take `latency_s`; counts the most requests in flight at once."""

    def __init__(self, latency_s: float, ready: bool = True) -> None:
        self.latency_s = latency_s
        self.ready = ready
        self.domains = {uid: DomainInfo(uid, f"cd-{uid[-1]}", NS) for uid in DOMAINS}
        self.labels: dict[str, str] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self.requests = 0

    async def _request(self) -> None:
        self.requests += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.latency_s)
        finally:
            self.in_flight -= 1

    def cached_claim(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        return None

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        await self._request()
        return None

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        await self._request()
        return self.pods.get((namespace, name))

    async def get_compute_domain(self, uid: str) -> DomainInfo | None:
        return self.domains.get(uid)  # the adapter's watched copy

    async def add_node_label(self, node: str, domain_uid: str) -> None:
        current = self.labels.get(node)
        if current == domain_uid:
            return  # decided on the watched Node: no request
        await self._request()  # the PATCH, or the fresh GET a conflict is decided on
        current = self.labels.get(node)
        if current not in (None, domain_uid):
            raise RetriableError(f"label already exists for a different ComputeDomain ({current})")
        self.labels[node] = domain_uid

    async def remove_node_label(self, node: str, domain_uid: str) -> None:
        if self.labels.get(node) == domain_uid:
            await self._request()
            del self.labels[node]

    async def daemon_ready(self, domain: DomainInfo, node: str, clique_id: str) -> bool:
        return self.ready  # as the adapter's watched clique says

    def readiness_watched(self, clique_id: str) -> bool:
        return True

    async def until_ready(self, domain: DomainInfo, node: str, clique_id: str) -> None:
        return None

    async def node_event(self, node: str, reason: str, message: str, warning: bool = True) -> None:
        return None


def _claim(uid: str, name: str, namespace: str, device: str, kind: str, domain: str) -> dict[str, Any]:
    request = device.split("-")[0]
    params = {"apiVersion": API, "kind": kind, "domainID": domain}
    return {
        "metadata": {"uid": uid, "name": name, "namespace": namespace},
        "status": {"allocation": {"devices": {
            "results": [{"request": request, "driver": DRIVER, "pool": NODE, "device": device}],
            "config": [{"source": "FromClaim", "requests": [request],
                        "opaque": {"driver": DRIVER, "parameters": params}}],
        }}},
    }  # fmt: skip


def channel_claim(i: int, domain: str) -> AllocatedClaim:
    uid = f"c0000000-0000-4000-8000-00000000000{i}"
    return parse_claim(_claim(uid, f"ch{i}", NS, "channel-0", "ComputeDomainChannelConfig", domain))


def daemon_claim(cluster: SlowCluster, domain: str) -> AllocatedClaim:
    pod, pod_uid = "daemon-pod", "e0000000-0000-4000-8000-000000000001"
    obj = _claim(
        "c0000000-0000-4000-8000-0000000000d1", "daemon", DRIVER_NS, "daemon-0", "ComputeDomainDaemonConfig",
        domain,
    )  # fmt: skip
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": pod_uid, "controller": True}
    ]
    obj["status"]["reservedFor"] = [{"resource": "pods", "name": pod, "uid": pod_uid}]
    cluster.pods[(DRIVER_NS, pod)] = {
        "metadata": {
            "name": pod, "namespace": DRIVER_NS, "uid": pod_uid,
            "labels": {"resource.nvidia.com/computeDomain": domain},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "controller": True,
                                 "name": f"computedomain-daemon-{domain}", "uid": "f0000000"}],
        },
        "spec": {"nodeName": NODE},
    }  # fmt: skip
    return parse_claim(obj)


Claims = Callable[[SlowCluster], list[AllocatedClaim]]


async def one_round(
    base: Path, latency_s: float, scenario: tuple[bool, Claims], serialized: bool
) -> dict[str, Any]:
    ready, claims = scenario
    work = Path(tempfile.mkdtemp(prefix="cdctl-bench-", dir=base))
    store = await SqliteEventStore.open(work / "events.db")
    try:
        (work / "devices").write_text(PROC_DEVICES)
        (work / "mgmt").write_text("DeviceFileMinor: 9\nDeviceFileMode: 256\n")
        settings = PrepareSettings(
            node=NODE, plugin_dir=work / "plugins", cdi_root=work / "cdi", driver_namespace=DRIVER_NS,
            proc_devices=str(work / "devices"), fabric_imex_mgmt_cap=str(work / "mgmt"),
        )  # fmt: skip
        cluster = SlowCluster(latency_s, ready)
        state = DeviceState(settings, await ClaimBook.load(store, NODE), cluster, FabricStatus(CLIQUE))
        batch = claims(cluster)
        outcomes: list[str] = []

        async def attempt(claim: AllocatedClaim) -> None:
            try:
                await state.prepare(claim, 0)
                outcomes.append("prepared")
            except CdctlError as exc:
                outcomes.append(f"retry: {str(exc).split(' (')[0]}")

        started = time.perf_counter()
        if serialized:
            for claim in batch:
                await attempt(claim)
        else:
            await asyncio.gather(*(attempt(claim) for claim in batch))
        wall_ms = (time.perf_counter() - started) * 1000
        return {"wall_ms": wall_ms, "max_in_flight": cluster.max_in_flight, "outcomes": sorted(outcomes)}
    finally:
        await store.close()
        shutil.rmtree(work, ignore_errors=True)


# name -> (the daemons Ready, the claims)
SCENARIOS: dict[str, tuple[bool, Claims]] = {
    "1 claim": (True, lambda cluster: [channel_claim(1, DOMAINS[0])]),
    "4 domains": (False, lambda cluster: [channel_claim(i + 1, d) for i, d in enumerate(DOMAINS)]),
    "channel + daemon": (
        True,
        lambda cluster: [channel_claim(1, DOMAINS[0]), daemon_claim(cluster, DOMAINS[0])],
    ),
}


async def measure(
    base: Path, latency_s: float, rounds: int, scenario: str, serialized: bool
) -> dict[str, Any]:
    runs = [await one_round(base, latency_s, SCENARIOS[scenario], serialized) for _ in range(rounds)]
    walls = [r["wall_ms"] for r in runs]
    return {
        "claims": len(runs[0]["outcomes"]),
        "wall_ms": {"median": statistics.median(walls), "min": min(walls), "max": max(walls)},
        "max_in_flight": max(r["max_in_flight"] for r in runs),
        "outcomes": runs[0]["outcomes"],
    }


async def main(base: Path, latency_ms: float, rounds: int) -> None:
    report: dict[str, Any] = {
        "machine": platform.platform(),
        "python": platform.python_version(),
        "latency_ms": latency_ms,
        "rounds": rounds,
        "load_average_before": os.getloadavg(),
    }
    for scenario in SCENARIOS:
        for mode in ("side by side", "serialized"):
            if scenario == "1 claim" and mode == "serialized":
                continue
            r = await measure(base, latency_ms / 1000, rounds, scenario, mode == "serialized")
            report[f"{scenario}, {mode}"] = r
            print(
                f"{scenario:17} {mode:13} {r['claims']} claim(s): "
                f"wall median {r['wall_ms']['median']:7.1f} ms "
                f"(min {r['wall_ms']['min']:.1f}, max {r['wall_ms']['max']:.1f}), "
                f"at most {r['max_in_flight']} request(s) in flight; {', '.join(r['outcomes'])}"
            )
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    report["recorded_at"] = stamp
    report["load_average"] = os.getloadavg()
    out = RESULTS / f"concurrent-prepare-{stamp}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {out}")


def _run(coroutine: Awaitable[None]) -> None:
    try:
        import uvloop  # the plugin runs on it when installed (extra "fast")

        uvloop.run(coroutine)  # type: ignore[arg-type]
    except ImportError:
        asyncio.run(coroutine)  # type: ignore[arg-type]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    shm = Path("/dev/shm")  # the event log where fsync is cheap: the figure is the API's wait, not the disk's
    _run(main(shm if shm.is_dir() else Path(tempfile.gettempdir()), args.latency_ms, args.rounds))
