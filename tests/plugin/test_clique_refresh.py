"""The clique re-read (every --clique-refresh-interval), the nvidia.com/gpu.clique label (--gpu-clique-label,
upstream PR 1247), the single-node rule (upstream PR 1289) and the fail-fast of CrashOnNVLinkFabricErrors,
on the whole plugin process against the simulated API server."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
import structlog

from cdctl.api.gates import parse_feature_gates
from cdctl.api.refs import GPU_CLIQUE_LABEL
from cdctl.k8s.rest import KubeApi
from cdctl.plugin import nvml
from cdctl.plugin.app import PluginProcess
from cdctl.sim.apiserver.server import ApiServer
from tests.plugin.conftest import SIM_NODE as NODE
from tests.plugin.explained import node_problems
from tests.plugin.test_app import SLICES, U, config, event_reasons, slice_devices, until


async def node_label(api: KubeApi) -> str | None:
    node = await api.get(f"/api/v1/nodes/{NODE}")
    return (node["metadata"].get("labels") or {}).get(GPU_CLIQUE_LABEL)


async def pool_generation(api: KubeApi) -> int:
    (item,) = (await api.list_objects(SLICES))["items"]
    return int(item["spec"]["pool"]["generation"])


async def test_clique_label_follows_a_changing_clique(env: tuple[ApiServer, KubeApi, Path]) -> None:
    _, api, base = env
    fake = nvml.FakeDeviceLib(cluster_uuid=U, clique_id=7)
    cfg = dataclasses.replace(
        config(base), gpu_clique_label=True, clique_refresh_s=0.05,
        gates=parse_feature_gates("ComputeDomainCliques=false"),  # no clique-keyed watch: no restart
    )  # fmt: skip
    stop = asyncio.Event()
    process = PluginProcess(cfg, device_lib=fake)
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(process.run(stop))
        try:
            assert await node_label(api) in (None, f"{U}.7")
            await until(lambda: slice_devices(api), "slice")
            assert await node_label(api) == f"{U}.7"  # set at start-up, before the first slice
            first = await pool_generation(api)
            fake.clique_id = 8  # Fabric Manager moved the node to another partition

            async def relabelled() -> bool:
                return await node_label(api) == f"{U}.8"

            await until(relabelled, "label follows the clique")
            assert process.fabric.clique_id == f"{U}.8"
            assert "NVLinkCliqueChanged" in await event_reasons(api)

            async def republished() -> bool:
                return await pool_generation(api) == first + 1

            await until(republished, "pool republished with a new generation")
            assert await slice_devices(api) == ["channel-0", "daemon-0"]
            assert not process.restart_requested.is_set()
            fake.cluster_uuid = None  # the fabric goes away: no clique, no label
            await until(lambda: _absent(api), "label removed")
        finally:
            stop.set()
            await task
    changes = [e for e in logs if e["event"].startswith("NVLink clique changed")]
    assert changes[0]["log_level"] == "warning" and changes[0]["new"] == f"{U}.8"


async def _absent(api: KubeApi) -> bool:
    return await node_label(api) is None


async def test_the_label_is_left_alone_by_default(env: tuple[ApiServer, KubeApi, Path]) -> None:
    _, api, base = env
    await api.merge_patch(f"/api/v1/nodes/{NODE}", {"metadata": {"labels": {GPU_CLIQUE_LABEL: "from-gfd"}}})
    stop = asyncio.Event()
    process = PluginProcess(config(base), device_lib=nvml.FakeDeviceLib(cluster_uuid=U, clique_id=7))
    task = asyncio.create_task(process.run(stop))
    try:
        await until(lambda: slice_devices(api), "slice")
        assert await node_label(api) == "from-gfd"
    finally:
        stop.set()
        await task


async def test_a_clique_change_restarts_a_plugin_that_watches_by_clique(
    env: tuple[ApiServer, KubeApi, Path],
) -> None:
    _, api, base = env
    fake = nvml.FakeDeviceLib(cluster_uuid=U, clique_id=7)
    process = PluginProcess(dataclasses.replace(config(base), clique_refresh_s=0.05), device_lib=fake)
    task = asyncio.create_task(process.run(asyncio.Event()))
    await until(lambda: slice_devices(api), "slice")
    fake.clique_id = 9
    async with asyncio.timeout(30):
        await task  # returns: the container restarts and follows the new clique's objects
    assert process.restart_requested.is_set()
    assert "NVLinkCliqueChanged" in await event_reasons(api)
    stop = asyncio.Event()  # the restarted container, in the new clique
    again = PluginProcess(process.cfg, device_lib=fake)
    task = asyncio.create_task(again.run(stop))
    try:
        await until(lambda: _in_clique(again, f"{U}.9"), "started in the new clique")
    finally:
        stop.set()
        await task
    # cdctl explain tells the restart from a lost node: the clique it started in is another.
    problems = await node_problems(Path(process.cfg.db_path), NODE)
    assert f"the NVLink clique of {NODE} changed from {U}.7 to {U}.9: its plugin restarted at" in problems[-1]


async def _in_clique(process: PluginProcess, clique: str) -> bool:
    return process.fabric is not None and process.fabric.clique_id == clique and process.state is not None


async def test_single_node_system_in_progress_publishes_channel_0_at_once(
    env: tuple[ApiServer, KubeApi, Path],
) -> None:
    _, api, base = env
    fake = nvml.FakeDeviceLib(cluster_uuid=U, clique_id=0, state=nvml.STATE_IN_PROGRESS, single_node=True)
    stop = asyncio.Event()
    process = PluginProcess(config(base), device_lib=fake)
    task = asyncio.create_task(process.run(stop))
    try:
        assert await until(lambda: slice_devices(api), "slice") == ["channel-0", "daemon-0"]
        assert process.fabric.clique_id == "" and process.fabric.pending is None
        assert "NVLinkFabricNotReady" not in await event_reasons(api)
        await asyncio.sleep(0.2)  # a few health rounds: the incomplete registration is not a degradation
        assert process.board.snapshot is not None
        health = {d.device: d.health.name for d in process.board.snapshot.reports}
        assert health.get("channel-0") == "HEALTHY", health
    finally:
        stop.set()
        await task


async def test_a_registration_error_fails_fast_under_crash_on_fabric_errors(
    env: tuple[ApiServer, KubeApi, Path],
) -> None:
    _, api, base = env
    fake = nvml.FakeDeviceLib(cluster_uuid=U, clique_id=7, status=3)
    with pytest.raises(nvml.NvmlError, match="registration error"):
        await PluginProcess(config(base), device_lib=fake).run(asyncio.Event())
    lenient = dataclasses.replace(config(base), gates=parse_feature_gates("CrashOnNVLinkFabricErrors=false"))
    stop = asyncio.Event()
    process = PluginProcess(lenient, device_lib=fake)
    task = asyncio.create_task(process.run(stop))
    try:
        assert await until(lambda: slice_devices(api), "slice") == ["channel-0", "daemon-0"]
        assert process.fabric.clique_id == ""  # legacy: a GPU with an error is not attached
    finally:
        stop.set()
        await task
