"""Faults done to a running rack on purpose: `kill -9` of a component, a controller pod deleted, a node lost.

What each stands for, and what the cluster does about it:
- `kill_controller(rack, replica)`, `kill_plugin(rack, node)`, `kill_daemon(rack, pod_uid)`: `kill -9` of that
  container. A `Restarter` then does what the kubelet does for a crashed container of a Deployment or
  DaemonSet pod: starts it again in the same pod (same name, same event log) after a back-off; the simulated
  container runtime restarts a daemon container at its kubelet's next pass.
- `delete_controller_pod(rack, replica, keep_log=True)`: the pod is force-deleted; its StatefulSet makes it
  again under the same name, on the same PersistentVolumeClaim and so the same event log (the chart's
  default); `keep_log=False` is a pod whose log is gone with it (persistence off: an emptyDir; or the volume
  lost) and starts a new, empty one.
- `kill_kubelet(rack, node, down_s)`: the kubelet process dies and is restarted `down_s` later; containers run
  on, and the kubelet prepares its running pods again on start.
- `power_off(rack, node)` / `power_on(rack, node)`: the node loses power (kubelet, plugin, daemons and their
  IMEX die; nothing more is heard from it, so the node lifecycle controller marks it Unknown after the
  grace period) and later boots again: a new boot id (cdctl.sim.node.fakedriver), an empty /var/run/cdi (a
  tmpfs), the kubelet registering the Node anew if it was deleted meanwhile, GPU Feature Discovery and the
  device plugin labelling it again, and the plugin DaemonSet's pod started there.
Used by the integration tests (failover, node loss, chaos) and bench/chaos.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from dataclasses import dataclass, field
from types import TracebackType

from cdctl.sim.node.fakedriver import reboot
from cdctl.sim.rack.launch import Rack

RESTART_POLL_S = 0.1


async def kill_controller(rack: Rack, replica: int = 0) -> None:
    component = rack.controllers.get(replica)
    if component is not None:
        await component.kill()


async def delete_controller_pod(rack: Rack, replica: int = 0, *, keep_log: bool = True) -> None:
    """Force-delete the replica's pod; its StatefulSet starts it again, on its log unless not `keep_log`."""
    await kill_controller(rack, replica)
    generation = rack.controller_generations.get(replica, 0)
    await rack.launch_controller(replica, generation if keep_log else generation + 1, new_pod=True)


async def kill_plugin(rack: Rack, node: str) -> None:
    component = rack.plugins.get(node)
    if component is not None:
        await component.kill()


def kill_daemon(rack: Rack, pod_uid: str) -> bool:
    """`kill -9` of a daemon container (and its IMEX); False when it does not run."""
    return rack.runtime.kill(pod_uid)


async def kill_kubelet(rack: Rack, node: str, down_s: float = 0.0) -> None:
    """The kubelet dies and comes back `down_s` later (its pods' containers run on meanwhile)."""
    kubelet = rack.cluster.kubelets[node]
    await kubelet.stop()
    await asyncio.sleep(down_s)
    if kubelet.powered:
        await kubelet.restart()


async def power_off(rack: Rack, node: str) -> None:
    """The node loses power: its kubelet, plugin and containers die; its disk keeps what it held."""
    await rack.cluster.kubelets[node].power_off()
    await kill_plugin(rack, node)
    await rack.runtime.kill_node(node)


async def power_on(rack: Rack, node: str, *, wait: bool = True) -> str:
    """The node boots again; returns its new boot id. With `wait`, returns once its plugin has registered."""
    boot_id = reboot(rack.cluster.driver_files(node))
    cdi = rack.cdi_root(node)
    shutil.rmtree(cdi, ignore_errors=True)  # /var/run/cdi is a tmpfs
    cdi.mkdir(parents=True, exist_ok=True)
    await rack.cluster.kubelets[node].power_on()
    rack.label_gpu_node(node)
    if node in rack.plugins:
        await rack.launch_plugin(node)
        if wait:
            await rack.wait_until_registered({node})
    return boot_id


@dataclass
class Restarter:
    """Restarts every controller replica or plugin that exited, `delay_s` after it did, as the kubelet
    restarts a crashed container (a plugin only while its node has power). `restarts` names each one."""

    rack: Rack
    delay_s: float = 0.5
    restarts: list[str] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Restarter:
        self._task = asyncio.create_task(self._run(), name="rack-restarter")
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            for replica, component in list(self.rack.controllers.items()):
                if component.returncode is not None:
                    await asyncio.sleep(self.delay_s)
                    if self.rack.controllers.get(replica) is component:
                        self.restarts.append(f"{component.name} (exit {component.returncode})")
                        generation = self.rack.controller_generations.get(replica, 0)
                        await self.rack.launch_controller(replica, generation)
            for node, component in list(self.rack.plugins.items()):
                if component.returncode is not None and self.rack.cluster.kubelets[node].powered:
                    await asyncio.sleep(self.delay_s)
                    if self.rack.plugins.get(node) is component and self.rack.cluster.kubelets[node].powered:
                        self.restarts.append(f"{component.name} (exit {component.returncode})")
                        await self.rack.launch_plugin(node)
            await asyncio.sleep(RESTART_POLL_S)
