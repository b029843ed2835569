"""The kubelet's DRA resource-health client, simulated as a 1.36 kubelet runs it, and the pod status it feeds.

`HealthWatch.follow(driver, endpoint)` (called by cdctl.sim.node.kubelet once a plugin registered) opens
`/v1alpha1.DRAResourceHealth/NodeWatchResources` on the plugin's DRA socket, records every device's health
from each full list it receives, and re-opens the stream 5 s after it ends or fails, as the kubelet does.
A failed open or a stream that ends with an error is kept in `errors` (the simulated cluster's checks fail on
any). `health(driver, pool, device)` answers as the kubelet's cache does: "Healthy", "Unhealthy" or
"Unknown", and "Unknown" once a report is older than its timeout (30 s when the plugin gives none).

`allocated_resources_status(pod, claims, devices, health)` builds a container's
`allocatedResourcesStatus` the kubelet's way: one entry per container claim reference, named
`claim:<pod claim name>` or `claim:<pod claim name>/<request>`, listing every device prepared for that claim
with `resourceID` (the device's first CDI ID, else `<driver>/<pool>/<device>`) and its `health`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpclib
from grpclib.client import Channel
from grpclib.exceptions import StreamTerminatedError

from cdctl._proto import v1alpha1 as health_v1alpha1

log = logging.getLogger(__name__)
REOPEN_S = 5.0
DEFAULT_TIMEOUT_S = 30.0
_NAMES = {0: "Unknown", 1: "Healthy", 2: "Unhealthy"}


@dataclass(frozen=True)
class PreparedDevice:
    driver: str
    pool: str
    device: str
    cdi_ids: tuple[str, ...]

    @property
    def resource_id(self) -> str:
        return self.cdi_ids[0] if self.cdi_ids else f"{self.driver}/{self.pool}/{self.device}"


@dataclass
class DeviceHealth:
    health: str
    message: str
    last_updated: float
    timeout_s: float


@dataclass
class HealthWatch:
    node: str
    on_change: Callable[[str], None] = lambda driver: None
    reopen_s: float = REOPEN_S
    devices: dict[tuple[str, str, str], DeviceHealth] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    streams_opened: dict[str, int] = field(default_factory=dict)
    _tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    def followed(self) -> set[str]:
        return set(self._tasks)

    def follow(self, driver: str, endpoint: Path) -> None:
        if driver not in self._tasks:
            self._tasks[driver] = asyncio.create_task(self._run(driver, endpoint), name=f"health-{driver}")

    async def forget(self, driver: str) -> None:
        """The plugin deregistered: stop watching and drop its devices (the kubelet clears its cache)."""
        task = self._tasks.pop(driver, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for key in [k for k in self.devices if k[0] == driver]:
            del self.devices[key]
        self.on_change(driver)

    async def stop(self) -> None:
        for driver in list(self._tasks):
            await self.forget(driver)

    def health(self, driver: str, pool: str, device: str) -> str:
        found = self.devices.get((driver, pool, device))
        if found is None or time.time() - found.last_updated > found.timeout_s:
            return "Unknown"
        return found.health

    async def _run(self, driver: str, endpoint: Path) -> None:
        while True:
            try:
                await self._stream(driver, endpoint)
            except (OSError, TimeoutError, grpclib.GRPCError, StreamTerminatedError) as error:
                message = f"{self.node}: NodeWatchResources of {driver}: {error}"
                log.warning("simulated kubelet %s", message)
                self.errors.append(message)
            await asyncio.sleep(self.reopen_s)

    async def _stream(self, driver: str, endpoint: Path) -> None:
        channel = Channel(path=str(endpoint))
        try:
            stub = health_v1alpha1.DraResourceHealthStub(channel)
            self.streams_opened[driver] = self.streams_opened.get(driver, 0) + 1
            async for response in stub.node_watch_resources(health_v1alpha1.NodeWatchResourcesRequest()):
                self._record(driver, response)
        finally:
            channel.close()

    def _record(self, driver: str, response: health_v1alpha1.NodeWatchResourcesResponse) -> None:
        listed = set()
        for entry in response.devices:
            if entry.device is None:
                self.errors.append(f"{self.node}: {driver} sent a device health without a device")
                continue
            key = (driver, entry.device.pool_name, entry.device.device_name)
            listed.add(key)
            timeout = entry.health_check_timeout_seconds
            self.devices[key] = DeviceHealth(
                _NAMES.get(int(entry.health), "Unknown"),
                entry.message,
                float(entry.last_updated_time),
                float(timeout) if timeout > 0 else DEFAULT_TIMEOUT_S,
            )
        for key in [k for k in self.devices if k[0] == driver and k not in listed]:
            del self.devices[key]  # a full list: what it leaves out is no longer known
        self.on_change(driver)


def allocated_resources_status(
    container: dict[str, Any],
    claim_by_pod_name: dict[str, str],
    devices: dict[str, list[PreparedDevice]],
    health: Callable[[str, str, str], str],
) -> list[dict[str, Any]]:
    """The container's allocatedResourcesStatus; `claim_by_pod_name` maps the pod's claim names to
    ResourceClaim UIDs, `devices` the UIDs to what was prepared for them."""
    out = []
    for ref in (container.get("resources") or {}).get("claims") or []:
        uid = claim_by_pod_name.get(str(ref.get("name", "")))
        prepared = devices.get(uid or "", [])
        if not prepared:
            continue
        name = f"claim:{ref['name']}" + (f"/{ref['request']}" if ref.get("request") else "")
        resources = [
            {"resourceID": d.resource_id, "health": health(d.driver, d.pool, d.device)} for d in prepared
        ]
        out.append({"name": name, "resources": resources})
    return out
