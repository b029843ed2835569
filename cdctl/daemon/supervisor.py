"""Supervision of one `nvidia-imex -c <imexd>/imexd.cfg` child: start, restart with backoff, reload, stop.

Used by cdctl.daemon.peers (first start, SIGUSR1 on peer changes in DNS-names mode, full restart in IP mode)
and cdctl.daemon.app (stop on shutdown). SIGUSR1 is held back while the child may still be starting up (a
child that has not set up its handling would die of it). A watcher task waits on the child: an exit
nobody asked for is recorded (exit code or signal) and followed by a restart after an exponential backoff
that starts at `backoff_s`, doubles up to `backoff_max_s`, and resets once a child has run for `stable_s`.
A restart that cannot start the child sets `failed` (with `error`) for the caller to end on. The child
inherits the daemon's stdout and stderr, as in the Go driver. `stop()` sends SIGTERM and waits. `on_spawn`,
when set, is called just before each child is started, whoever starts it (cdctl.daemon.peers notes which slot
the new IMEX will take its node id from). With a `gate` (cdctl.daemon.gate) the handover gate closes at every
start and exit of a child, and a `restart` drains it before it stops the child, so that no claim handed a
channel a moment ago finds its IMEX gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import structlog

from cdctl.daemon.gate import DaemonGate
from cdctl.domain.errors import CdctlError, PermanentError
from cdctl.domain.events import DomainEvent
from cdctl.domain.imex import ImexExited, ImexStarted, exit_description

log = structlog.get_logger(__name__)
SIGNAL_POLL_S = 0.05
Recorder = Callable[[DomainEvent], Awaitable[None]]


def handles_signal(pid: int, signum: int) -> bool:
    """Whether `pid` blocks, ignores or catches `signum` (Linux /proc); True where that cannot be told."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    masks = 0
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("SigBlk", "SigIgn", "SigCgt"):
            masks |= int(value.strip(), 16)
    return bool(masks & (1 << (signum - 1)))


