"""The plugin process under HostManagedIMEX: start-up logs the gate overrides, and its ResourceSlice holds
channel-0 and no daemon device (the design's "kubelet ResourceSlice omits daemon device under the gate")."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import structlog

from cdctl.api.gates import parse_feature_gates
from cdctl.k8s.rest import KubeApi
from cdctl.plugin import nvml
from cdctl.plugin.app import PluginProcess
from cdctl.sim.apiserver.server import ApiServer
from tests.plugin.test_app import U, config, slice_devices, until


async def test_start_up_logs_the_overrides_and_publishes_only_channel_zero(
    env: tuple[ApiServer, KubeApi, Path],
) -> None:
    _, api, base = env
    cfg = dataclasses.replace(config(base), gates=parse_feature_gates("HostManagedIMEX=true"))
    stop = asyncio.Event()
    process = PluginProcess(cfg, device_lib=nvml.FakeDeviceLib(cluster_uuid=U, clique_id=7))
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(process.run(stop))
        try:
            assert await until(lambda: slice_devices(api), "slice") == ["channel-0"]
        finally:
            stop.set()
            await task
    events = [entry["event"] for entry in logs]
    start = events.index("starting kubelet plugin")
    assert events[:start] == [
        "HostManagedIMEX is enabled; forcing IMEXDaemonsWithDNSNames=false",
        "HostManagedIMEX is enabled; forcing ComputeDomainCliques=false",
    ]
    assert logs[start]["gates"] == {
        "HostManagedIMEX": True,
        "IMEXDaemonsWithDNSNames": False,
        "ComputeDomainCliques": False,
    }
    assert "driver version validation passed" not in events  # the DNS-names gate is off: no driver check
