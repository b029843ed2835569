"""The whole plugin process against the simulated API server: slice publishing, the fabric that completes
late (no channel-0 until then, Node events), re-publishing a slice that disappears, and a prepare through
the socket that ends up as a claim_lifecycle row."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
from grpclib.client import Channel

from cdctl._proto.k8s.io.kubelet.pkg.apis.dra import v1
from cdctl.api.shareddaemon import SHARED_DIR
from cdctl.k8s.rest import KubeApi
from cdctl.plugin import nvml
from cdctl.plugin.app import PluginProcess
from cdctl.plugin.daemonclaims import DOMAINS_DIR
from cdctl.plugin.pluginconfig import PluginConfig
from cdctl.sim.apiserver.server import ApiServer
from cdctl.store import SqliteEventStore
from tests.plugin.conftest import SIM_NODE as NODE
from tests.plugin.explained import node_problems
from tests.plugin.fakes import imex_ready as imex_ready_gate

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
U = "6a130f54-faaa-4b8f-847f-be44ab70f917"


async def until(check: Callable[[], Any], what: str) -> Any:
    async with asyncio.timeout(60):  # a plugin starting on a busy machine: seconds, at worst tens
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
    # The log says when the fabric's wait began and ended (cdctl explain: fabric-degraded).
    store = await SqliteEventStore.open(process.cfg.db_path, read_only=True)
    try:
        rows = await store.query(
            "SELECT json_extract(data, '$.ready'), json_extract(data, '$.pending') <> '',"
            " json_extract(data, '$.clique_id') FROM events WHERE type = 'FabricStateChanged'"
            " ORDER BY position"
        )
    finally:
        await store.close()
    assert [tuple(r) for r in rows] == [(0, 1, ""), (1, 0, f"{U}.7")]
    problems = await node_problems(Path(process.cfg.db_path), NODE)
    assert any(p.startswith("the NVLink fabric was not ready:") for p in problems), problems


async def seed_claim(api: KubeApi, clique: str) -> tuple[str, str]:
    """A ComputeDomain whose clique lists this node's daemon as Ready, and an allocated channel claim."""
    base = "/apis/resource.nvidia.com/v1beta1/namespaces/default"
    cd = await api.create(
        f"{base}/computedomains",
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomain",
            "metadata": {"name": "cd"},
            "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "cd-ch"}}},
        },
    )
    uid = cd["metadata"]["uid"]
    daemon = {"nodeName": NODE, "ipAddress": "10.0.0.1", "cliqueID": clique, "index": 0, "status": "Ready"}
    await api.create(
        f"{base}/computedomaincliques",
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomainClique",
            "metadata": {
                "name": f"{uid}.{clique}",
                "labels": {
                    "resource.nvidia.com/computeDomain": uid,
                    "resource.nvidia.com/computeDomain.cliqueID": clique,
                },
            },
            "daemons": [daemon],
        },
    )
    claims = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
    claim = await api.create(
        claims,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "rc"},
            "spec": {"devices": {"requests": [{"name": "channel", "exactly": {"deviceClassName": "x"}}]}},
        },
    )
    params = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainChannelConfig",
        "domainID": uid,
    }
    result = {
        "request": "channel",
        "driver": "compute-domain.nvidia.com",
        "pool": NODE,
        "device": "channel-0",
    }
    config = {
        "source": "FromClaim",
        "requests": ["channel"],
        "opaque": {"driver": result["driver"], "parameters": params},
    }
    claim["status"] = {"allocation": {"devices": {"results": [result], "config": [config]}}}
    await api.replace(f"{claims}/rc/status", claim)
    return uid, claim["metadata"]["uid"]


@contextlib.asynccontextmanager
async def serving_plugin(
    cfg: PluginConfig, api: KubeApi, imex_ready: tuple[str, ...] = ()
) -> AsyncIterator[tuple[PluginProcess, v1.DraPluginStub]]:
    """The whole plugin process on `cfg` (fake NVML, clique `<U>.7`), once its slice is published, and a DRA
    client on its socket; stopped on exit. The node's shared IMEX daemon and the IMEX daemons of the domains
    `imex_ready` names (uids) report IMEX ready (their handover gates are open)."""
    with contextlib.ExitStack() as daemons:
        daemons.enter_context(imex_ready_gate(cfg.plugin_dir / SHARED_DIR))
        for uid in imex_ready:
            daemons.enter_context(imex_ready_gate(cfg.plugin_dir / DOMAINS_DIR / uid))
        async with _serving_plugin(cfg, api) as served:
            yield served


@contextlib.asynccontextmanager
async def _serving_plugin(
    cfg: PluginConfig, api: KubeApi
) -> AsyncIterator[tuple[PluginProcess, v1.DraPluginStub]]:
    stop = asyncio.Event()
    process = PluginProcess(cfg, device_lib=nvml.FakeDeviceLib(cluster_uuid=U, clique_id=7))
    task = asyncio.create_task(process.run(stop))

    async def published() -> list[str] | None:
        if task.done():  # the plugin failed to start: its error, not a wait for a slice that cannot come
            task.result()
            raise AssertionError("the plugin stopped before it published its slice")
        return await slice_devices(api)

    try:
        await until(published, "slice")
        assert process.servers is not None
        channel = Channel(path=str(process.servers.paths.dra))
        try:
            yield process, v1.DraPluginStub(channel)
        finally:
            channel.close()
    finally:
        stop.set()
        await task


async def test_prepare_through_the_socket_lands_in_claim_lifecycle(
    env: tuple[ApiServer, KubeApi, Path],
) -> None:
    _, api, base = env
    domain_uid, claim_uid = await seed_claim(api, f"{U}.7")
    cfg = dataclasses.replace(config(base), http_endpoint="127.0.0.1:0")
    async with serving_plugin(cfg, api, (domain_uid,)) as (process, stub):
        ref = v1.Claim(namespace="default", name="rc", uid=claim_uid)
        resp = await stub.node_prepare_resources(v1.NodePrepareResourcesRequest(claims=[ref]))
        assert resp.claims[claim_uid].error == ""
        assert resp.claims[claim_uid].devices[0].cdi_device_ids == [
            f"k8s.compute-domain.nvidia.com/claim={claim_uid}-channel-0"
        ]
        node = await api.get(f"/api/v1/nodes/{NODE}")
        assert node["metadata"]["labels"]["resource.nvidia.com/computeDomain"] == domain_uid
        assert process.http is not None
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{process.http.port}/metrics") as got,
        ):
            text = await got.text()
        d = 'driver="compute-domain.nvidia.com"'
        assert f'nvidia_dra_requests_total{{{d},operation="prepare"}} 1.0' in text
        assert f'nvidia_dra_requests_total{{{d},operation="unprepare"}} 0.0' in text
        assert f'nvidia_dra_prepared_devices{{device_type="channel",{d},node="{NODE}"}} 1.0' in text
        unresp = await stub.node_unprepare_resources(v1.NodeUnprepareResourcesRequest(claims=[ref]))
        assert unresp.claims[claim_uid].error == ""
    store = await SqliteEventStore.open(cfg.db_path, read_only=True)
    try:
        rows = await store.query(
            "SELECT namespace, name, domain_uid, node, state, requested_at IS NOT NULL,"
            " prepared_at IS NOT NULL, unprepared_at IS NOT NULL, last_error"
            " FROM claim_lifecycle WHERE claim_uid = ?",
            (claim_uid,),
        )
    finally:
        await store.close()
    assert [tuple(r) for r in rows] == [("default", "rc", domain_uid, NODE, "Unprepared", 1, 1, 1, "")]
