"""Channel isolation: what the controller's IMEX channel allocator costs (a benchmark): figures, saved.

`cdctl controller --imex-isolation channel` runs as its own process (bench/process.py: the chart's flags, an
event log file, client QPS 1000) against the simulated API server in this process, host-managed (the host's
IMEX spans each clique: no daemon pods to simulate, so what is measured is the allocator and what it writes).
The cluster has `--nodes` GPU nodes (default 144) in cliques of 18 labelled `nvidia.com/gpu.clique`. Phases:
1. `domains`: N ComputeDomains (default 64) created at once, until each has its finalizer, its workload
   template and a status (no claim yet, so no channel).
2. `assign`: each domain's workload claims (mixed sizes: 1, 2, 4, 8 or 18 claims, several per node, a domain
   of 18 spans two cliques) are allocated at once, as the scheduler would, until every domain is Ready with a
   channel published in each clique it has claims in. Its figures divided by the assignments made give the
   controller's CPU per assignment (observing the claims, picking, recording, publishing on the clique object,
   the status write).
3. `release`: every domain and its claims deleted at once, until every domain and clique object is gone.
After `assign` the published numbers are checked: never 0, never one number twice in a clique.
Per phase: wall time, the controller's CPU seconds (from /proc, until it is idle again), API writes. Results
go to bench/results/channels-<UTC time>.json.
Run: `.venv/bin/python -m bench.channels [--domains N] [--nodes N] [--channel-count N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import sqlite3
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.controller import DRIVER_NAMESPACE, RESULTS, USER_NAMESPACE, Bench, until, until_quiet
from bench.process import ControllerProcess
from cdctl.api.isolation import CHANNEL_ISOLATION_DEVICE_CLASS, CLIQUE_NODE_LABEL
from cdctl.domain.computedomains import DRIVER_NAME, LABEL_CLIQUE_ID, LABEL_COMPUTE_DOMAIN
from cdctl.sim.apiserver.server import ApiServer
from cdctl.sim.apiserver.settings import ServerSettings

NODES_PER_CLIQUE = 18
SIZES = (1, 2, 4, 8, 18)  # claims per domain, in turn
CLAIMS = ("resource.k8s.io", "resourceclaims")
CLIQUES = ("resource.nvidia.com", "computedomaincliques")
CDS = ("resource.nvidia.com", "computedomains")


def clique_of(node: int) -> str:
    return f"bench-fabric.{node // NODES_PER_CLIQUE}"


class ChannelBench(Bench):
    def nodes(self, count: int) -> None:
        for index in range(count):
            body = {
                "metadata": {"name": f"gb200-{index:03d}", "labels": {CLIQUE_NODE_LABEL: clique_of(index)}}
            }
            self.store.create(self.type_of("", "nodes"), "", body)

    def claim(self, uid: str, name: str, node: str) -> None:
        claims = self.type_of(*CLAIMS)
        request = {"name": "channel", "exactly": {"deviceClassName": CHANNEL_ISOLATION_DEVICE_CLASS}}
        body = {
            "metadata": {"name": name, "namespace": USER_NAMESPACE, "labels": {LABEL_COMPUTE_DOMAIN: uid}},
            "spec": {"devices": {"requests": [request]}},
        }
        created = self.store.create(claims, USER_NAMESPACE, body)
        result = {"request": "channel", "driver": DRIVER_NAME, "pool": node, "device": "channel"}
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        created["status"] = {
            "allocation": {"devices": {"results": [result]}, "nodeSelector": {"nodeSelectorTerms": [term]}}
        }
        self.store.update(claims, USER_NAMESPACE, name, created, subresource="status")


def placements(domains: int, nodes: int) -> list[list[int]]:
    """The nodes of each domain's claims: sizes in turn, placed round the nodes (so nodes are shared)."""
    out, cursor = [], 0
    for index in range(domains):
        size = SIZES[index % len(SIZES)]
        out.append([(cursor + k) % nodes for k in range(size)])
        cursor = (cursor + size) % nodes
    return out


