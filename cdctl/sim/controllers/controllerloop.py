"""The loop every in-process stand-in controller runs: reconcile everything, then again after each change.

Stand-ins (claim templates, allocator, daemonsets) are level-based and small, so a full pass per batch of
store events is cheap and leaves no edge case to miss. A stand-in that acts on time passing as well (the node
lifecycle controller's grace period, pod garbage collection's quarantine) gives `resync_s`: a pass runs that
often even when nothing changed. `ControllerLoop` owns the task; `reconcile` may be called directly by tests
for a deterministic single pass. Called by the rack launcher and the tests.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from cdctl.sim.apiserver.store import ObjectStore

log = logging.getLogger(__name__)


class ControllerLoop:
    """Runs `reconcile()` once at start, again whenever objects of the watched kinds change, and every
    `resync_s` when given."""

    def __init__(
        self,
        name: str,
        store: ObjectStore,
        kinds: Iterable[tuple[str, str]],
        reconcile: Callable[[], None],
        *,
        resync_s: float | None = None,
    ) -> None:
        self.name = name
        self.resync_s = resync_s
        self.store = store
        self.kinds = frozenset(kinds)
        self.reconcile = reconcile
        self.passes = 0
        self.failures = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"sim-{self.name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    def _pass(self) -> None:
        self.passes += 1
        try:
            self.reconcile()
        except Exception:
            # A stand-in bug must not stop the simulated cluster; the next change triggers another pass.
            self.failures += 1
            log.exception("simulated %s: reconcile failed", self.name)

    async def _run(self) -> None:
        watcher = self.store.watch(None, droppable=False)
        try:
            self._pass()
            while True:
                try:
                    async with asyncio.timeout(self.resync_s):
                        event = await watcher.next()
                except TimeoutError:
                    self._pass()
                    continue
                relevant = event is not None and event.storage_key in self.kinds
                while not watcher.queue.empty():
                    queued = watcher.queue.get_nowait()
                    relevant = relevant or (queued is not None and queued.storage_key in self.kinds)
                if relevant:
                    self._pass()
        finally:
            self.store.hub.release(watcher)
