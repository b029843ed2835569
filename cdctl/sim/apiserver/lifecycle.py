"""`StartStop`: the `async with` form of a simulated part that has `start()` and `stop()`.

Entering starts it and returns it; leaving stops it. Used by the simulated API server
(cdctl.sim.apiserver.server.ApiServer) and the simulated cluster (cdctl.sim.rack.cluster.SimCluster).
"""

from __future__ import annotations

from types import TracebackType
from typing import Self


class StartStop:
    """Started on entering `async with`, stopped on leaving it; a subclass defines `start` and `stop`."""

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
