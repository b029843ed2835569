"""Readiness as the daemon itself sees it: `nvidia-imex-ctl -q` every few seconds, transitions recorded.

Run by cdctl.daemon.app beside the peer loop. The kubelet's probes (`cdctl daemon check`) decide the pod's
Ready condition; this monitor asks the same question on its own schedule so that every change between READY
and not ready lands in the daemon's event log (`ImexReadinessChanged`, with what the daemon answered). The
first answer counts as a change only when it is READY (not ready is where every daemon starts).
"""

from __future__ import annotations

import asyncio

import structlog

from cdctl.daemon.check import CheckSettings, NotReady, check_async
from cdctl.daemon.journal import Journal
from cdctl.domain.imex import ImexReadinessChanged

log = structlog.get_logger(__name__)


class ReadinessMonitor:
    def __init__(self, check: CheckSettings, node: str, journal: Journal, period_s: float) -> None:
        self.check = check
        self.node = node
        self.journal = journal
        self.period_s = period_s
        self.ready = False
        self.changes = 0

    async def poll_once(self) -> bool:
        try:
            output = await check_async(self.check)
            ready = True
        except NotReady as exc:
            output, ready = exc.output, False
        if ready != self.ready:
            self.ready = ready
            self.changes += 1
            log.info("IMEX readiness changed", ready=ready, output=output)
            await self.journal.record(ImexReadinessChanged(self.node, ready, output))
        return ready

    async def run(self) -> None:
        while True:
            await self.poll_once()
            await asyncio.sleep(self.period_s)
