"""Readiness as the daemon itself sees it: `nvidia-imex-ctl -q` on its own schedule, transitions recorded.

Run by cdctl.daemon.app beside the peer loop. The kubelet's probes (`cdctl daemon check`) decide the pod's
Ready condition; this monitor asks the same question so that every change between READY and not ready lands
in the daemon's event log (`ImexReadinessChanged`, with what the daemon answered), and so that the handover
gate (cdctl.daemon.gate) opens the moment the IMEX now running answers READY and closes when it stops
answering. The first answer counts as a change only when it is READY (not ready is where every daemon
starts). After IMEX starts or exits the monitor asks again after FAST_POLL_S, then after twice as long each
time until READY, up to `period_s`: a node waits for its IMEX a fraction of a second, not a whole period, and
an IMEX that stays not ready costs a few checks, not ten a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time

import structlog

from cdctl.asynctasks import wait_at_most
from cdctl.daemon.check import CheckSettings, NotReady, check_async
from cdctl.daemon.gate import DaemonGate
from cdctl.daemon.journal import Journal
from cdctl.domain.imex import ImexReadinessChanged

log = structlog.get_logger(__name__)
FAST_POLL_S = 0.1


class ReadinessMonitor:
    def __init__(
        self,
        check: CheckSettings,
        node: str,
        journal: Journal,
        period_s: float,
        gate: DaemonGate | None = None,
    ) -> None:
        self.check = dataclasses.replace(check, gated=False)  # IMEX's own answer is what opens the gate
        self.node = node
        self.journal = journal
        self.period_s = period_s
        self.gate = gate
        self.ready = False
        self.changes = 0
        self._seen_generation = -1
        self._next_fast = FAST_POLL_S

    async def poll_once(self) -> bool:
        generation = self.gate.generation if self.gate is not None else 0
        try:
            output = await check_async(self.check)
            ready = True
        except NotReady as exc:
            output, ready = exc.output, False
        if self.gate is not None and ready:
            # An answer about an IMEX that has since stopped says nothing about the one running now.
            ready = self.gate.ready(generation)
        elif self.gate is not None:
            self.gate.close()
        if ready != self.ready:
            self.ready = ready
            self.changes += 1
            log.info("IMEX readiness changed", ready=ready, output=output)
            await self.journal.record(ImexReadinessChanged(self.node, ready, output))
        return ready

    def _next_wait(self, ready: bool) -> float:
        generation = self.gate.generation if self.gate is not None else 0
        if generation != self._seen_generation:
            self._seen_generation = generation
            self._next_fast = FAST_POLL_S
        if ready:
            return self.period_s
        wait, self._next_fast = self._next_fast, self._next_fast * 2
        return min(wait, self.period_s)

    async def run(self) -> None:
        while True:
            ready = await self.poll_once()
            wait = self._next_wait(ready)
            if self.gate is None:
                await asyncio.sleep(wait)
                continue
            deadline = time.monotonic() + wait
            seen = self.gate.generation
            # Woken early when IMEX starts or exits: its readiness is what a waiting claim needs next.
            while (left := deadline - time.monotonic()) > 0 and self.gate.generation == seen:
                with contextlib.suppress(TimeoutError):
                    await wait_at_most(self.gate.changed.wait(), left)
                self.gate.changed.clear()
