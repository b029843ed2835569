"""The plugin process under channel isolation against the simulated API server: the shared channel device
where the server keeps `allowMultipleAllocations`, slots where it drops it (with a Node Event), the
channel read from the clique object, the shared daemon's pod readiness, and no node label."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

from cdctl._proto.k8s.io.kubelet.pkg.apis.dra import v1
from cdctl.api.isolation import ImexIsolation
from cdctl.api.shareddaemon import SHARED_DAEMON_LABELS
from cdctl.k8s.rest import KubeApi
from cdctl.plugin.channels import ChannelCapacity
from cdctl.sim.apiserver.server import ApiServer
from tests.plugin.test_app import NODE, SLICES, U, config, event_reasons, seed_claim, serving_plugin, until

CLIQUE = f"{U}.7"
CLIQUES = "/apis/resource.nvidia.com/v1beta1/namespaces/default/computedomaincliques"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"


def channel_config(base: Path, **kw: Any) -> Any:
    return dataclasses.replace(config(base), isolation=ImexIsolation.CHANNEL, channel_slots=3, **kw)


async def stored_devices(api: KubeApi) -> list[dict[str, Any]]:
    items = (await api.list_objects(SLICES)).get("items") or []
    return list(items[0]["spec"]["devices"]) if len(items) == 1 else []


async def use_shared_device(api: KubeApi) -> None:
    claim = await api.get(f"{CLAIMS}/rc")
    claim["status"]["allocation"]["devices"]["results"][0]["device"] = "channel"
    await api.replace(f"{CLAIMS}/rc/status", claim)


async def prepare(stub: v1.DraPluginStub, uid: str) -> v1.NodePrepareResourceResponse:
    ref = v1.Claim(namespace="default", name="rc", uid=uid)
    resp = await stub.node_prepare_resources(v1.NodePrepareResourcesRequest(claims=[ref]))
    return resp.claims[uid]


async def shared_daemon_pod(api: KubeApi, ready: bool) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "imex-daemon-a", "labels": dict(SHARED_DAEMON_LABELS)},
        "spec": {"nodeName": NODE, "containers": [{"name": "imex", "image": "x"}]},
    }
    path = "/api/v1/namespaces/default/pods"
    try:
        created = await api.create(path, pod)
    except Exception:
        created = await api.get(f"{path}/imex-daemon-a")
    created["status"] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    await api.replace(f"{path}/imex-daemon-a/status", created)


async def test_consumable_device_where_the_server_keeps_it(short_dir: Path) -> None:
    base = short_dir
    from cdctl.k8s.plugincluster import connect, disconnect
    from cdctl.sim.apiserver.settings import ServerSettings
    from cdctl.sim.rack.chart import crds

    async with ApiServer(settings=ServerSettings(dra_consumable_capacity=True)) as server:
        api = await connect(str(server.write_kubeconfig(base / "kubeconfig")), 0, 0)
        try:
            for crd in crds():
                await api.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
            await api.create(
                "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}
            )
            async with serving_plugin(channel_config(base), api):
                (device,) = await until(lambda: stored_devices(api), "slice")
                assert device["name"] == "channel" and device["allowMultipleAllocations"] is True
                assert device["capacity"]["claims"]["value"] == "3"
                assert device["attributes"]["type"] == {"string": "imex-channel"}
        finally:
            await disconnect(api)


async def test_slots_where_the_server_drops_it_and_prepare_with_the_cliques_channel(
    env: tuple[ApiServer, KubeApi, Path],
) -> None:
    _, api, base = env
    domain_uid, claim_uid = await seed_claim(api, CLIQUE)
    async with serving_plugin(channel_config(base), api) as (process, stub):

        async def slots() -> list[str]:
            names = [d["name"] for d in await stored_devices(api)]
            return names if names and names[0].startswith("channel-slot-") else []

        assert await until(slots, "slots") == ["channel-slot-0", "channel-slot-1", "channel-slot-2"]
        assert "ConsumableCapacityUnavailable" in await event_reasons(api)
        assert process.state is not None and process.state.settings.channel_slots == 3

        claim = await api.get(f"{CLAIMS}/rc")
        claim["status"]["allocation"]["devices"]["results"][0]["device"] = "channel-slot-1"
        await api.replace(f"{CLAIMS}/rc/status", claim)
        call = asyncio.create_task(prepare(stub, claim_uid))  # waits within the kubelet's budget
        state = process.state

        async def last_error() -> str:
            rec = state.book.get(claim_uid)
            return rec.last_error if rec is not None else ""

        waiting = await until(last_error, "a recorded wait")
        assert waiting == f"waiting for an IMEX channel for ComputeDomain default/cd in clique {CLIQUE}"
        clique = await api.get(f"{CLIQUES}/{domain_uid}.{CLIQUE}")
        clique["imexChannel"] = 42
        await api.replace(f"{CLIQUES}/{domain_uid}.{CLIQUE}", clique)

        async def daemon_wait() -> bool:
            return "shared IMEX daemon on this node is not ready" in await last_error()

        await until(daemon_wait, "the daemon wait")
        await shared_daemon_pod(api, ready=True)
        done = await asyncio.wait_for(call, 30)
        assert done.error == ""
        assert done.devices[0].cdi_device_ids == [
            f"k8s.compute-domain.nvidia.com/claim={claim_uid}-channel-slot-1"
        ]
        spec = (base / "cdi" / f"k8s.compute-domain.nvidia.com-claim_{claim_uid}.yaml").read_text()
        assert "/dev/nvidia-caps-imex-channels/channel42" in spec and "minor: 42" in spec
        node = await api.get(f"/api/v1/nodes/{NODE}")
        assert "resource.nvidia.com/computeDomain" not in (node["metadata"].get("labels") or {})


async def test_a_bad_channel_on_the_clique_is_named(env: tuple[ApiServer, KubeApi, Path]) -> None:
    """A value the CRD would refuse cannot be written; one the plugin does not hand out (past its
    --imex-channel-count) is refused by name."""
    _, api, base = env
    domain_uid, claim_uid = await seed_claim(api, CLIQUE)
    await use_shared_device(api)
    clique = await api.get(f"{CLIQUES}/{domain_uid}.{CLIQUE}")
    clique["imexChannel"] = 9
    await api.replace(f"{CLIQUES}/{domain_uid}.{CLIQUE}", clique)
    cfg = channel_config(base, channel_count=8, channel_capacity=ChannelCapacity.CONSUMABLE)
    async with serving_plugin(cfg, api) as (process, stub):
        call = asyncio.create_task(prepare(stub, claim_uid))  # retried within the kubelet's budget
        state = process.state
        assert state is not None

        async def refused() -> str:
            rec = state.book.get(claim_uid)
            return rec.last_error if rec is not None else ""

        got = await until(refused, "the refusal")
        name = f"{domain_uid}.{CLIQUE}"
        assert got == f"ComputeDomainClique {name}: imexChannel: must be an IMEX channel 1..7, got '9'"
        await shared_daemon_pod(api, ready=True)
        clique = await api.get(f"{CLIQUES}/{name}")
        clique["imexChannel"] = 7  # the controller's next write mends it: a retry goes through
        await api.replace(f"{CLIQUES}/{name}", clique)
        assert (await asyncio.wait_for(call, 30)).error == ""
