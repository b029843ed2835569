"""The plugin process's device health against the simulated API server: a fabric that degrades at run time
turns channel-0 UNHEALTHY on the health stream (with a Node Event), and a node without a GPU driver keeps the
plugin up, publishing nothing, until the driver appears."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grpclib.client import Channel

from cdctl._proto import v1alpha1 as health_v1alpha1
from cdctl._proto.pluginregistration import InfoRequest, RegistrationStub
from cdctl.k8s.rest import KubeApi
from cdctl.plugin import nvml
from cdctl.plugin.app import PluginProcess
from cdctl.plugin.health import Health
from cdctl.sim.apiserver.server import ApiServer
from tests.plugin.conftest import SIM_NODE as NODE
from tests.plugin.test_app import SLICES, U, config

EVENTS = "/api/v1/namespaces/default/events"


async def until(check: Callable[[], Any]) -> Any:
    async with asyncio.timeout(20):
        while True:
            got = await check()
            if got:
                return got
            await asyncio.sleep(0.02)


async def node_events(api: KubeApi) -> list[tuple[str, str]]:
    items = (await api.list_objects(EVENTS)).get("items") or []
    return [(e["reason"], e["message"]) for e in items if e["involvedObject"]["name"] == NODE]


def channel_health(process: PluginProcess) -> tuple[Health, str] | None:
    snapshot = process.board.snapshot
    found = [r for r in snapshot.reports if r.device == "channel-0"] if snapshot else []
    return (found[0].health, found[0].message) if found else None


async def test_a_degraded_fabric_turns_channel_0_unhealthy_on_demand(
    env: tuple[ApiServer, KubeApi, Path],
) -> None:
    _, api, base = env
    fake = nvml.FakeDeviceLib(cluster_uuid=U, clique_id=7)
    cfg = dataclasses.replace(config(base), fabric_reprobe_s=3600.0)  # only `recheck` probes again
    process = PluginProcess(cfg, device_lib=fake)
    stop = asyncio.Event()
    task = asyncio.create_task(process.run(stop))
    try:

        async def healthy() -> bool:
            got = channel_health(process)
            return got is not None and got[0] is Health.HEALTHY

        await until(healthy)
        assert process.servers is not None
        channel = Channel(path=str(process.servers.paths.dra))
        try:
            stream = health_v1alpha1.DraResourceHealthStub(channel).node_watch_resources(
                health_v1alpha1.NodeWatchResourcesRequest()
            )
            first = await asyncio.wait_for(anext(stream), 5)
            assert [(d.device.device_name, d.health) for d in first.devices] == [
                ("channel-0", health_v1alpha1.HealthStatus.HEALTHY),
                ("daemon-0", health_v1alpha1.HealthStatus.HEALTHY),
            ]
            assert {d.device.pool_name for d in first.devices} == {NODE}
            fake.state = nvml.STATE_IN_PROGRESS
            process.recheck.set()
            second = await asyncio.wait_for(anext(stream), 5)
            channel_0 = second.devices[0]
            assert channel_0.health == health_v1alpha1.HealthStatus.UNHEALTHY
            assert "fabric state is IN_PROGRESS" in channel_0.message
            await stream.aclose()
        finally:
            channel.close()
        reasons = [r for r, _ in await until(lambda: node_events(api))]
        assert "IMEXChannelUnhealthy" in reasons
    finally:
        stop.set()
        await task


async def test_without_a_gpu_driver_the_plugin_stays_up_and_publishes_nothing(
    env: tuple[ApiServer, KubeApi, Path],
) -> None:
    _, api, base = env
    pool = {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    spec = {"driver": "compute-domain.nvidia.com", "nodeName": NODE, "pool": pool, "devices": []}
    stale = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "stale"}}
    stale["spec"] = spec
    await api.create(SLICES, stale)
    fake = nvml.FakeDeviceLib(cluster_uuid=None, driver_missing=True)
    process = PluginProcess(config(base), device_lib=fake)  # probes every 0.05 s
    stop = asyncio.Event()
    task = asyncio.create_task(process.run(stop))
    try:

        async def no_slices() -> bool:
            return not (await api.list_objects(SLICES)).get("items") and fake.probes >= 5

        await until(no_slices)  # the stale slice withdrawn, several probes later still none
        assert not task.done()
        events = await until(lambda: node_events(api))
        assert [r for r, _ in events] == ["GPUDriverNotFound"]  # said once, not on every probe
        assert "NVML Shared Library Not Found" in events[0][1]
        assert process.servers is not None
        channel = Channel(path=str(process.servers.paths.registration))
        try:
            info = await RegistrationStub(channel).get_info(InfoRequest(), timeout=2)
            assert info.name == "compute-domain.nvidia.com"
        finally:
            channel.close()
        channel = Channel(path=str(process.servers.paths.dra))
        try:
            stream = health_v1alpha1.DraResourceHealthStub(channel).node_watch_resources(
                health_v1alpha1.NodeWatchResourcesRequest()
            )
            assert list((await asyncio.wait_for(anext(stream), 5)).devices) == []
            await stream.aclose()
        finally:
            channel.close()
        fake.driver_missing = False  # the driver is installed: the plugin asks to be restarted
        fake.cluster_uuid = U
        await asyncio.wait_for(task, 10)
        assert process.restart_requested.is_set()
        assert "GPUDriverFound" in [r for r, _ in await node_events(api)]
    finally:
        stop.set()
        await task
