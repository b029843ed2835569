"""Running several pieces of asyncio work as one: `run_until_first_ends`.

Used by the controller (cdctl.controller.manager: following the cluster beside leading, holding the Lease
beside reconciling) and the IMEX daemon (cdctl.daemon.app: the peer watch, the readiness monitor, the
supervisor's failure and the stop signal).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable


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
