"""A plugin's health and registration servers in a process of their own, for the test of a stream cut by the
plugin's death: `python -m tests.plugin.healthchild REGISTRY_DIR PLUGIN_DIR` serves until killed and prints
`serving` once both sockets answer."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from grpclib.server import Server

from cdctl.plugin.health import DeviceReport, Health, HealthBoard
from cdctl.plugin.healthservice import HealthV1alpha1
from cdctl.plugin.server import Registration, ServerPaths


async def serve(paths: ServerPaths) -> None:
    board = HealthBoard(resend_s=30.0)
    await board.publish([DeviceReport("node-a", "channel-0", Health.HEALTHY, "ok")])
    paths.plugin_dir.mkdir(parents=True, exist_ok=True)
    paths.registrar_dir.mkdir(parents=True, exist_ok=True)
    dra = Server([HealthV1alpha1(board)])
    registration = Server([Registration(str(paths.dra), lambda: None)])
    await dra.start(path=str(paths.dra))
    await registration.start(path=str(paths.registration))
    print("serving", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(serve(ServerPaths(Path(sys.argv[1]), Path(sys.argv[2]))))