async def phase(bench: ChannelBench, controller: ControllerProcess, act: Any, done: Any) -> dict[str, Any]:
    requests = bench.server.requests
    requests.reset()
    cpu_before, started = controller.cpu_s(), time.monotonic()
    act()

    def finished() -> bool:
        controller.check_alive()
        return bool(done())

    await until(finished, poll_s=0.1)
    wall = time.monotonic() - started
    cpu = await until_quiet(controller) - cpu_before
    return {
        "wall_s": round(wall, 3),
        "controller_cpu_s": round(cpu, 3),
        "api_writes": requests.writes(),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def log_counts(db: Path) -> dict[str, int]:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute("SELECT type, COUNT(*) FROM events WHERE stream LIKE 'channels/%' GROUP BY type")
        return {str(kind): int(n) for kind, n in rows}


async def run(domains: int, nodes: int, channel_count: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="cdctl-bench-channels-"))
    async with ApiServer(settings=ServerSettings(history_window=200_000)) as server:
        bench = ChannelBench(server)
        bench.bootstrap()
        bench.nodes(nodes)
        kubeconfig = server.write_kubeconfig(work / "kubeconfig")
        (work / "none.pem").touch()
        db = work / "controller.db"
        args = ("--imex-isolation", "channel", "--imex-channel-count", str(channel_count),
                "--feature-gates", "HostManagedIMEX=true")  # fmt: skip
        controller = await ControllerProcess.start(
            kubeconfig, db, work / "controller.log", namespace=DRIVER_NAMESPACE, extra_args=args,
            env={"SSL_CERT_FILE": str(work / "none.pem"), "SSL_CERT_DIR": str(work)},
        )  # fmt: skip
        try:
            await until_quiet(controller)
            names = [f"cd-{index:04d}" for index in range(domains)]
            uids: list[str] = []

            def status(name: str) -> dict[str, Any]:
                return bench.domain_status(name)

            def create() -> None:
                uids.extend(str(bench.create_domain(name)["metadata"]["uid"]) for name in names)

            def admitted() -> bool:
                return all(status(name).get("status") for name in names)

            created = await phase(bench, controller, create, admitted)
            placed = placements(domains, nodes)
            wanted = {name: {clique_of(n) for n in where} for name, where in zip(names, placed, strict=True)}

            def allocate() -> None:
                for uid, name, where in zip(uids, names, placed, strict=True):
                    for k, node in enumerate(where):
                        bench.claim(uid, f"{name}-worker-{k}", f"gb200-{node:03d}")

            def assigned() -> bool:
                for name in names:
                    current = status(name)
                    held = {part.rpartition(":")[0] for part in str(current.get("channels", "")).split(",")}
                    if current.get("status") != "Ready" or held - {""} != wanted[name]:
                        return False
                return True

            assign = await phase(bench, controller, allocate, assigned)
            published = [
                (str(c["metadata"]["labels"][LABEL_CLIQUE_ID]), int(c["imexChannel"]))
                for c in bench.store.list_objects(bench.type_of(*CLIQUES), None, copies=False)[0]
            ]
            if len(set(published)) != len(published) or any(channel < 1 for _, channel in published):
                raise RuntimeError(f"a channel was handed out twice in a clique, or 0: {sorted(published)}")
            assignments = log_counts(db).get("ImexChannelAssigned", 0)
            assign["assignments"] = assignments
            cpu_ms = assign["controller_cpu_s"] * 1000
            assign["controller_cpu_ms_per_assignment"] = round(cpu_ms / max(1, assignments), 2)
            assign["claims"] = sum(len(w) for w in placed)

            def delete() -> None:
                for name in names:
                    bench.store.delete(bench.type_of(*CDS), USER_NAMESPACE, name)
                for name, where in zip(names, placed, strict=True):
                    for k in range(len(where)):
                        bench.store.delete(bench.type_of(*CLAIMS), USER_NAMESPACE, f"{name}-worker-{k}")

            def released() -> bool:
                gone = not bench.store.list_objects(bench.type_of(*CLIQUES), None, copies=False)[0]
                return gone and not bench.store.list_objects(bench.type_of(*CDS), None, copies=False)[0]

            release = await phase(bench, controller, delete, released)
            counts = log_counts(db)
            release["releases"] = counts.get("ImexChannelReleased", 0)
            release["controller_cpu_ms_per_release"] = round(
                release["controller_cpu_s"] * 1000 / max(1, release["releases"]), 2
            )
            peak = controller.peak_rss_mib()
        finally:
            await controller.stop()
    return {
        "domains": domains,
        "nodes": nodes,
        "cliques": (nodes + NODES_PER_CLIQUE - 1) // NODES_PER_CLIQUE,
        "channel_count": channel_count,
        "domains_phase": created,
        "assign_phase": assign,
        "release_phase": release,
        "channel_events": counts,
        "peak_rss_mib": peak,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", type=int, default=64)
    parser.add_argument("--nodes", type=int, default=144)
    parser.add_argument("--channel-count", type=int, default=2048)
    options = parser.parse_args()
    result = asyncio.run(run(options.domains, options.nodes, options.channel_count))
    result["machine"] = {"python": platform.python_version(), "cpus": os.cpu_count()}
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"channels-{stamp}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"written to {out}")


if __name__ == "__main__":
    main()
