"""The daemon's side of the handover gate (cdctl.api.imexgate): open only while the IMEX now running is ready.

Called by cdctl.daemon.supervisor and cdctl.daemon.readiness, built by cdctl.daemon.app. The gate closes when
the daemon starts (a gate a killed predecessor left behind), whenever an IMEX starts or exits (`imex_changed`,
which also moves the generation on, so that a READY answer about the IMEX before cannot open the gate for the
one after), when a planned stop begins (`stopping`: blocked until the stopped IMEX is seen gone, since it
answers READY until it exits), and when the readiness monitor sees IMEX not ready. It opens when the monitor
sees READY for the current generation. Before a planned stop of IMEX (`drain`) it closes and then waits
until every hold a plugin wrote before the close has expired or been released: those claims may have been
handed a channel whose workload is still starting. Holds written after the close need no wait (their
plugin sees the gate closed and hands nothing), so a drain ends even while claims keep retrying.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import structlog

from cdctl.api.imexgate import GateKeeper, live_holds

log = structlog.get_logger(__name__)
DRAIN_POLL_S = 0.1


class DaemonGate:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.keeper = GateKeeper(directory)
        self.generation = 0
        self.changed = asyncio.Event()  # set at every start and exit of IMEX (the monitor's wake-up)
        # From a drain until IMEX next starts, exits or reloads: a READY answered by the IMEX about to be
        # stopped or reloaded must not open the gate again (holds written then would go unwaited).
        self.blocked = False

    def close(self) -> None:
        """Closed at start (a gate a killed predecessor left behind) and when IMEX stops answering READY."""
        self.keeper.close()

    def imex_changed(self) -> None:
        """An IMEX started, or the one running was seen gone: READY from the next check opens the gate."""
        self.generation += 1
        self.blocked = False
        self.keeper.close()
        self.changed.set()

    def stopping(self) -> None:
        """IMEX is being stopped on purpose. It goes on answering READY until it has exited (a real one takes
        its time over SIGTERM): no answer from now until its exit is seen or a new IMEX starts opens the
        gate, or a Prepare would be handed the IMEX about to go."""
        self.generation += 1
        self.blocked = True
        self.keeper.close()
        self.changed.set()

    def ready(self, generation: int) -> bool:
        """IMEX answered READY in `generation`: open the gate if no IMEX started or exited since; whether
        it is open now."""
        if generation == self.generation and not self.blocked:
            self.keeper.open()
        return self.keeper.is_open

    async def drain(self, reason: str) -> None:
        """Close the gate, keep it closed until IMEX changes (`imex_changed`), and wait out the holds written
        before."""
        self.blocked = True
        self.keeper.close()
        started = time.monotonic()
        pending = await asyncio.to_thread(live_holds, self.directory)
        if not pending:
            return
        log.info(
            "IMEX stop waits for claims handed a channel moments ago",
            reason=reason, claims=sorted(pending), until_s=round(max(pending.values()) - time.time(), 3),
        )  # fmt: skip
        while pending:
            await asyncio.sleep(DRAIN_POLL_S)
            live = await asyncio.to_thread(live_holds, self.directory)
            pending = {uid: until for uid, until in pending.items() if uid in live}
        log.info("holds drained; stopping IMEX", reason=reason, waited_s=round(time.monotonic() - started, 3))
