"""The plugin's side of the IMEX handover gate: holds and gate reads on the node's files (HandoverPort).

Built by cdctl.plugin.prepare's DeviceState unless a test hands it another HandoverPort. A hold is written
before the gate is read, so that a daemon closing the gate for a planned IMEX restart either finds the hold
and waits for it, or this read finds the gate closed (cdctl.api.imexgate).
"""

from __future__ import annotations

from pathlib import Path

from cdctl.api import imexgate


class GateFiles:
    def __init__(self, hold_s: float = imexgate.HOLD_S) -> None:
        self.hold_s = hold_s

    def hold(self, directory: Path, claim_uid: str) -> str | None:
        try:
            imexgate.hold(directory, claim_uid, self.hold_s)
        except FileNotFoundError:
            return imexgate.CLOSED_NO_FILE  # no daemon directory yet: its daemon claim is not prepared here
        closed = imexgate.gate_state(directory)
        if closed is not None:
            imexgate.release(directory, claim_uid)
        return closed

    async def until_open(self, directory: Path) -> None:
        await imexgate.until_open(directory)

    def release(self, directory: Path, claim_uid: str) -> None:
        imexgate.release(directory, claim_uid)
