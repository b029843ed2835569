"""The DRAResourceHealth gRPC service (v1alpha1 and v1) on the DRA socket, and a well-formed UNIMPLEMENTED
for every method the plugin does not serve.

Registered by cdctl.plugin.server next to the DRA services. `NodeWatchResources` streams the plugin's
`HealthBoard` (cdctl.plugin.health): the full device list on open, on every change and periodically, each
device with its pool, name, health, message, last check time and how long the kubelet may trust it.

grpclib answers a method missing from its table with a trailers-only reply that has no `content-type`; a
Go gRPC client (the kubelet) reads that as code Unknown ("malformed header: missing HTTP content-type")
instead of UNIMPLEMENTED. `with_unimplemented_fallback` gives a server's table a handler for every other path
that fails through grpclib's normal stream, whose trailers-only reply carries `content-type:
application/grpc` and `grpc-status: 12`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpclib.const
import structlog
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.server import Server, Stream

from cdctl._proto import v1 as health_v1
from cdctl._proto import v1alpha1 as health_v1alpha1
from cdctl.plugin.health import HealthBoard, Snapshot

log = structlog.get_logger("cdctl.plugin.healthservice")

HEALTH_SERVICES = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")


def _response(mod: Any, snapshot: Snapshot) -> Any:
    return mod.NodeWatchResourcesResponse(
        devices=[
            mod.DeviceHealth(
                device=mod.DeviceIdentifier(pool_name=r.pool, device_name=r.device),
                health=mod.HealthStatus(int(r.health)),
                last_updated_time=snapshot.checked_at,
                health_check_timeout_seconds=snapshot.timeout_s,
                message=r.message,
            )
            for r in snapshot.reports
        ]
    )


async def _stream(board: HealthBoard, mod: Any, version: str) -> AsyncIterator[Any]:
    log.info("kubelet opened the resource-health stream", version=version)
    try:
        async for snapshot in board.watch():
            yield _response(mod, snapshot)
    finally:
        log.info("resource-health stream closed", version=version)


class HealthV1alpha1(health_v1alpha1.DraResourceHealthBase):
    def __init__(self, board: HealthBoard) -> None:
        self.board = board

    async def node_watch_resources(
        self, message: health_v1alpha1.NodeWatchResourcesRequest
    ) -> AsyncIterator[health_v1alpha1.NodeWatchResourcesResponse]:
        async for response in _stream(self.board, health_v1alpha1, "v1alpha1"):
            yield response


class HealthV1(health_v1.DraResourceHealthBase):
    def __init__(self, board: HealthBoard) -> None:
        self.board = board

    async def node_watch_resources(
        self, message: health_v1.NodeWatchResourcesRequest
    ) -> AsyncIterator[health_v1.NodeWatchResourcesResponse]:
        async for response in _stream(self.board, health_v1, "v1"):
            yield response


def _unimplemented(method: str) -> grpclib.const.Handler:
    """A handler for `method` that fails with UNIMPLEMENTED before reading anything."""

    async def fail(stream: Stream[Any, Any]) -> None:
        log.debug("call of a method this plugin does not serve", method=method)
        raise GRPCError(Status.UNIMPLEMENTED, f"unknown method {method}")

    return grpclib.const.Handler(
        fail,
        grpclib.const.Cardinality.UNARY_UNARY,
        health_v1alpha1.NodeWatchResourcesRequest,  # never decoded: the handler reads no message
        health_v1alpha1.NodeWatchResourcesResponse,
    )


class _WithFallback(dict[str, grpclib.const.Handler]):
    """A grpclib method table that answers every path it lacks with `_unimplemented`."""

    def get(self, key: str, default: Any = None) -> grpclib.const.Handler:
        return super().get(key) or _unimplemented(key)


def with_unimplemented_fallback(server: Server) -> Server:
    """`server`, its method table replaced by one that gives unknown paths a well-formed UNIMPLEMENTED.

    grpclib (0.4.x) keeps the table in `Server._mapping` and looks a path up with `.get`;
    tests/plugin/test_server.py calls a made-up method with a raw client and with grpcio to catch a change.
    """
    server._mapping = _WithFallback(server._mapping)
    return server
