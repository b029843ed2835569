"""The controller's HTTP endpoint (`--http-endpoint`): Prometheus metrics, liveness and readiness.

What every component serves (cdctl.httpendpoint): `/metrics` (or `--metrics-path`) with the controller's
registry, `/healthz` while the process runs, and with a log server the read-only event log routes of
cdctl.store.logserver (`cdctl collect`). The controller adds `/readyz`, ready once the caches are populated
(or while a standby waits for the lease), and with `--pprof-path` `<path>/tasks`, which dumps every asyncio
task's stack. Built and started by cdctl.controller.app; cdctl.controller.manager holds it.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry

from cdctl.httpendpoint import ComponentHttpEndpoint
from cdctl.store.logserver import LogServer


class HttpEndpoint(ComponentHttpEndpoint):
    def __init__(
        self,
        endpoint: str,
        metrics_path: str,
        registry: CollectorRegistry,
        ready: Callable[[], bool],
        pprof_path: str = "",
        log_server: LogServer | None = None,
    ) -> None:
        super().__init__(endpoint, metrics_path, registry, log_server)
        self.pprof_path = pprof_path.rstrip("/")
        self.ready = ready

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/readyz", self._readyz)
        if self.pprof_path:
            app.router.add_get(f"{self.pprof_path}/tasks", self._tasks)

    async def _tasks(self, _: web.Request) -> web.Response:
        """Every running asyncio task with its stack: the Python counterpart of a goroutine dump."""
        out = io.StringIO()
        for task in asyncio.all_tasks():
            out.write(f"--- {task.get_name()}: {task.get_coro()!r}\n")
            task.print_stack(file=out)
        return web.Response(text=out.getvalue())

    async def _readyz(self, _: web.Request) -> web.Response:
        if self.ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="caches not populated")
