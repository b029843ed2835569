"""Running asyncio work safely: `run_until_first_ends` (several pieces as one) and `wait_at_most`.

`run_until_first_ends` is used by the controller (cdctl.controller.manager: following the cluster beside
leading, holding the Lease beside reconciling) and the IMEX daemon (cdctl.daemon.app: the peer watch, the
readiness monitor, the supervisor's failure and the stop signal). `wait_at_most` replaces
`asyncio.wait_for` everywhere (the controller, the daemon, the simulator's parts).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def run_until_first_ends(*work: Awaitable[object]) -> None:
    """Run the work together (coroutines, or tasks already named); whichever ends first ends all, and its
    error is raised. The others are cancelled and waited for before this returns or raises."""
    tasks = [asyncio.ensure_future(piece) for piece in work]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in done:
        if not task.cancelled():
            task.result()


async def wait_at_most(awaitable: Awaitable[T], timeout_s: float) -> T:
    """`asyncio.wait_for` without its Python 3.11 flaw; raises TimeoutError after `timeout_s`.

    On 3.11, a cancellation that arrives in the loop turn in which the awaited work finishes is swallowed:
    wait_for returns the result instead of raising CancelledError. A loop around it then never stops (a
    cancelled leader went on renewing its Lease, so its standby never took over). `asyncio.timeout` counts
    cancellations and always lets the caller's through."""
    async with asyncio.timeout(timeout_s):
        return await awaitable
