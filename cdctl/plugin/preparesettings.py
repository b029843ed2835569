"""What Prepare is configured with and the errors it answers: settings, the fabric status, the waits.

`PrepareSettings` (the node, its directories, the IMEX mode and isolation) and `FabricStatus` (the node's
clique) are built by cdctl.plugin.app; the errors are raised by cdctl.plugin.prepare and read by
cdctl.plugin.driver, which pauses a `WatchedWait` until the watches say it may hold.
`check_host_managed_config` is HostManagedIMEX's allowlist, shared with the chart's claim admission tests.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from cdctl.api import imexgate
from cdctl.api.configs import ALLOCATION_MODE_SINGLE, DaemonConfig, DeviceConfig
from cdctl.api.isolation import DEFAULT_CHANNEL_COUNT, ImexIsolation
from cdctl.domain.errors import PermanentError, RetriableError
from cdctl.plugin import cdi
from cdctl.plugin import channels as ch
from cdctl.plugin.devices import PUBLISHED_DEVICES

NOT_READY_DELAY = 0.5
HOST_MANAGED_ALLOCATION_MODES = ("", ALLOCATION_MODE_SINGLE)


def check_host_managed_config(config: DeviceConfig, channel_isolation: bool = False) -> None:
    """HostManagedIMEX's explicit allowlist, ahead of generic validation: channel claims with allocationMode
    unset or Single only (any other value, All included, is refused by name), and no daemon claims. Under
    channel isolation the allocationMode rule is channel isolation's own (cdctl.plugin.channels)."""
    if isinstance(config, DaemonConfig):
        raise PermanentError(
            "daemon claims are disabled under HostManagedIMEX: the host's nvidia-imex owns the IMEX domain "
            "(no daemon device is published, no daemon claim template made: a stale or hand-made claim)"
        )
    if not channel_isolation and config.allocation_mode not in HOST_MANAGED_ALLOCATION_MODES:
        raise PermanentError(
            f"allocationMode {config.allocation_mode} is not supported with HostManagedIMEX: "
            "only Single (or unset) is allowed, one channel (channel 0) per node"
        )


class WatchedWait(RetriableError):
    """A condition the watches will report: retried; `wake()` returns when a watch says it holds (the
    driver stops pausing then). `watched`: the answer came from running watches, so nothing but that wake
    can change it."""

    def __init__(self, message: str, wake: Callable[[], Awaitable[None]], watched: bool = False) -> None:
        super().__init__(message, delay=NOT_READY_DELAY)
        self.wake = wake
        self.watched = watched


class DaemonNotReady(WatchedWait):
    """This node's daemon of the domain (channel isolation: the node's shared daemon) is not Ready yet."""


class ChannelNotAssigned(WatchedWait):
    """Channel isolation: the controller has not published the domain's channel in this clique yet."""


class PrepareFenced(PermanentError):
    """The prepare began before the claim was unprepared: it must not (re)create anything."""


@dataclass
class FabricStatus:
    """The node's clique ID and, while the fabric is not COMPLETED (strict mode), why; `single_node` on a
    single-node NVLink system, where an incomplete registration means no clique (cdctl.plugin.nvml)."""

    clique_id: str = ""
    pending: str | None = None
    single_node: bool = False


@dataclass(frozen=True)
class PrepareSettings:
    node: str
    plugin_dir: Path  # <kubelet plugins dir>/compute-domain.nvidia.com
    cdi_root: Path
    driver_namespace: str  # where the controller creates daemon DaemonSets (and their claims)
    # More namespaces the controller manages daemon DaemonSets in (ADDITIONAL_NAMESPACES): an earlier
    # install's DaemonSets there are reused, so their claims are prepared too.
    additional_namespaces: tuple[str, ...] = ()

    @property
    def daemon_namespaces(self) -> tuple[str, ...]:
        """The namespaces whose daemon claims are prepared: the driver namespace first."""
        return tuple(dict.fromkeys((self.driver_namespace, *filter(None, self.additional_namespaces))))

    proc_devices: str = cdi.DEFAULT_PROC_DEVICES
    fabric_imex_mgmt_cap: str = cdi.FABRIC_IMEX_MGMT_CAP
    host_managed: bool = False
    # How long a claim handed a channel keeps a planned IMEX restart on its node back (cdctl.api.imexgate).
    handover_hold_s: float = imexgate.HOLD_S
    fsync: bool = True
    isolation: ImexIsolation = ImexIsolation.DOMAIN
    channel_slots: int = 0  # channel isolation: the slot devices this node may have published
    channel_count: int = DEFAULT_CHANNEL_COUNT  # channel isolation: channels per IMEX domain

    @property
    def channel_isolation(self) -> bool:
        return self.isolation is ImexIsolation.CHANNEL

    @property
    def published(self) -> dict[str, str]:
        """Device name -> kind of every device a claim's allocation may name on this node."""
        if self.channel_isolation:
            return ch.shared_device_names(self.channel_slots)
        return dict(PUBLISHED_DEVICES)

    @property
    def shared_devices(self) -> frozenset[str]:
        """Devices many claims hold at once (the multi-allocatable channel device)."""
        return frozenset({ch.SHARED_DEVICE}) if self.channel_isolation else frozenset()
