"""A process and everything it started, as a node's power loss or `kill -9` of a container takes them.

`kill_tree(pid)` sends SIGKILL to `pid` and to its descendants (found through /proc before any is killed,
since an orphan is re-parented and could no longer be traced to it), deepest first. A container that dies
this way takes the processes it started with it (the IMEX daemon's `nvidia-imex`), as when the container's
cgroup is killed. Used by the simulated container runtime (cdctl.sim.node.processruntime) and the rack's
components (cdctl.sim.rack.components).
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

PROC = Path("/proc")


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process this machine shows."""
    parents: dict[int, int] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name (field 2) is in parentheses and may itself hold spaces or parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1:
            parents[int(entry.name)] = int(fields[1])
    return parents


def descendants(pid: int) -> list[int]:
    """The processes `pid` started, theirs, and so on: breadth first."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    found: list[int] = []
    frontier = [pid]
    while frontier:
        nxt = [c for p in frontier for c in sorted(children.get(p, []))]
        found += nxt
        frontier = nxt
    return found


def kill_tree(pid: int) -> int:
    """SIGKILL `pid` and its descendants (deepest first); how many processes were signalled."""
    signalled = 0
    for target in [*reversed(descendants(pid)), pid]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(target, signal.SIGKILL)
            signalled += 1
    return signalled
