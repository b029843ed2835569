"""A formed domain on real kubelets recovers from a kubelet restart that lost the CDI spec, a plugin restart
and a node reboot, and the kubelet never logs a broken resource-health stream."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.real import workload
from tests.real.rack import RealRack, RealSettings, eventually

NODES = 3
WATCH_ERROR = "Error receiving from WatchResources stream"


def watch_errors(rack: RealRack) -> list[str]:
    """The kubelet's `Error receiving from WatchResources stream` lines, but one it logs itself when it
    unregisters a plugin's stale socket after a reboot (code = Canceled: the kubelet cancelled the stream)."""
    return [line for node in rack.nodes.values() for line in node.log_lines(WATCH_ERROR)
            if "code = Canceled" not in line]  # fmt: skip


async def worker_restarted_on(rack: RealRack, node: str, after: int) -> None:
    """A worker container created on `node` after the first `after` records, with its channel resolved."""

    async def created() -> bool:
        fresh = rack.nodes[node].records()[after:]
        return any(r["ok"] and r["namespace"] == "team-a" and workload.channel_devices(r) for r in fresh)

    await eventually(f"a worker's container created again on {node}", created, 120)


async def test_a_domain_recovers_from_restarts_and_a_reboot(work_dir: Path) -> None:
    async with RealRack(work_dir, RealSettings(nodes=NODES)) as rack:
        await workload.submit(rack, "team-a", "nvl72", NODES, NODES)
        await workload.all_workers_started(rack, "team-a", NODES)
        first, second, third = rack.nodes
        plugin_log = rack.components[f"plugin/{first}"].log
        await eventually("the kubelet follows the plugin's health", lambda: _opened(plugin_log), 30)

        # A plugin restart (every upgrade of the DaemonSet): its health streams end cleanly.
        assert await rack.stop_component(f"plugin/{first}") == 0
        await rack.start_plugin(first)
        await rack.wait_published(first)
        assert watch_errors(rack) == []

        # The kubelet restarts and the node's CDI specs are gone: its re-prepare writes them again, and the
        # runtime resolves the worker's channel when the kubelet creates its container again.
        cdi = rack.nodes[second].cdi
        before = len(rack.nodes[second].records())
        await rack.restart_kubelet(second, lambda: [spec.unlink() for spec in cdi.glob("*claim*")])
        await worker_restarted_on(rack, second, before)

        # A reboot: the node's processes die, a new boot id, an empty CDI directory.
        before = len(rack.nodes[third].records())
        await rack.reboot(third)
        await worker_restarted_on(rack, third, before)

        async def daemon_back() -> bool:  # the kubelet created the daemon's container again: it runs
            return any(running.node == third for running in rack.runtime.running.values())

        await eventually(f"the IMEX daemon running again on {third}", daemon_back, 60)
        status = await rack.plane.get("computedomain", "nvl72", "-n", "team-a")
        assert status["status"]["status"] == "Ready", status["status"]
        assert watch_errors(rack) == []
        assert not rack.bridge_errors


async def _opened(log: Path) -> bool:
    text = await asyncio.to_thread(log.read_text, errors="replace")
    return "kubelet opened the resource-health stream" in text
