"""Device health: what the plugin knows, turned into the health of each device it serves, and the board that
streams it.

`device_health(inputs)` is a pure function from what the plugin knows (the latest NVML fabric reading, the
clique it serves, under HostManagedIMEX whether the IMEX channel major is registered, and the readiness of
the IMEX daemons prepared on this node) to one `DeviceReport` per device: HEALTHY, UNHEALTHY or UNKNOWN with
a message. A node without a GPU driver serves no device, so its list is empty.

`HealthBoard` holds the current list. The plugin process (cdctl.plugin.app) publishes to it after every
check; the DRAResourceHealth service (cdctl.plugin.healthservice) streams it to the kubelet: the full list on
open, again on every change, and at least every `resend_s` so the kubelet's copy never goes stale (the
kubelet reads a device as Unknown once its `last_updated_time` is older than `timeout_s`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from functools import partial

from cdctl.plugin.nvml import (
    NVML_SUCCESS,
    STATE_COMPLETED,
    STATE_NAMES,
    STATE_NOT_SUPPORTED,
    GpuFabric,
    NvmlError,
    discover_clique,
)

CHANNEL_DEVICE = "channel-0"
DAEMON_DEVICE = "daemon-0"
MAX_MESSAGE = 1024  # the kubelet truncates longer messages to 1021 characters and "..."


class Health(IntEnum):
    """The wire values of the API's HealthStatus enum."""

    UNKNOWN = 0
    HEALTHY = 1
    UNHEALTHY = 2


@dataclass(frozen=True, slots=True)
class DeviceReport:
    pool: str
    device: str
    health: Health
    message: str


@dataclass(frozen=True, slots=True)
class FabricReading:
    """One NVML probe: every GPU's fabric info, or why NVML could not answer."""

    gpus: tuple[GpuFabric, ...] = ()
    error: str | None = None


@dataclass(frozen=True, slots=True)
class DaemonReading:
    """The IMEX daemon of one domain prepared on this node: Ready, not Ready, or unknown (None)."""

    domain_uid: str
    ready: bool | None


@dataclass(frozen=True, slots=True)
class HealthInputs:
    pool: str  # the node name: the plugin publishes one pool named after its node
    clique_id: str  # the clique the plugin serves ("" for none)
    host_managed: bool
    single_node: bool = False  # a single-node NVLink system: incomplete registrations mean no clique
    fabric: FabricReading | None = None  # None: not probed yet
    driver_missing: str | None = None  # why there is no GPU driver on this node; then no device is served
    channel_major_problem: str | None = None  # HostManagedIMEX: why the channel major is not usable
    daemons: tuple[DaemonReading, ...] = ()
    # Channel isolation: the shared channel devices the node publishes (cdctl.plugin.channels); each has the
    # channel's health, and there is no daemon device.
    shared_devices: tuple[str, ...] = ()


