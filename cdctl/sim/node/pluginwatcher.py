"""The kubelet's plugin manager, simulated: discovers DRA plugins through the registration socket directory.

`PluginWatcher.scan()` looks for new and removed sockets in the registry directory (names starting with
"." and non-sockets are ignored, subdirectories are searched, like the kubelet's fsnotify walk). For a new
socket it calls `GetInfo` (1 s timeout), checks the type is "DRAPlugin", picks the first service in the
plugin's `supported_versions` that this kubelet speaks (the 1.34+ rule), and answers
`NotifyRegistrationStatus` with the outcome. A removed socket deregisters its plugin once it has been gone for
`deregister_after_s`: the real plugin manager deregisters from its reconciler loop, which runs once a second,
so a plugin that stops is still registered (and its health stream still followed) while it closes its DRA
socket; the kubelet sees how that stream ends. A socket back within that time replaces the plugin at once.
Used by cdctl.sim.node.kubelet.
"""

from __future__ import annotations

import logging
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpclib
from grpclib.client import Channel

from cdctl._proto.pluginregistration import InfoRequest, RegistrationStatus, RegistrationStub

log = logging.getLogger(__name__)
DRA_PLUGIN_TYPE = "DRAPlugin"
KUBELET_DRA_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
GET_INFO_TIMEOUT_S = 1.0
NOTIFY_TIMEOUT_S = 5.0
RECONCILE_PERIOD_S = 1.0  # the kubelet plugin manager's loopSleepDuration


@dataclass
class RegisteredPlugin:
    driver: str
    endpoint: Path
    service: str  # "v1.DRAPlugin" or "v1beta1.DRAPlugin"
    registration_socket: Path


@dataclass
class PluginWatcher:
    registry_dir: Path
    services: tuple[str, ...] = KUBELET_DRA_SERVICES
    plugins: dict[str, RegisteredPlugin] = field(default_factory=dict)  # by driver
    rejected: dict[Path, str] = field(default_factory=dict)  # registration socket -> reason
    deregister_after_s: float = RECONCILE_PERIOD_S
    _known: set[Path] = field(default_factory=set)
    _gone_since: dict[Path, float] = field(default_factory=dict)

    def _sockets(self) -> set[Path]:
        found: set[Path] = set()
        if not self.registry_dir.is_dir():
            return found
        for path in self.registry_dir.rglob("*"):
            if any(part.startswith(".") for part in path.relative_to(self.registry_dir).parts):
                continue
            try:
                if stat.S_ISSOCK(path.lstat().st_mode):
                    found.add(path)
            except FileNotFoundError:
                continue
        return found

    async def scan(self) -> None:
        sockets = self._sockets()
        now = time.monotonic()
        for gone in self._known - sockets:
            if now - self._gone_since.setdefault(gone, now) >= self.deregister_after_s:
                self._deregister(gone)
        for back in [path for path in self._gone_since if path in sockets]:
            self._deregister(back)  # a new plugin on the same socket: registered again below
        for new in sorted(sockets - self._known):
            if await self._register(new):
                self._known.add(new)

    def _deregister(self, socket_path: Path) -> None:
        self._gone_since.pop(socket_path, None)
        self._known.discard(socket_path)
        self.rejected.pop(socket_path, None)
        for driver, plugin in list(self.plugins.items()):
            if plugin.registration_socket == socket_path:
                log.info("simulated kubelet: plugin %s deregistered", driver)
                del self.plugins[driver]

    def choose_service(self, supported: list[str]) -> str | None:
        return next((s for s in supported if s in self.services), None)

    async def _register(self, socket_path: Path) -> bool:
        """Register one socket; False when it did not answer yet (tried again on the next scan)."""
        channel = Channel(path=str(socket_path))
        try:
            stub = RegistrationStub(channel)
            try:
                info = await stub.get_info(InfoRequest(), timeout=GET_INFO_TIMEOUT_S)
            except (OSError, TimeoutError, grpclib.GRPCError) as error:
                log.debug("simulated kubelet: GetInfo on %s failed: %s", socket_path, error)
                return False
            reason = self._validate(info.type, info.name, list(info.supported_versions))
            endpoint = Path(info.endpoint) if info.endpoint else socket_path
            status = RegistrationStatus(plugin_registered=reason is None, error=reason or "")
            try:
                await stub.notify_registration_status(status, timeout=NOTIFY_TIMEOUT_S)
            except (OSError, TimeoutError, grpclib.GRPCError) as error:
                log.info("simulated kubelet: NotifyRegistrationStatus on %s failed: %s", socket_path, error)
            if reason is not None:
                self.rejected[socket_path] = reason
                return True
            service = self.choose_service(list(info.supported_versions))
            assert service is not None
            self.plugins[info.name] = RegisteredPlugin(info.name, endpoint, service, socket_path)
            log.info("simulated kubelet: plugin %s registered at %s using %s", info.name, endpoint, service)
            return True
        finally:
            channel.close()

    def _validate(self, plugin_type: str, name: str, supported: list[str]) -> str | None:
        if plugin_type != DRA_PLUGIN_TYPE:
            return f"no handler registered for plugin type: {plugin_type} at socket"
        if not name:
            return "plugin name is empty"
        if not supported:
            return f"the plugin {name} did not advertise any supported versions"
        if self.choose_service(supported) is None:
            return (
                f"none of services supported by the plugin {supported} are supported by the kubelet "
                f"{list(self.services)}"
            )
        return None
