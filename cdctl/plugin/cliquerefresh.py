"""Re-reading the node's NVLink clique, and the `nvidia.com/gpu.clique` node label (upstream PR 1247).

Called by the plugin process (cdctl.plugin.app): `apply_label` once at start-up when `--gpu-clique-label` is
on, then `run` re-reads the clique every `--clique-refresh-interval` (10 minutes by default: Fabric Manager
partitioning can move a node to another clique without a reboot). A change is a state change: a log line at
verbosity 0, a Kubernetes Event on the Node (`NVLinkCliqueChanged`), the ResourceSlice republished with its
pool generation bumped (schedulers drop what they cached of the old pool), and the label rewritten. A probe
that fails (NVML error, GPUs in different cliques, a registration error) changes nothing and is retried at the
next tick, as the Go driver's periodic refresh does; a fabric that is not COMPLETED (strict mode) is left to
the fabric loop, which waits for it.

Claims prepared before the change keep the channel devices they got; Prepares after it use the new clique.
`on_change` lets the process restart itself where its watches are keyed by the clique (driver-managed mode
with ComputeDomainCliques follows only its clique's ComputeDomainClique objects).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from cdctl.api.refs import GPU_CLIQUE_LABEL
from cdctl.domain.errors import CdctlError
from cdctl.k8s.errors import KubeApiError
from cdctl.plugin import nvml
from cdctl.plugin.preparesettings import FabricStatus

log = structlog.get_logger("cdctl.plugin.cliquerefresh")

DEFAULT_REFRESH_S = 600.0
CHANGE_REASON = "NVLinkCliqueChanged"

NodeEvent = Callable[[str, str, bool], Awaitable[None]]  # reason, message, warning


class CliqueRefresher:
    """Keeps `fabric.clique_id` (and, when asked, the node label) equal to what NVML says."""

    def __init__(
        self,
        *,
        lib: nvml.DeviceLib,
        strict: bool,
        fabric: FabricStatus,
        republish: Callable[[], None],
        node_event: NodeEvent,
        set_label: Callable[[str], Awaitable[object]] | None = None,
        on_change: Callable[[], None] | None = None,
        interval_s: float = DEFAULT_REFRESH_S,
    ) -> None:
        self.lib = lib
        self.strict = strict
        self.fabric = fabric
        self.republish = republish
        self.node_event = node_event
        self.set_label = set_label
        self.on_change = on_change
        self.interval_s = interval_s
        self.changes = 0
        self._labelled: str | None = None  # the value the label was last written with

    async def apply_label(self) -> None:
        """Write the label for the clique served now (nothing when the label is off or already right); API
        errors propagate."""
        if self.set_label is None or self._labelled == self.fabric.clique_id:
            return
        await self.set_label(self.fabric.clique_id)
        self._labelled = self.fabric.clique_id
        log.info("node label set", label=GPU_CLIQUE_LABEL, value=self.fabric.clique_id or "(removed)")

    async def label_or_retry(self) -> None:
        try:
            await self.apply_label()
        except (KubeApiError, CdctlError) as exc:
            log.error("could not set the node's clique label; retrying at the next tick", error=str(exc))

    def _read(self) -> nvml.CliqueDiscovery:
        return nvml.discover_clique(self.lib.probe(), strict=self.strict, single_node=self.fabric.single_node)

    async def refresh_once(self) -> bool:
        """Re-read the clique; True when it changed (and everything that follows it was updated)."""
        try:
            found = await asyncio.to_thread(self._read)
        except CdctlError as exc:
            log.error("clique refresh failed; retrying at the next tick", error=str(exc))
            return False
        if found.pending is not None or self.fabric.pending is not None:
            return False  # the fabric loop waits for a fabric that is not COMPLETED
        if found.clique_id == self.fabric.clique_id:
            await self.label_or_retry()  # a label write that failed before
            return False
        old, self.fabric.clique_id = self.fabric.clique_id, found.clique_id
        self.changes += 1
        message = f"NVLink clique changed from {old or '(none)'} to {found.clique_id or '(none)'}"
        log.warning(message, old=old, new=found.clique_id)
        self.republish()
        await self.node_event(CHANGE_REASON, message, True)
        await self.label_or_retry()
        if self.on_change is not None:
            self.on_change()
        return True

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.refresh_once()