def truncate(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."


def fabric_problem(gpus: Sequence[GpuFabric], clique_id: str, single_node: bool = False) -> str | None:
    """Why the fabric no longer serves `clique_id`, or None while it does.

    A GPU whose fabric is not supported is skipped (a node without NVLink fabric serves the empty clique);
    any other GPU must be COMPLETED with status SUCCESS, and the GPUs together must still form `clique_id`.
    """
    for gpu in gpus:
        info = gpu.info
        if info is None or info.state == STATE_NOT_SUPPORTED:
            continue
        tag = f"GPU {gpu.index} ({gpu.uuid})"
        if info.state != STATE_COMPLETED and single_node and not clique_id:
            continue  # served as "no clique" (upstream PR 1289): local IMEX needs no fabric
        if info.state != STATE_COMPLETED:
            name = STATE_NAMES.get(info.state, str(info.state))
            return f"NVLink fabric degraded: {tag} fabric state is {name}"
        if info.status != NVML_SUCCESS:
            return f"NVLink fabric degraded: {tag} fabric status is {info.status}, not SUCCESS"
    try:
        found = discover_clique(gpus, strict=False).clique_id
    except NvmlError as exc:
        return f"NVLink fabric inconsistent: {exc}"
    if found != clique_id:
        return (
            f"NVLink clique changed from {clique_id or '(none)'} to {found or '(none)'}; "
            "the plugin serves the new clique from its next clique refresh"
        )
    return None


def _channel(inputs: HealthInputs) -> tuple[Health, str]:
    fabric = inputs.fabric
    if fabric is None:
        return Health.UNKNOWN, "NVLink fabric not probed yet"
    if fabric.error is not None:
        return Health.UNKNOWN, f"NVML could not be read: {fabric.error}"
    problem = fabric_problem(fabric.gpus, inputs.clique_id, inputs.single_node)
    if problem is not None:
        return Health.UNHEALTHY, problem
    if (inputs.host_managed or inputs.shared_devices) and inputs.channel_major_problem is not None:
        return Health.UNHEALTHY, f"IMEX channel device not usable: {inputs.channel_major_problem}"
    if inputs.clique_id:
        return Health.HEALTHY, f"NVLink fabric COMPLETED; clique {inputs.clique_id}"
    return Health.HEALTHY, "no NVLink clique on this node; IMEX channels are local only"


def _daemon(inputs: HealthInputs, channel: tuple[Health, str]) -> tuple[Health, str]:
    if channel[0] is not Health.HEALTHY:
        return channel  # the daemon needs the fabric the channel reports on
    waiting = [d.domain_uid for d in inputs.daemons if d.ready is False]
    unknown = [d.domain_uid for d in inputs.daemons if d.ready is None]
    if waiting:
        return Health.UNKNOWN, f"IMEX daemon of domain {', '.join(waiting)} not Ready"
    if unknown:
        return Health.UNKNOWN, f"readiness of the IMEX daemon of domain {', '.join(unknown)} unknown"
    if inputs.daemons:
        ready = ", ".join(d.domain_uid for d in inputs.daemons)
        return Health.HEALTHY, f"IMEX daemon of domain {ready} Ready"
    return Health.HEALTHY, "no IMEX daemon prepared on this node"


def device_health(inputs: HealthInputs) -> list[DeviceReport]:
    """Every device the plugin serves with its health: `channel-0`, and `daemon-0` unless IMEX is
    host-managed (under channel isolation: each shared channel device); nothing on a node without a GPU
    driver."""
    if inputs.driver_missing is not None:
        return []
    channel = _channel(inputs)
    if inputs.shared_devices:
        return [
            DeviceReport(inputs.pool, name, channel[0], truncate(channel[1]))
            for name in inputs.shared_devices
        ]
    out = [DeviceReport(inputs.pool, CHANNEL_DEVICE, channel[0], truncate(channel[1]))]
    if not inputs.host_managed:
        daemon = _daemon(inputs, channel)
        out.append(DeviceReport(inputs.pool, DAEMON_DEVICE, daemon[0], truncate(daemon[1])))
    return out


@dataclass(frozen=True, slots=True)
class Snapshot:
    reports: tuple[DeviceReport, ...]
    checked_at: int  # unix seconds of the check that confirmed these reports
    timeout_s: int  # how long the kubelet may trust them


class HealthBoard:
    """The current device health and the streams that follow it."""

    def __init__(self, resend_s: float = 15.0, timeout_s: int = 60) -> None:
        self.resend_s = resend_s
        self.timeout_s = timeout_s
        self._snapshot: Snapshot | None = None
        self._version = 0
        self._changed = asyncio.Condition()
        self._closed = False
        self.watchers = 0

    @property
    def snapshot(self) -> Snapshot | None:
        return self._snapshot

    async def publish(self, reports: Sequence[DeviceReport], checked_at: float | None = None) -> bool:
        """Record a check's outcome; True (and every stream sends) when a device's health or message
        changed. An unchanged outcome only refreshes the time that later sends carry."""
        at = int(checked_at if checked_at is not None else time.time())
        new = tuple(reports)
        old = self._snapshot
        if old is not None and old.reports == new:
            self._snapshot = replace(old, checked_at=at)
            return False
        self._snapshot = Snapshot(new, at, self.timeout_s)
        async with self._changed:
            self._version += 1
            self._changed.notify_all()
        return True

    async def close(self) -> None:
        """End every stream, and any opened later, cleanly: the plugin is stopping. The kubelet takes only a
        clean end of its NodeWatchResources stream as normal; a stream cut by the server closing logs
        `Error receiving from WatchResources stream ... Unavailable` on every plugin restart."""
        async with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _has_news(self, sent: int) -> bool:
        return self._closed or (self._snapshot is not None and self._version != sent)

    async def watch(self) -> AsyncIterator[Snapshot]:
        """The current snapshot at once (once there is one), then on every change, and after `resend_s`
        without one. Ends when the caller stops iterating (the kubelet closes the stream) or the board is
        closed (the plugin stops)."""
        self.watchers += 1
        try:
            sent = -1
            while not self._closed:
                async with self._changed:
                    if self._version == sent or self._snapshot is None:
                        try:
                            async with asyncio.timeout(self.resend_s):
                                await self._changed.wait_for(partial(self._has_news, sent))
                        except TimeoutError:
                            if self._snapshot is None:
                                continue
                    if self._closed:
                        return
                    sent = self._version
                    snapshot = self._snapshot
                assert snapshot is not None
                yield snapshot
        finally:
            self.watchers -= 1
