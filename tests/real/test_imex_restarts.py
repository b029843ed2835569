"""Channel isolation on real kubelets while IMEX restarts: no worker's container is created while its node's
IMEX is down.

Nodes join the rack's clique one by one while workers start on the nodes already in it: each join makes every
shared IMEX daemon in the clique rewrite its node list and restart IMEX (IP mode), as on a cluster whose nodes
come up at different times. The handover gate (docs/channel-isolation.md, "Readiness") must keep every Prepare
of a worker's channel from being answered while its node's IMEX restarts, and hold a planned restart back
until the workers prepared before it have started. The test reads, from each shared daemon's log, when its
IMEX was down (from "IMEX daemon stopped" until "IMEX readiness changed" to ready) and, from the real
kubelets' runtime, when each worker's container was created.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.real import workload
from tests.real.rack import NAMESPACE, RealRack, RealSettings, eventually

NODES = 6
JOINING = 2  # the last two nodes join the clique while the workers start
WAVES = 3  # one single-GPU worker per early node and wave, each its own domain
HOLD_S = 5  # the handover hold: a real kubelet creates the container within a second of its Prepare


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def imex_down(log: Path) -> list[tuple[float, float]]:
    """The times IMEX was down, as the daemon saw it: until it first answered ready, and from each stop until
    it next answered ready (an interval still open at the end of the log runs to infinity)."""
    down: list[tuple[float, float]] = []
    since: float | None = float("-inf")
    for line in log.read_text(errors="replace").splitlines():
        try:
            entry: dict[str, Any] = json.loads(line)
        except ValueError:
            continue
        event = entry.get("event")
        if event == "IMEX daemon stopped" and since is None:
            since = _stamp(entry["timestamp"])
        elif event == "IMEX readiness changed" and entry.get("ready") is True and since is not None:
            down.append((since, _stamp(entry["timestamp"])))
            since = None
    if since is not None:
        down.append((since, float("inf")))
    return down


async def _shared_daemon_logs(rack: RealRack) -> dict[str, Path]:
    pods = (await rack.plane.get("pods", "-n", NAMESPACE))["items"]
    return {
        p["spec"]["nodeName"]: rack.logs / "pods" / f"{NAMESPACE}_{p['metadata']['name']}.log"
        for p in pods
        if rack.runtime.is_shared_daemon_pod(p) and p["spec"].get("nodeName")
    }


async def test_no_worker_starts_while_its_nodes_imex_restarts_for_a_joining_node(work_dir: Path) -> None:
    values = {"kubeletPlugin": {"imexHandoverHoldSeconds": HOLD_S}}
    settings = RealSettings(nodes=NODES, isolation="channel", late_plugins=JOINING, values=values)
    async with RealRack(work_dir, settings) as rack:
        early, joining = rack.early_nodes, list(rack.nodes)[len(rack.early_nodes) :]

        async def early_imex_ready() -> bool:
            logs = await _shared_daemon_logs(rack)
            return all(
                n in logs and logs[n].exists() and imex_down(logs[n])[-1][1] < float("inf") for n in early
            )

        await eventually("IMEX formed on the early nodes", early_imex_ready, timeout_s=120)
        submitted_at = datetime.now().timestamp()
        namespaces: list[str] = []
        for wave in range(WAVES):
            for index, node in enumerate(early):
                name = f"w{wave}n{index}"
                await workload.submit(rack, f"team-{name}", name, 1, 0, gpus_per_pod=1, node=node)
                namespaces.append(f"team-{name}")
            if wave < len(joining):  # a node joins: every shared IMEX of the clique restarts
                await rack.start_plugin(joining[wave])
                await rack.wait_published(joining[wave])
        for namespace in namespaces:
            await workload.all_workers_started(rack, namespace, 1, timeout_s=180)
        logs = await _shared_daemon_logs(rack)
        assert sorted(logs) == sorted(rack.nodes), "a shared daemon on every node, the joined ones too"
        down = {node: imex_down(logs[node]) for node in early}
        started_without_imex = []
        created_on: list[tuple[float, str]] = []
        for namespace in namespaces:
            (record,) = workload.worker_containers(rack, namespace).values()
            created = int(record["file"].rsplit("_", 2)[-2]) / 1e9
            created_on.append((created, record["node"]))
            if any(start <= created <= end for start, end in down[record["node"]]):
                started_without_imex.append(f"{namespace} on {record['node']} at {created:.3f}")
        restarted = {node: [d for d in down[node][1:] if d[0] > submitted_at] for node in early}
        assert all(restarted.values()), f"IMEX restarted on every early node after it was ready: {down}"
        assert not started_without_imex, f"workers created while IMEX was down: {started_without_imex}"
        before_a_restart = sum(1 for c, n in created_on if any(start > c for start, _ in restarted[n]))
        print(f"\n{len(namespaces)} workers on {len(early)} nodes; IMEX restarts after ready: "
              f"{sum(map(len, restarted.values()))}; workers created before a later restart on their node: "
              f"{before_a_restart}; created while IMEX was down: {len(started_without_imex)}")  # fmt: skip
        assert not rack.bridge_errors
