"""The handover gate between a node's IMEX daemon and its kubelet plugin: "IMEX is ready now", on the node.

A pod's Ready condition and a clique entry's status say that IMEX *was* ready: the kubelet's probe needs
several failures to turn a pod not Ready, and a replaced daemon stays Ready in its clique until the
controller writes. A channel handed out in that window starts a workload that finds no IMEX. So the daemon
and the plugin, which share the daemon's directory on the node (`/imexd` in the daemon's pod), keep a gate
in it that changes the moment IMEX does (docs/channel-isolation.md, "Readiness"):

* **Open**: the file GATE_FILE exists and a live process holds an exclusive flock on it. The daemon opens
  the gate once its own `nvidia-imex-ctl -q` answers READY for the IMEX now running, and keeps the lock for
  as long as the gate is open. The kernel drops the lock when the daemon dies, however it dies, so a gate
  left behind by a killed daemon reads as closed.
* **Closed** otherwise. The daemon closes the gate before it stops IMEX on purpose (a peer change, its slot
  moved, shutdown), as soon as it sees IMEX exit on its own, and when it starts.
* **Holds**: before it checks the gate, the plugin writes a hold, HOLDS_DIR/<claim uid>, holding its expiry
  time. A daemon that must restart IMEX closes the gate first and then waits until no hold is live. So
  either the plugin sees the gate closed (and the claim waits), or the daemon sees the hold (and IMEX
  restarts only after it expires or the claim is unprepared): a planned restart never falls between a
  plugin's check and the workload's start, if the workload starts within the hold. Holds last HOLD_S by
  default, long enough for a kubelet to start a container whose image is on the node.

An unplanned IMEX exit (a crash) cannot wait for anyone: the gate closes when it is seen. Called by the
daemon (cdctl.daemon.gate), its probe (cdctl.daemon.check) and the plugin (cdctl.plugin.prepare). Standard
library only: the probe imports it on every run.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import time
from pathlib import Path

GATE_FILE = "imex-ready"
HOLDS_DIR = "imex-holds"
HOLD_S = 30.0
CLOSED_NO_FILE = "the IMEX daemon has not reported IMEX ready"
CLOSED_NO_HOLDER = "the IMEX daemon that reported IMEX ready is gone"


def gate_state(directory: Path) -> str | None:
    """None when the gate in `directory` is open; else why it is closed (one line)."""
    try:
        fd = os.open(directory / GATE_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return CLOSED_NO_FILE
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None  # the daemon holds it: open
        raise
    finally:
        os.close(fd)  # closing drops a shared lock this call may have taken
    return CLOSED_NO_HOLDER


class GateKeeper:
    """The daemon's side: open and close the gate in `directory`. One per daemon process."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._fd: int | None = None

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    def open(self) -> None:
        """Create the gate file and hold its lock (a no-op when open). The lock is taken on a new file
        that then replaces any old one, so no reader ever sees a gate file nobody holds while this runs."""
        if self._fd is not None:
            return
        path = self.directory / GATE_FILE
        staging = path.with_name(f".{GATE_FILE}.{os.getpid()}")
        fd = os.open(staging, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, f"{os.getpid()} {time.time():.3f}\n".encode())
            staging.replace(path)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                staging.unlink()
            raise
        self._fd = fd

    def close(self) -> None:
        """Remove the gate file, then drop the lock; also clears one a dead daemon left behind."""
        with contextlib.suppress(FileNotFoundError):
            (self.directory / GATE_FILE).unlink()
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _expiries(directory: Path) -> list[tuple[str, float]]:
    """(path, expiry) of every hold in `directory` (an unreadable one expires HOLD_S after it was written: a
    torn write must not start a restart early)."""
    found: list[tuple[str, float]] = []
    try:
        entries = list(os.scandir(directory / HOLDS_DIR))
    except FileNotFoundError:
        return found
    for entry in entries:
        if entry.name.startswith("."):
            continue
        try:
            until = float(Path(entry.path).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            try:
                until = entry.stat().st_mtime + HOLD_S
            except FileNotFoundError:
                continue
        found.append((entry.path, until))
    return found


def live_holds(directory: Path, now: float | None = None) -> dict[str, float]:
    """Claim uid -> expiry of every hold in `directory` that has not expired."""
    now = time.time() if now is None else now
    return {Path(path).name: until for path, until in _expiries(directory) if until > now}


def hold(directory: Path, claim_uid: str, hold_s: float = HOLD_S, now: float | None = None) -> float:
    """The plugin's side: write (or extend) the claim's hold; its expiry. Expired holds are pruned."""
    now = time.time() if now is None else now
    holds = directory / HOLDS_DIR
    holds.mkdir(mode=0o755, exist_ok=True)
    until = now + hold_s
    staging = holds / f".{claim_uid}"
    staging.write_text(f"{until:.3f}\n")
    staging.replace(holds / claim_uid)
    for path, expiry in _expiries(directory):
        if expiry <= now:
            with contextlib.suppress(FileNotFoundError):
                Path(path).unlink()
    return until


def release(directory: Path, claim_uid: str) -> None:
    """The claim no longer needs IMEX kept as it is (unprepared, or its prepare did not complete)."""
    with contextlib.suppress(FileNotFoundError):
        (directory / HOLDS_DIR / claim_uid).unlink()


async def until_open(directory: Path, poll_s: float = 0.05) -> None:
    """Return once the gate in `directory` is open (the waiting Prepare's wake-up; the caller bounds it)."""
    while gate_state(directory) is not None:  # noqa: ASYNC110 - the gate is a file another process keeps
        await asyncio.sleep(poll_s)