class ImexSupervisor:
    def __init__(
        self,
        argv: list[str],
        node: str,
        record: Recorder,
        *,
        backoff_s: float = 1.0,
        backoff_max_s: float = 30.0,
        stable_s: float = 60.0,
        signal_grace_s: float = 2.0,
        gate: DaemonGate | None = None,
    ) -> None:
        self.gate = gate
        self.argv = argv
        self.node = node
        self.record = record
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.stable_s = stable_s
        self.signal_grace_s = signal_grace_s
        self._reload: asyncio.Task[None] | None = None
        self.failed = asyncio.Event()
        self.first_started = asyncio.Event()  # set once a child has been started
        self.error: CdctlError | None = None
        self.process: asyncio.subprocess.Process | None = None
        self.starts = 0
        self.crashes = 0
        self._started_at = 0.0
        self._delay = backoff_s
        self._watcher: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._stopping = False
        self.on_spawn: Callable[[], None] | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def ensure_started(self, reason: str) -> bool:
        """Start the child unless it runs (or a restart is pending); True when this call started it."""
        async with self._lock:
            if self.running or self._restart_pending():
                return False
            await self._spawn(reason)
            return True

    async def restart(self, reason: str) -> None:
        """Stop the child (SIGTERM, wait) and start a new one; errors here are fatal to the daemon. With a
        gate, the gate is drained first (the child keeps running until it is)."""
        async with self._lock:
            if self.gate is not None and self.running:
                await self.gate.drain(reason)
            await self._terminate(reason)
            await self._cancel_watcher()
            await self._spawn(reason)

    def reload(self) -> bool:
        """SIGUSR1: re-read the node list and re-resolve names. False when no child runs to receive it.

        With a gate, the signal waits until the holds written before it are drained, and the gate stays
        closed until IMEX answers READY after it: IMEX is not ready until the new peers are connected.

        A child that has not yet set up its SIGUSR1 handling would be killed by the signal: delivery waits
        until /proc shows the signal caught or blocked, or the child has run for `signal_grace_s` (a child
        waiting in sigwait shows neither). One delivery is pending at a time, to the child running then.
        """
        if not self.running:
            return False
        if self._reload is None or self._reload.done():
            self._reload = asyncio.create_task(self._deliver_reload(), name="imex-reload")
        return True

    async def _deliver_reload(self) -> None:
        while True:
            process = self.process
            if process is None or process.returncode is not None:
                return
            settled = time.monotonic() - self._started_at >= self.signal_grace_s
            if settled or handles_signal(process.pid, signal.SIGUSR1):
                break
            await asyncio.sleep(SIGNAL_POLL_S)
        if self.gate is not None:  # IMEX is not ready again until the new peers are: hand nothing out
            await self.gate.drain("peers changed (DNS names)")
        if process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGUSR1)
            log.info("sent SIGUSR1 to IMEX", pid=process.pid)
        if self.gate is not None:
            self.gate.imex_changed()

    async def stop(self, reason: str = "daemon stopping") -> None:
        async with self._lock:
            self._stopping = True
            if self._reload is not None:
                self._reload.cancel()
                await asyncio.wait([self._reload])
            await self._cancel_watcher()
            await self._terminate(reason)
            self._imex_changed()

    def _restart_pending(self) -> bool:
        return self._watcher is not None and not self._watcher.done() and not self.running

    async def _cancel_watcher(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is None or watcher is asyncio.current_task():
            return
        watcher.cancel()
        await asyncio.wait([watcher])

    def _imex_changed(self) -> None:
        if self.gate is not None:
            self.gate.imex_changed()

    async def _spawn(self, reason: str) -> None:
        self._imex_changed()
        if self.on_spawn is not None:
            self.on_spawn()
        try:
            process = await asyncio.create_subprocess_exec(*self.argv)
        except OSError as exc:
            raise PermanentError(f"cannot start {self.argv[0]}: {exc.strerror or exc}") from exc
        self.process = process
        self.starts += 1
        self._started_at = time.monotonic()
        self.first_started.set()
        log.info("IMEX daemon started", pid=process.pid, reason=reason)
        await self.record(ImexStarted(self.node, process.pid, reason, self.starts))
        self._watcher = asyncio.create_task(self._watch(process), name="imex-watchdog")

    async def _terminate(self, reason: str) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        if self.gate is not None:
            self.gate.stopping()  # not _imex_changed: the stopping IMEX answers READY until it exits
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        returncode = await process.wait()
        code, signame = exit_description(returncode)
        log.info("IMEX daemon stopped", pid=process.pid, exit_code=code, signal=signame, reason=reason)
        await self.record(ImexExited(self.node, process.pid, code, signame, True, reason))

    async def _watch(self, process: asyncio.subprocess.Process) -> None:
        returncode = await process.wait()
        if self.process is process:
            self._imex_changed()  # at once: nobody may be handed a channel on an IMEX that is gone
        async with self._lock:
            if self._stopping or self.process is not process:
                return
            ran_for = time.monotonic() - self._started_at
            if ran_for >= self.stable_s:
                self._delay = self.backoff_s
            delay = self._delay
            self._delay = min(self._delay * 2, self.backoff_max_s)
            self.crashes += 1
            code, signame = exit_description(returncode)
            log.warning(
                "IMEX daemon terminated unexpectedly; restarting",
                pid=process.pid,
                exit_code=code,
                signal=signame,
                restart_in_s=delay,
            )
            await self.record(
                ImexExited(self.node, process.pid, code, signame, False, "unexpected exit", delay)
            )
        await asyncio.sleep(delay)
        async with self._lock:
            if self._stopping or self.process is not process:
                return
            self._watcher = None
            try:
                await self._spawn(f"restart after unexpected exit #{self.crashes}")
            except CdctlError as exc:  # cannot restart: the daemon must end (see `failed`)
                self.error = exc
                self.failed.set()
