"""Shared fixtures for the plugin tests: a node environment (paths, fake /proc files) and a device state."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cdctl.api.refs import DomainInfo
from cdctl.k8s.plugincluster import connect, disconnect
from cdctl.k8s.rest import KubeApi
from cdctl.plugin.checkpoint import ClaimBook
from cdctl.plugin.prepare import DeviceState
from cdctl.plugin.preparesettings import FabricStatus, PrepareSettings
from cdctl.sim.apiserver.server import ApiServer
from cdctl.sim.rack.chart import crds
from cdctl.store import InMemoryEventStore
from tests.plugin.fakes import DOM1, FakeCluster, FakeGates, daemon_pod

SIM_NODE = "node-a"
DRIVER_NAMESPACE = "nvidia"
CLIQUE = "6a130f54-faaa-4b8f-847f-be44ab70f917.32766"
PROC_DEVICES = (
    "Character devices:\n195 nvidia\n234 nvidia-caps-imex-channels\n235 nvidia-caps\n\nBlock devices:\n"
)


@dataclass
class Node:
    tmp: Path
    settings: PrepareSettings
    store: InMemoryEventStore
    cluster: FakeCluster
    fabric: FabricStatus
    state: DeviceState
    gates: FakeGates

    async def restart(self) -> DeviceState:
        book = await ClaimBook.load(self.store, self.settings.node)
        self.state = DeviceState(self.settings, book, self.cluster, self.fabric, self.gates)
        return self.state


def node_settings(tmp: Path, host_managed: bool = False) -> PrepareSettings:
    (tmp / "proc").mkdir(exist_ok=True)
    (tmp / "proc" / "devices").write_text(PROC_DEVICES)
    (tmp / "proc" / "fabric-imex-mgmt").write_text("DeviceFileMinor: 9\nDeviceFileMode: 256\n")
    return PrepareSettings(
        node="node-a",
        plugin_dir=tmp / "plugins" / "compute-domain.nvidia.com",
        cdi_root=tmp / "cdi",
        driver_namespace=DRIVER_NAMESPACE,
        proc_devices=str(tmp / "proc" / "devices"),
        fabric_imex_mgmt_cap=str(tmp / "proc" / "fabric-imex-mgmt"),
        host_managed=host_managed,
        fsync=False,
    )


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    store = InMemoryEventStore()
    settings = node_settings(tmp_path)
    cluster = FakeCluster()
    cluster.domains[DOM1] = DomainInfo(DOM1, "cd", "default")
    cluster.add_pod(daemon_pod(DOM1))  # the DaemonSet's pod on this node: what daemon claims belong to
    fabric = FabricStatus(clique_id=CLIQUE)
    book = await ClaimBook.load(store, settings.node)
    gates = FakeGates()
    state = DeviceState(settings, book, cluster, fabric, gates)
    yield Node(tmp_path, settings, store, cluster, fabric, state, gates)
    await store.close()


@pytest.fixture
async def env() -> AsyncIterator[tuple[ApiServer, KubeApi, Path]]:
    base = Path(tempfile.mkdtemp(prefix="cda", dir="/tmp"))
    try:
        async with ApiServer() as server:
            api = await connect(str(server.write_kubeconfig(base / "kubeconfig")), 0, 0)
            try:
                for crd in crds():
                    await api.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
                await api.create(
                    "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": SIM_NODE}}
                )
                yield server, api, base
            finally:
                await disconnect(api)
    finally:
        shutil.rmtree(base, ignore_errors=True)
