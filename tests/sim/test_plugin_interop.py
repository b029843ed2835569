"""The simulated cluster with the real cdctl kubelet plugin: registration through the simulated kubelet,
ResourceSlice publication through the simulated API server, allocation by the CEL allocator, and a daemon
claim prepared over gRPC (CDI IDs back, pod Running) and unprepared when its pod goes."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cdctl.plugin.app import PluginProcess
from cdctl.plugin.pluginconfig import PluginConfig
from cdctl.sim.node.topology import NodeDeviceLib, build_topology
from cdctl.sim.rack.cluster import SimCluster
from tests.sim.fixtures import compute_domain, compute_domain_crd
from tests.sim.standins import DAEMON_CLASS, DRIVER, add_classes

pytestmark = pytest.mark.integration


@pytest.fixture
async def cluster() -> AsyncIterator[SimCluster]:
    root = Path(tempfile.mkdtemp(prefix="cdsim-", dir="/tmp"))
    try:
        async with SimCluster(
            root, build_topology(racks=1, nodes_per_rack=1), kubelet_tick_s=0.05
        ) as running:
            yield running
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _daemon_claim_template(domain_uid: str) -> dict[str, Any]:
    parameters = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainDaemonConfig",
        "domainID": domain_uid,
    }
    return {
        "metadata": {"name": "daemon-claim"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "daemon", "exactly": {"deviceClassName": DAEMON_CLASS}}],
                    "config": [
                        {"requests": ["daemon"], "opaque": {"driver": DRIVER, "parameters": parameters}}
                    ],
                }
            }
        },
    }


async def _until(check: Any) -> None:
    async with asyncio.timeout(30):
        while not check():  # noqa: ASYNC110 - the store has no "changed to this state" event
            await asyncio.sleep(0.05)


async def test_real_plugin_prepares_a_daemon_claim_in_the_simulated_cluster(cluster: SimCluster) -> None:
    store = cluster.store
    node = next(iter(cluster.topology.nodes))
    store.create(store.type_of("apiextensions.k8s.io", "customresourcedefinitions"), "", compute_domain_crd())
    domain = store.create(
        store.type_of("resource.nvidia.com", "computedomains"), "default", compute_domain("cd1")
    )
    add_classes(store, with_config=False)
    files = cluster.driver_files(node)
    config = PluginConfig(
        node_name=node,
        cdi_root=cluster.node_dir(node) / "cdi",
        registrar_dir=cluster.registry_dir(node),
        plugins_dir=cluster.node_dir(node) / "plugins",
        kubeconfig=str(cluster.write_kubeconfig(cluster.node_dir(node) / "kubeconfig")),
        proc_devices=str(files.proc_devices),
        fabric_imex_mgmt_cap=str(files.fabric_imex_mgmt_cap),
        boot_id_path=str(files.boot_id),
    )
    stop = asyncio.Event()
    plugin = asyncio.create_task(PluginProcess(config, NodeDeviceLib(cluster.topology, node)).run(stop))
    kubelet = cluster.kubelets[node]
    pods = store.type_of("", "pods")
    try:
        await _until(lambda: DRIVER in kubelet.plugins.plugins)
        assert kubelet.plugins.plugins[DRIVER].service == "v1.DRAPlugin"
        slices_type = store.type_of("resource.k8s.io", "resourceslices")
        await _until(lambda: store.list_objects(slices_type)[0])
        published = store.list_objects(slices_type)[0][0]["spec"]
        assert (published["nodeName"], sorted(d["name"] for d in published["devices"])) == (
            node,
            ["channel-0", "daemon-0"],
        )
        store.create(
            store.type_of("resource.k8s.io", "resourceclaimtemplates"),
            "default",
            _daemon_claim_template(domain["metadata"]["uid"]),
        )
        pod = store.create(
            pods,
            "default",
            {
                # As the domain's DaemonSet makes it: daemon claims are prepared only for such pods.
                "metadata": {
                    "name": "daemon",
                    "labels": {"resource.nvidia.com/computeDomain": domain["metadata"]["uid"]},
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "DaemonSet",
                            "name": f"computedomain-daemon-{domain['metadata']['uid']}",
                            "uid": "f0000000-0000-4000-8000-000000000001",
                            "controller": True,
                        }
                    ],
                },
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "daemon", "image": "cdctl"}],
                    "resourceClaims": [{"name": "daemon", "resourceClaimTemplateName": "daemon-claim"}],
                },
            },
        )
        await _until(lambda: store.get(pods, "default", "daemon")["status"]["phase"] == "Running")
        devices = kubelet.cdi_devices(pod["metadata"]["uid"])
        assert any(d.startswith(f"k8s.{DRIVER}/claim=") and d.endswith("-daemon-0") for d in devices)
        store.delete(pods, "default", "daemon")
        await _until(lambda: kubelet.unprepare_calls)
        assert kubelet.unprepare_calls[0][2] == kubelet.prepare_calls[-1][2]
        assert kubelet.last_errors == {}
    finally:
        stop.set()
        await plugin
