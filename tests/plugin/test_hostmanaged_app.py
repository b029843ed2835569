"""The plugin process under HostManagedIMEX: start-up logs the gate overrides, and its ResourceSlice holds
channel-0 and no daemon device (the design's "kubelet ResourceSlice omits daemon device under the gate")."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
import structlog

from cdctl.api.gates import parse_feature_gates
from cdctl.domain.errors import PermanentError
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


async def test_a_host_imex_config_without_the_tool_to_ask_it_is_refused_at_start(
    env: tuple[ApiServer, KubeApi, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--host-imex-config` names what to ask; with no `nvidia-imex-ctl` in the driver root nor on PATH the
    plugin refuses to start, naming both, rather than hand out channels it was told to check."""
    _, _, base = env
    monkeypatch.setenv("PATH", str(base / "empty-path"))
    cfg = dataclasses.replace(
        config(base),
        gates=parse_feature_gates("HostManagedIMEX=true"),
        host_imex_config=base / "etc" / "config.cfg",
        container_driver_root=base / "driver-root",
    )
    process = PluginProcess(cfg, device_lib=nvml.FakeDeviceLib(cluster_uuid=U, clique_id=7))
    with pytest.raises(PermanentError) as refused:
        await asyncio.wait_for(process.run(asyncio.Event()), 60)
    assert str(refused.value) == (
        f"--host-imex-config {base / 'etc' / 'config.cfg'}: nvidia-imex-ctl is neither in the driver root "
        f"({base / 'driver-root'}) nor on PATH; it is needed to ask the host's IMEX"
    )
