"""The kubelet-facing gRPC servers: plugin registration and DRA (v1 and v1beta1, one handler, plus the
DRAResourceHealth stream of cdctl.plugin.healthservice) on unix sockets, and gRPC health on a TCP port.

Called by the plugin process (cdctl.plugin.app) and by the tests. The DRA server starts first, then the
registration socket, so the endpoint answers before the kubelet learns of it; closing goes the other way and
removes the socket files (which is how the kubelet notices deregistration). Sockets are created owner-only
(0600) and a stale socket file from an earlier run is replaced. Health (`""` and `liveness`) reports SERVING
only when GetInfo on the registration socket and an empty NodePrepareResources on the DRA socket both answer.
A method neither unix socket serves gets a well-formed UNIMPLEMENTED (see cdctl.plugin.healthservice).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.server import Server

from cdctl._proto.k8s.io.kubelet.pkg.apis.dra import v1, v1beta1
from cdctl._proto.pluginregistration import (
    InfoRequest,
    PluginInfo,
    RegistrationBase,
    RegistrationStatus,
    RegistrationStatusResponse,
    RegistrationStub,
)
from cdctl.domain.errors import CdctlError, PermanentError, RetriableError, clip
from cdctl.plugin.connections import close_connections, tracking
from cdctl.plugin.devices import DRIVER_NAME, ClaimRef
from cdctl.plugin.driver import ERROR_LIMIT, Driver
from cdctl.plugin.health import HealthBoard
from cdctl.plugin.healthservice import (
    HEALTH_SERVICES,
    HealthV1,
    HealthV1alpha1,
    with_unimplemented_fallback,
)
from cdctl.plugin.wire import RequestCodec

log = structlog.get_logger("cdctl.plugin.server")

PLUGIN_TYPE = "DRAPlugin"
# The DRA services first: 1.34-1.36 kubelets take the first entry they speak. Later kubelets pick the
# health service from this list (v1 over v1alpha1); 1.34-1.36 open v1alpha1 whether it is listed or not.
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin", *HEALTH_SERVICES)
HEALTH_SERVICES = ("", "liveness")
STREAM_END_TIMEOUT_S = 2.0  # how long a stopping plugin waits for its requests in flight to finish


def registration_socket(registrar_dir: Path, driver: str = DRIVER_NAME) -> Path:
    return registrar_dir / f"{driver}-reg.sock"


def dra_socket(plugin_dir: Path) -> Path:
    return plugin_dir / "dra.sock"


def _status_for(exc: CdctlError) -> Status:
    return Status.UNAVAILABLE if isinstance(exc, RetriableError) else Status.FAILED_PRECONDITION


class _DraHandler:
    """Both API versions share the wire shape; each version's service wraps this with its own messages."""

    def __init__(self, driver: Driver, mod: Any) -> None:
        self.driver = driver
        self.mod = mod

    async def prepare(self, message: Any) -> Any:
        refs = [ClaimRef(c.uid, c.namespace, c.name) for c in message.claims]
        try:
            outcomes = await self.driver.prepare_resources(refs)
        except CdctlError as exc:
            raise GRPCError(_status_for(exc), clip(str(exc), ERROR_LIMIT)) from exc
        m = self.mod
        return m.NodePrepareResourcesResponse(
            claims={
                uid: m.NodePrepareResourceResponse(
                    devices=[m.Device(**d) for d in out.devices] if not out.error else [], error=out.error
                )
                for uid, out in outcomes.items()
            }
        )

    async def unprepare(self, message: Any) -> Any:
        refs = [ClaimRef(c.uid, c.namespace, c.name) for c in message.claims]
        try:
            errors = await self.driver.unprepare_resources(refs)
        except CdctlError as exc:
            raise GRPCError(_status_for(exc), clip(str(exc), ERROR_LIMIT)) from exc
        m = self.mod
        return m.NodeUnprepareResourcesResponse(
            claims={uid: m.NodeUnprepareResourceResponse(error=err) for uid, err in errors.items()}
        )


