"""The whole plugin process against the simulated API server: slice publishing, the fabric that completes
late (no channel-0 until then, Node events), and re-publishing a slice that disappears."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cdctl.k8s.rest import KubeApi
from cdctl.plugin import nvml
from cdctl.plugin.app import PluginConfig, PluginProcess
from cdctl.sim.server import ApiServer
from tests.plugin.conftest import SIM_NODE as NODE

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
U = "6a130f54-faaa-4b8f-847f-be44ab70f917"


async def until(check: Callable[[], Any], what: str) -> Any:
    async with asyncio.timeout(30):
        while True:
            got = await check()
            if got:
                return got
            await asyncio.sleep(0.02)


def config(base: Path) -> PluginConfig:
    (base / "devices").write_text("Character devices:\n234 nvidia-caps-imex-channels\n235 nvidia-caps\n")
    (base / "boot_id").write_text("boot-1\n")
    return PluginConfig(
        node_name=NODE,
        cdi_root=base / "cdi",
        registrar_dir=base / "registry",
        plugins_dir=base / "plugins",
        kubeconfig=str(base / "kubeconfig"),
        kube_api_qps=0,
        kube_api_burst=0,
        proc_devices=str(base / "devices"),
        boot_id_path=str(base / "boot_id"),
        fabric_reprobe_s=0.05,
    )


async def slice_devices(api: KubeApi) -> list[str] | None:
    items = (await api.list_objects(SLICES)).get("items") or []
    return [d["name"] for d in items[0]["spec"]["devices"]] if len(items) == 1 else None


async def event_reasons(api: KubeApi) -> set[str]:
    items = (await api.list_objects("/api/v1/namespaces/default/events")).get("items") or []
    return {e["reason"] for e in items if e["involvedObject"]["name"] == NODE}


async def test_late_fabric_and_lost_slice(env: tuple[ApiServer, KubeApi, Path]) -> None:
    _, api, base = env
    fake = nvml.FakeDeviceLib(cluster_uuid=U, clique_id=7, state=nvml.STATE_IN_PROGRESS)
    stop = asyncio.Event()
    process = PluginProcess(config(base), device_lib=fake)
    task = asyncio.create_task(process.run(stop))
    try:
        assert await until(lambda: slice_devices(api), "slice") == ["daemon-0"]  # no channel-0 yet
        assert "NVLinkFabricNotReady" in await until(lambda: event_reasons(api), "event")
        assert process.servers is not None and process.servers.paths.dra.exists()  # serving meanwhile
        fake.state = nvml.STATE_COMPLETED

        async def has_channel() -> bool:
            return await slice_devices(api) == ["channel-0", "daemon-0"]

        await until(has_channel, "channel-0 published")
        assert process.fabric.clique_id == f"{U}.7"
        assert "NVLinkFabricReady" in await event_reasons(api)
        (old,) = (await api.list_objects(SLICES))["items"]
        await api.delete(f"{SLICES}/{old['metadata']['name']}")

        async def recreated() -> bool:
            items = (await api.list_objects(SLICES)).get("items") or []
            return len(items) == 1 and items[0]["metadata"]["uid"] != old["metadata"]["uid"]

        await until(recreated, "slice recreated")
        owner = (await api.list_objects(SLICES))["items"][0]["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("Node", NODE, True)
    finally:
        stop.set()
        await task
    assert not process.servers.paths.registration.exists()  # deregistered on stop
