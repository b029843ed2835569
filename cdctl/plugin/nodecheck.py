"""One health check of the node: read what the device health depends on and publish the outcome.

Called by the plugin process's fabric loop (cdctl.plugin.app) every `fabric_reprobe_s` and on demand. It
probes NVML (`FabricReading`), reads, under HostManagedIMEX or channel isolation, whether /proc/devices
registers the IMEX channel major, asks the cluster port whether the IMEX daemon of each domain with a daemon
claim prepared here is Ready, feeds that to the pure model (cdctl.plugin.health.device_health) and publishes
the list on the `HealthBoard`. A
change of `channel-0`'s health is logged and recorded as an Event on the Node, so a degraded fabric shows
both on the pods that hold the channel (allocatedResourcesStatus) and on the node.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import structlog

from cdctl.domain.errors import CdctlError
from cdctl.k8s.errors import KubeApiError
from cdctl.plugin import cdi
from cdctl.plugin.channels import SharedChannels
from cdctl.plugin.checkpoint import ClaimBook
from cdctl.plugin.devices import DAEMON
from cdctl.plugin.health import (
    CHANNEL_DEVICE,
    DaemonReading,
    DeviceReport,
    FabricReading,
    Health,
    HealthBoard,
    HealthInputs,
    device_health,
)
from cdctl.plugin.nvml import DeviceLib, GpuFabric, NvmlUnavailable
from cdctl.plugin.ports import ClusterPort
from cdctl.plugin.preparesettings import FabricStatus

log = structlog.get_logger("cdctl.plugin.nodecheck")


@dataclass(frozen=True, slots=True)
class Probe:
    """An NVML probe: the GPUs, or why it failed; `unavailable` when the node has no usable driver."""

    gpus: tuple[GpuFabric, ...] = ()
    error: str | None = None
    unavailable: bool = False


def probe(lib: DeviceLib) -> Probe:
    try:
        return Probe(tuple(lib.probe()))
    except NvmlUnavailable as exc:
        return Probe(error=str(exc), unavailable=True)
    except CdctlError as exc:
        return Probe(error=str(exc))


class NodeCheck:
    """What one node's plugin knows, gathered for the health model."""

    def __init__(
        self,
        *,
        node: str,
        host_managed: bool,
        proc_devices: str,
        fabric: FabricStatus,
        board: HealthBoard,
        book: ClaimBook | None = None,
        cluster: ClusterPort | None = None,
    ) -> None:
        self.node = node
        self.host_managed = host_managed
        self.proc_devices = proc_devices
        self.fabric = fabric
        self.board = board
        self.book = book
        self.cluster = cluster
        self.driver_missing: str | None = None
        self.shared: SharedChannels | None = None  # channel isolation: the devices published, by name

    def _major_problem(self) -> str | None:
        if not self.host_managed and self.shared is None:
            return None
        try:
            cdi.device_major(cdi.CHANNEL_DEVICE_MAJOR_NAME, self.proc_devices)
        except CdctlError as exc:
            return str(exc)
        return None

    async def _daemons(self) -> tuple[DaemonReading, ...]:
        if self.host_managed or self.shared is not None or self.book is None or self.cluster is None:
            return ()
        domains = sorted({r.domain_uid for r in self.book.records() if r.completed and r.kind == DAEMON})
        out = []
        for uid in domains:
            ready: bool | None
            try:
                domain = await self.cluster.get_compute_domain(uid)
                ready = (
                    None
                    if domain is None
                    else await self.cluster.daemon_ready(domain, self.node, self.fabric.clique_id)
                )
            except (CdctlError, KubeApiError) as exc:
                log.warning("reading IMEX daemon readiness failed", domain=uid, error=str(exc))
                ready = None
            out.append(DaemonReading(uid, ready))
        return tuple(out)

    async def publish(self, found: Probe) -> list[DeviceReport]:
        """Publish the health that `found` and the rest of what the plugin knows give; returns it."""
        reading = FabricReading(found.gpus, found.error)
        inputs = HealthInputs(
            pool=self.node,
            clique_id=self.fabric.clique_id,
            host_managed=self.host_managed,
            single_node=self.fabric.single_node,
            fabric=reading,
            driver_missing=self.driver_missing,
            channel_major_problem=await asyncio.to_thread(self._major_problem),
            daemons=await self._daemons(),
            shared_devices=tuple(d.name for d in self.shared.devices()) if self.shared else (),
        )
        before = self.board.snapshot
        reports = device_health(inputs)
        if await self.board.publish(reports):
            await self._note_channel_change(before.reports if before else (), reports)
        return reports

    async def _note_channel_change(self, old: tuple[DeviceReport, ...], new: list[DeviceReport]) -> None:
        channel = CHANNEL_DEVICE if self.shared is None else (new[0].device if new else "")
        was = next((r for r in old if r.device == channel), None)
        now = next((r for r in new if r.device == channel), None)
        if now is None or (was is not None and was.health == now.health):
            return
        if now.health is Health.HEALTHY:
            log.info("channel-0 healthy", message=now.message)
            if was is not None and self.cluster is not None:
                await self.cluster.node_event(self.node, "IMEXChannelHealthy", now.message, warning=False)
            return
        log.warning(f"channel-0 {now.health.name.lower()}", message=now.message)
        if self.cluster is not None:
            await self.cluster.node_event(self.node, f"IMEXChannel{now.health.name.title()}", now.message)