class DraV1(v1.DraPluginBase):
    def __init__(self, driver: Driver) -> None:
        self._h = _DraHandler(driver, v1)

    async def node_prepare_resources(
        self, message: v1.NodePrepareResourcesRequest
    ) -> v1.NodePrepareResourcesResponse:
        return await self._h.prepare(message)  # type: ignore[no-any-return]

    async def node_unprepare_resources(
        self, message: v1.NodeUnprepareResourcesRequest
    ) -> v1.NodeUnprepareResourcesResponse:
        return await self._h.unprepare(message)  # type: ignore[no-any-return]


class DraV1beta1(v1beta1.DraPluginBase):
    def __init__(self, driver: Driver) -> None:
        self._h = _DraHandler(driver, v1beta1)

    async def node_prepare_resources(
        self, message: v1beta1.NodePrepareResourcesRequest
    ) -> v1beta1.NodePrepareResourcesResponse:
        return await self._h.prepare(message)  # type: ignore[no-any-return]

    async def node_unprepare_resources(
        self, message: v1beta1.NodeUnprepareResourcesRequest
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        return await self._h.unprepare(message)  # type: ignore[no-any-return]


class Registration(RegistrationBase):
    """GetInfo for the kubelet's plugin watcher; NotifyRegistrationStatus calls `on_registered` on success
    and logs a refusal (both answered OK)."""

    def __init__(self, endpoint: str, on_registered: Callable[[], None], driver: str = DRIVER_NAME) -> None:
        self.endpoint = endpoint
        self.driver = driver
        self.on_registered = on_registered
        self.status: RegistrationStatus | None = None

    async def get_info(self, message: InfoRequest) -> PluginInfo:
        return PluginInfo(
            type=PLUGIN_TYPE,
            name=self.driver,
            endpoint=self.endpoint,
            supported_versions=list(SUPPORTED_VERSIONS),
        )

    async def notify_registration_status(self, message: RegistrationStatus) -> RegistrationStatusResponse:
        self.status = message
        if not message.plugin_registered:
            # Acknowledged, not failed: the kubelet sends this from its own error path and only logs our
            # answer, and an error answer to a message we understood would read as UNKNOWN there.
            log.error("kubelet refused the plugin registration", error=clip(message.error, ERROR_LIMIT))
            return RegistrationStatusResponse()
        log.info("registered with the kubelet")
        self.on_registered()
        return RegistrationStatusResponse()


async def probe_sockets(reg_sock: Path, dra_sock: Path, timeout_s: float = 1.0) -> bool:
    """True when the registration socket answers GetInfo and the DRA socket an empty prepare."""
    for path, call in (
        (reg_sock, lambda ch: RegistrationStub(ch).get_info(InfoRequest(), timeout=timeout_s)),
        (dra_sock, lambda ch: v1.DraPluginStub(ch).node_prepare_resources(
            v1.NodePrepareResourcesRequest(), timeout=timeout_s)),
    ):  # fmt: skip
        channel = Channel(path=str(path))
        try:
            await call(channel)
        except (OSError, GRPCError, TimeoutError):
            return False
        finally:
            channel.close()
    return True


def _health_service(check: Callable[[], Awaitable[bool]]) -> Any:
    """grpclib's gRPC health service whose `""` and `liveness` services both run `check` (never cached).

    Imported here, not at module level: grpclib.health needs the protobuf runtime, which only the health port
    uses.
    """
    from grpclib.health.check import ServiceCheck
    from grpclib.health.service import Health

    service_check = ServiceCheck(check, check_ttl=0, check_timeout=3.0)
    health = Health({})
    health._checks = {name: {service_check} for name in HEALTH_SERVICES}
    return health


@dataclass
class ServerPaths:
    registrar_dir: Path
    plugin_dir: Path

    @property
    def registration(self) -> Path:
        return registration_socket(self.registrar_dir)

    @property
    def dra(self) -> Path:
        return dra_socket(self.plugin_dir)


def _clear_socket_path(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        log.info("replacing stale socket", path=str(path))
        path.unlink()


async def _requests_finished(server: Server, timeout_s: float) -> bool:
    """Wait, at most `timeout_s`, for the server's requests in flight to finish: the health streams once the
    board is closed send their end (status OK), and a Prepare in progress answers. grpclib's close cancels
    whatever still runs, and a stream cancelled sends no end. grpclib (0.4.x) keeps the requests' tasks in
    each connection handler's `_tasks`; tests/plugin/test_healthservice.py catches a change."""
    handlers = getattr(server, "_handlers", ())
    running = [t for h in handlers for t in getattr(h, "_tasks", {}).values() if not t.done()]
    if not running:
        return True
    _, pending = await asyncio.wait(running, timeout=timeout_s)
    return not pending


def _remove_socket(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


# sun_path holds 108 bytes with its terminating NUL (Linux).
MAX_SOCKET_PATH_BYTES = 107
_SOCKET_FLAGS = "--kubelet-plugins-directory-path and --kubelet-registrar-directory-path"


async def _start_unix(server: Server, path: Path) -> None:
    length = len(os.fsencode(path))
    if length > MAX_SOCKET_PATH_BYTES:
        raise PermanentError(
            f"kubelet plugin settings: socket path {path} is {length} bytes; a unix socket path is at most "
            f"{MAX_SOCKET_PATH_BYTES}: choose shorter {_SOCKET_FLAGS}"
        )
    _clear_socket_path(path)
    old = os.umask(0o177)  # the socket is created owner-only, with no window of wider permissions
    try:
        await server.start(path=str(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)  # noqa: PTH101


class PluginServers:
    """Owns the three servers and their sockets."""

    def __init__(
        self,
        paths: ServerPaths,
        driver: Driver,
        on_registered: Callable[[], None],
        health_port: int = -1,
        board: HealthBoard | None = None,
    ) -> None:
        self.paths = paths
        self.registration = Registration(str(paths.dra), on_registered)
        self.board = board or HealthBoard()
        dra: list[Any] = [DraV1(driver), DraV1beta1(driver), HealthV1alpha1(self.board), HealthV1(self.board)]
        self._dra = tracking(with_unimplemented_fallback(Server(dra, codec=RequestCodec())))
        self._reg = tracking(with_unimplemented_fallback(Server([self.registration], codec=RequestCodec())))
        self._health_port = health_port
        self._health: Server | None = None
        self._started: list[Server] = []  # a start that failed half-way closes only what it started
        self.bound_health_port: int | None = None

    async def healthy(self) -> bool:
        return await probe_sockets(self.paths.registration, self.paths.dra)

    async def start(self) -> None:
        await _start_unix(self._dra, self.paths.dra)
        self._started.append(self._dra)
        await _start_unix(self._reg, self.paths.registration)
        self._started.append(self._reg)
        if self._health_port >= 0:
            self._health = tracking(Server([_health_service(self.healthy)]))
            await self._health.start(host="0.0.0.0", port=self._health_port)
            self._started.append(self._health)
            sockets = getattr(self._health._server, "sockets", None) or ()
            self.bound_health_port = sockets[0].getsockname()[1] if sockets else self._health_port
        log.info("serving", dra=str(self.paths.dra), registration=str(self.paths.registration),
                 health_port=self.bound_health_port)  # fmt: skip

    async def close(self) -> None:
        """Registration first (the kubelet deregisters the plugin), then the health streams end cleanly,
        then the DRA socket: closing a grpclib server cancels its handlers, which the kubelet reads as a
        broken stream (code Unavailable, logged as an error)."""
        await self._close_server(self._reg, self.paths.registration)
        await self.board.close()
        if not await _requests_finished(self._dra, STREAM_END_TIMEOUT_S):
            log.warning("requests still in flight at close", health_streams=self.board.watchers)
        await self._close_server(self._dra, self.paths.dra)
        if self._health is not None:
            await self._close_server(self._health, None)
        self._started.clear()

    async def _close_server(self, server: Server, path: Path | None) -> None:
        """Close `server` if it was started, then its unix socket's path (`path`), if it has one."""
        if server in self._started:
            server.close()
            await server.wait_closed()
            close_connections(server)  # a client that keeps its connection holds none of ours
        if path is not None:
            _remove_socket(path)
