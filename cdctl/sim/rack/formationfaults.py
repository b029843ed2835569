"""Faults `cdctl sim rack --fault KIND:NODE[:SECONDS]` injects while the domain forms, so that `cdctl explain`
has a cause to find (docs/explain.md):

- `slow-node`: the node's kubelet stops for SECONDS (default 3) once the domain is created, as a node
  too loaded to start its pods does; its daemon and worker start late.
- `imex-crash`: the node's IMEX is killed (SIGKILL) once it runs; the daemon restarts it after its
  back-off, and the node is Ready only then (cause `imex-crashed`).
- `power-loss`: the node loses power once its daemon runs and boots again SECONDS later (default 2); its
  plugin starts again (cause `node-lost`).
- `channels-exhausted` (channel isolation): another team's domain with a pod on the node holds a channel of
  its clique from before the rack's domains are created (cdctl.sim.rack.channelholder) and is deleted SECONDS
  (default 3) after they are. The rack then has one channel per domain (`--imex-channel-count` is
  `--domains` + 1 unless given, and may not be more), so one domain waits for a channel until the holder's is
  released (cause `channels-exhausted`).
`parse_fault` refuses a bad value naming `--fault`; `FormationFaults(faults)` gives the scenario its hooks,
`before` (ahead of the domains) and `during` (while they form; cdctl.sim.rack.scenario.run_scenario). Used
by cdctl.cli.sim and cdctl.sim.rack.rackcommand.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cdctl.domain.errors import InvalidInput
from cdctl.sim.rack.channelholder import Holder, hold_channel, release
from cdctl.sim.rack.faults import kill_kubelet, power_off, power_on
from cdctl.sim.rack.launch import Rack

CHANNELS_EXHAUSTED = "channels-exhausted"
# kind -> default SECONDS
KINDS = {"slow-node": 3.0, "imex-crash": 0.0, "power-loss": 2.0, CHANNELS_EXHAUSTED: 3.0}
FLAG = "--fault"
POLL_S = 0.05
WAIT_FOR_IMEX_S = 60.0


@dataclass(frozen=True, slots=True)
class FormationFault:
    kind: str
    node: str
    seconds: float

    def __str__(self) -> str:
        return f"{self.kind}:{self.node}" + (f":{self.seconds:g}" if self.kind != "imex-crash" else "")


def parse_fault(text: str, nodes: Sequence[str]) -> FormationFault:
    """KIND:NODE[:SECONDS] for a node of the rack; InvalidInput naming --fault otherwise."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or parts[0] not in KINDS:
        raise InvalidInput(
            "command line", FLAG, f"{text!r} is not KIND:NODE[:SECONDS] (KIND: {', '.join(KINDS)})"
        )
    kind, node = parts[0], parts[1]
    if node not in nodes:
        shown = ", ".join(list(nodes)[:3]) + (" ..." if len(nodes) > 3 else "")
        raise InvalidInput("command line", FLAG, f"{text!r}: no GPU node {node!r} in this rack ({shown})")
    seconds = KINDS[kind]
    if len(parts) == 3:
        try:
            seconds = float(parts[2])
        except ValueError:
            raise InvalidInput(
                "command line", FLAG, f"{text!r}: SECONDS {parts[2]!r} is not a number"
            ) from None
        if not 0 < seconds <= 300:
            raise InvalidInput("command line", FLAG, f"{text!r}: SECONDS must be above 0 and at most 300")
    return FormationFault(kind, node, seconds)


class FormationFaults:
    """The scenario's hooks for a run's faults: `before` ahead of its domains, `during` while they form."""

    def __init__(self, faults: Sequence[FormationFault]) -> None:
        self.faults = list(faults)
        self.holders: dict[FormationFault, Holder] = {}

    async def before(self, rack: Rack) -> None:
        for fault in self.faults:
            if fault.kind == CHANNELS_EXHAUSTED:
                self.holders[fault] = await hold_channel(rack, fault.node)

    async def during(self, rack: Rack) -> None:
        """Each fault at its moment, side by side."""
        await asyncio.gather(*(self._inject(rack, fault) for fault in self.faults))

    async def _inject(self, rack: Rack, fault: FormationFault) -> None:
        if fault.kind == "slow-node":
            await kill_kubelet(rack, fault.node, down_s=fault.seconds)
            return
        if fault.kind == CHANNELS_EXHAUSTED:
            holder = self.holders.get(fault)
            if holder is not None:  # None: `before` failed, and said so
                await asyncio.sleep(fault.seconds)
                await release(rack, holder)
            return
        pid = await _imex_of(rack, fault.node)
        if fault.kind == "imex-crash":
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            return
        await power_off(rack, fault.node)
        await asyncio.sleep(fault.seconds)
        await power_on(rack, fault.node)


async def _imex_of(rack: Rack, node: str) -> int:
    """The pid of the IMEX a daemon runs on `node`, once one does: its config lies in the node's own
    plugin directory (a daemon's container may come from the fork server, not be a child of the runtime)."""
    where = f"{rack.plugin_db(node).parent}/"
    try:
        async with asyncio.timeout(WAIT_FOR_IMEX_S):
            while (pid := _imex_under(where)) is None:  # noqa: ASYNC110 - another process's state
                await asyncio.sleep(POLL_S)
            return pid
    except TimeoutError:
        raise TimeoutError(f"no IMEX ran on {node} within {WAIT_FOR_IMEX_S:g} s") from None


def _imex_under(where: str) -> int | None:
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            argv = [a.decode(errors="replace") for a in Path(entry.path, "cmdline").read_bytes().split(b"\0")]
        except OSError:
            continue
        names = [Path(a).name for a in argv[:4]]
        # nvidia-imex itself, or the fake as it execs: python -S -I fakeimex.py imex -c CFG
        is_imex = "nvidia-imex" in names or ("fakeimex.py" in names and "imex" in argv)
        if is_imex and any(a.startswith(where) for a in argv):
            return int(entry.name)
    return None
