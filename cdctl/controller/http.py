"""The controller's HTTP endpoint (`--http-endpoint`): Prometheus metrics, liveness and readiness.

`/metrics` (or `--metrics-path`) serves the controller's registry, `/healthz` answers while the process runs,
`/readyz` once the caches are populated (or while a standby waits for the lease), and with `--pprof-path`
`<path>/tasks` dumps every asyncio task's stack; with a log server, the read-only event log routes of
cdctl.store.logserver (`cdctl collect`). Started by
cdctl.controller.manager; `parse_endpoint` accepts the Go forms ":8080", "host:port" and "[::1]:8080".
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from cdctl.store.logserver import LogServer


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    host, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"invalid --http-endpoint {endpoint!r}: want [host]:port")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


class HttpEndpoint:
    def __init__(
        self,
        endpoint: str,
        metrics_path: str,
        registry: CollectorRegistry,
        ready: Callable[[], bool],
        pprof_path: str = "",
        log_server: LogServer | None = None,
    ) -> None:
        self.host, self.port = parse_endpoint(endpoint)
        self.metrics_path = metrics_path or "/metrics"
        self.pprof_path = pprof_path.rstrip("/")
        self.registry = registry
        self.ready = ready
        self.log_server = log_server
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get(self.metrics_path, self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        if self.pprof_path:
            app.router.add_get(f"{self.pprof_path}/tasks", self._tasks)
        if self.log_server is not None:
            self.log_server.add_routes(app)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        if self.port == 0 and site._server is not None:
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics(self, _: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _tasks(self, _: web.Request) -> web.Response:
        """Every running asyncio task with its stack: the Python counterpart of a goroutine dump."""
        out = io.StringIO()
        for task in asyncio.all_tasks():
            out.write(f"--- {task.get_name()}: {task.get_coro()!r}\n")
            task.print_stack(file=out)
        return web.Response(text=out.getvalue())

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, _: web.Request) -> web.Response:
        if self.ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="caches not populated")
