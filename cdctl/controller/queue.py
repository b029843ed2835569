"""A keyed work queue: one reconcile at a time per key, different keys in parallel, backoff with jitter.

`add(key)` while the key waits is a no-op (changes coalesce into one run); while the key runs, it marks the
key to run once more afterwards, so a burst of changes costs at most two runs. A `RetriableError`
(cdctl.domain.errors) re-adds the key after its own delay or the per-key exponential backoff (5 ms doubling
to `max_delay_s`, +-25 % jitter). A `PermanentError` (repeating the same request in the same world will
not help) parks the key: it runs again on its next change, or after `recheck_s` all the same, since what
refused it may be outside what the controller watches (an admission policy or RBAC fixed by an operator); a
parked key does not keep `wait_idle` waiting. Any other exception counts as retriable.
Used by cdctl.controller.manager with the ComputeDomain uid as key.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog

from cdctl.domain.errors import PermanentError, RetriableError

log = structlog.get_logger(__name__)

Handler = Callable[[str], Awaitable[None]]


@dataclass(frozen=True)
class Outcome:
    key: str
    result: str  # "success" | "retry" | "permanent"
    duration_s: float
    error: BaseException | None = None


class KeyedQueue:
    def __init__(
        self,
        handler: Handler,
        *,
        workers: int = 16,
        min_delay_s: float = 0.005,
        max_delay_s: float = 30.0,
        recheck_s: float = 60.0,
        on_outcome: Callable[[Outcome], None] | None = None,
        describe: Callable[[str], dict[str, Any]] | None = None,
    ) -> None:
        self._handler = handler
        self._workers = workers
        self._min_delay_s = min_delay_s
        self._max_delay_s = max_delay_s
        self._recheck_s = recheck_s
        self._on_outcome = on_outcome
        self._describe = describe or (lambda key: {"key": key})
        self._ready: asyncio.Queue[str] = asyncio.Queue()
        self._waiting: set[str] = set()
        self._running: set[str] = set()
        self._dirty: set[str] = set()
        self._failures: dict[str, int] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}  # key -> pending delayed add
        self._parked: dict[str, asyncio.TimerHandle] = {}  # key -> its re-check after a permanent failure
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def depth(self) -> int:
        """Keys waiting to run (not counting those running or scheduled for a retry)."""
        return len(self._waiting)

    def failures(self, key: str) -> int:
        return self._failures.get(key, 0)

    def parked(self) -> list[str]:
        """Keys that failed permanently, waiting for a change or their re-check."""
        return sorted(self._parked)

    def add(self, key: str) -> None:
        for timers in (self._timers, self._parked):
            timer = timers.pop(key, None)
            if timer is not None:
                timer.cancel()
        if key in self._running:
            self._dirty.add(key)
            return
        if key in self._waiting:
            return
        self._waiting.add(key)
        self._idle.clear()
        self._ready.put_nowait(key)

    def add_after(self, key: str, delay_s: float) -> None:
        """Add `key` in `delay_s`, unless it waits already or a pending delayed add fires sooner."""
        if key in self._waiting:
            return
        loop = asyncio.get_running_loop()
        pending = self._timers.get(key)
        if pending is not None:
            if pending.when() <= loop.time() + delay_s:
                return
            pending.cancel()
        self._idle.clear()
        self._timers[key] = loop.call_later(delay_s, self._fire, key)

    def _fire(self, key: str) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def _recheck(self, key: str) -> None:
        self._parked.pop(key, None)
        self.add(key)

    def backoff_s(self, key: str) -> float:
        failures = self._failures.get(key, 1)
        base = min(self._max_delay_s, self._min_delay_s * float(2 ** min(failures - 1, 30)))
        return base * random.uniform(0.75, 1.25)

    async def run(self) -> None:
        """Run the workers until cancelled."""
        async with asyncio.TaskGroup() as group:
            for _ in range(self._workers):
                group.create_task(self._work())

    async def wait_idle(self) -> None:
        """Wait until nothing waits, runs or is scheduled (tests and benchmarks)."""
        while True:
            await self._idle.wait()
            if not (self._waiting or self._running or self._timers):
                return
            self._idle.clear()

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            key = await self._ready.get()
            self._waiting.discard(key)
            self._running.add(key)
            started = loop.time()
            outcome: Outcome
            try:
                await self._handler(key)
            except PermanentError as exc:
                self._failures.pop(key, None)
                outcome = Outcome(key, "permanent", loop.time() - started, exc)
                log.error("reconcile failed permanently", **self._describe(key), error=str(exc),
                          recheck_in_s=self._recheck_s)  # fmt: skip
                self._parked[key] = loop.call_later(self._recheck_s, self._recheck, key)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._failures[key] = self._failures.get(key, 0) + 1
                delay = (
                    exc.delay if isinstance(exc, RetriableError) and exc.delay > 0 else self.backoff_s(key)
                )
                outcome = Outcome(key, "retry", loop.time() - started, exc)
                log.info(
                    "reconcile will be retried",
                    **self._describe(key),
                    error=str(exc) or repr(exc),
                    attempt=self._failures[key],
                    retry_in_s=round(delay, 3),
                )
                self._running.discard(key)
                if key in self._dirty:
                    self._dirty.discard(key)
                    self.add(key)
                else:
                    self.add_after(key, delay)
                self._report(outcome)
                continue
            else:
                self._failures.pop(key, None)
                outcome = Outcome(key, "success", loop.time() - started)
            self._running.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self.add(key)
            self._report(outcome)

    def _report(self, outcome: Outcome) -> None:
        if self._on_outcome is not None:
            self._on_outcome(outcome)
        if not (self._waiting or self._running or self._timers):
            self._idle.set()
