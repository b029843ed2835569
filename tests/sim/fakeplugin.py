"""A minimal DRA kubelet plugin for the simulated kubelet's tests: registration, DRA v1 and v1beta1."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpclib.server import Server

from cdctl._proto.k8s.io.kubelet.pkg.apis.dra import v1 as dra_v1
from cdctl._proto.k8s.io.kubelet.pkg.apis.dra import v1beta1 as dra_v1beta1
from cdctl._proto.pluginregistration import (
    InfoRequest,
    PluginInfo,
    RegistrationBase,
    RegistrationStatus,
    RegistrationStatusResponse,
)


@dataclass
class PluginLog:
    statuses: list[RegistrationStatus] = field(default_factory=list)
    prepared: list[tuple[str, list[str]]] = field(default_factory=list)  # (service module, claim uids)
    unprepared: list[tuple[str, list[str]]] = field(default_factory=list)
    fail_claims: set[str] = field(default_factory=set)
    held_claims: set[str] = field(default_factory=set)  # their prepare waits for `release`
    release: asyncio.Event = field(default_factory=asyncio.Event)


class _Registration(RegistrationBase):
    def __init__(self, info: PluginInfo, log: PluginLog) -> None:
        self.info, self.log = info, log

    async def get_info(self, message: InfoRequest) -> PluginInfo:
        return self.info

    async def notify_registration_status(self, message: RegistrationStatus) -> RegistrationStatusResponse:
        self.log.statuses.append(message)
        return RegistrationStatusResponse()


def _dra_handler(module: Any, label: str, log: PluginLog, driver: str) -> Any:
    class Handler(module.DraPluginBase):  # type: ignore[misc]
        async def node_prepare_resources(self, message: Any) -> Any:
            log.prepared.append((label, [c.uid for c in message.claims]))
            if log.held_claims & {c.uid for c in message.claims}:
                await log.release.wait()
            claims = {}
            for claim in message.claims:
                if claim.uid in log.fail_claims:
                    claims[claim.uid] = module.NodePrepareResourceResponse(error="injected failure")
                    continue
                device = module.Device(
                    request_names=["channel"],
                    pool_name="n1",
                    device_name="channel-0",
                    cdi_device_ids=[f"k8s.{driver}/claim={claim.uid}-channel-0"],
                )
                claims[claim.uid] = module.NodePrepareResourceResponse(devices=[device])
            return module.NodePrepareResourcesResponse(claims=claims)

        async def node_unprepare_resources(self, message: Any) -> Any:
            log.unprepared.append((label, [c.uid for c in message.claims]))
            return module.NodeUnprepareResourcesResponse(
                claims={c.uid: module.NodeUnprepareResourceResponse() for c in message.claims}
            )

    return Handler()


def _make_dirs(*directories: Path) -> None:
    for directory in directories:
        directory.mkdir(parents=True, exist_ok=True)


@contextlib.asynccontextmanager
async def serve_plugin(
    registry_dir: Path, plugin_dir: Path, driver: str, versions: list[str], plugin_type: str = "DRAPlugin"
) -> Any:
    """Serve the DRA socket first, then the registration socket, as the upstream helper does."""
    log = PluginLog()
    _make_dirs(plugin_dir, registry_dir)
    dra_socket = plugin_dir / "dra.sock"
    registration_socket = registry_dir / f"{driver}-reg.sock"
    dra = Server([_dra_handler(dra_v1, "v1", log, driver), _dra_handler(dra_v1beta1, "v1beta1", log, driver)])
    registration = Server(
        [
            _Registration(
                PluginInfo(
                    type=plugin_type, name=driver, endpoint=str(dra_socket), supported_versions=versions
                ),
                log,
            )
        ]
    )
    await dra.start(path=str(dra_socket))
    await registration.start(path=str(registration_socket))
    try:
        yield log
    finally:
        for server in (registration, dra):
            server.close()
            await asyncio.wait_for(server.wait_closed(), 30)
        for path in (registration_socket, dra_socket):
            path.unlink(missing_ok=True)
