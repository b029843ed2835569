"""A component's HTTP endpoint (`--http-endpoint`): its Prometheus metrics, liveness and event log routes.

`ComponentHttpEndpoint` serves the component's registry at the metrics path (`--metrics-path`, `/metrics` by
default), `/healthz` while the process runs, and with a log server the read-only event log routes of
cdctl.store.logserver (`cdctl collect`); a subclass adds its own routes in `add_routes`. Port 0 binds a free
port, which `port` then holds. `parse_endpoint` accepts the Go forms ":8080", "host:port" and "[::1]:8080".
Used by the controller (cdctl.controller.http, which adds `/readyz` and the task dump) and the kubelet plugin
(cdctl.plugin.metrics).
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from cdctl.store.logserver import LogServer


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    host, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"invalid --http-endpoint {endpoint!r}: want [host]:port")
    return host.strip("[]") or "0.0.0.0", int(port)


class ComponentHttpEndpoint:
    def __init__(
        self,
        endpoint: str,
        metrics_path: str,
        registry: CollectorRegistry,
        log_server: LogServer | None = None,
    ) -> None:
        self.host, self.port = parse_endpoint(endpoint)
        self.metrics_path = metrics_path or "/metrics"
        self.registry = registry
        self.log_server = log_server
        self._runner: web.AppRunner | None = None

    def add_routes(self, app: web.Application) -> None:
        """The routes a component serves beside its metrics and `/healthz` (none here)."""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get(self.metrics_path, self._metrics)
        app.router.add_get("/healthz", self._healthz)
        self.add_routes(app)
        if self.log_server is not None:
            self.log_server.add_routes(app)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or ()
        if self.port == 0 and sockets:
            self.port = sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics(self, _: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")
