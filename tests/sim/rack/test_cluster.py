"""The whole simulated cluster through the real client: a DaemonSet's pods with template claims, allocated,
prepared by a plugin over gRPC, and Running/Ready; deleting the DaemonSet unprepares them."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from cdctl.sim.apiserver.settings import ServerSettings
from cdctl.sim.node.topology import build_topology
from cdctl.sim.rack.cluster import GPU_PRESENT_LABEL, SimCluster
from tests.sim.fakeplugin import serve_plugin
from tests.sim.standins import DAEMON_CLASS, DRIVER, add_classes, add_slice

NAMESPACE = "default"


@pytest.fixture
async def cluster() -> AsyncIterator[SimCluster]:
    root = Path(tempfile.mkdtemp(prefix="cdsim-", dir="/tmp"))
    topology = build_topology(racks=1, nodes_per_rack=2)
    try:
        async with SimCluster(root, topology, settings=ServerSettings(), kubelet_tick_s=0.05) as running:
            yield running
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _wait_for(check: Any, what: str) -> None:
    async with asyncio.timeout(30):
        while not await check():  # noqa: ASYNC110 - polls the API like a test client would
            await asyncio.sleep(0.05)


async def test_daemonset_pods_get_devices_prepared_and_run(cluster: SimCluster, tmp_path: Path) -> None:
    add_classes(cluster.store)
    nodes = list(cluster.topology.nodes)
    api = await config.new_client_from_config(
        config_file=str(cluster.write_kubeconfig(tmp_path / "kubeconfig"))
    )
    async with (
        api,
        serve_plugin(
            cluster.registry_dir(nodes[0]), cluster.plugin_dir(nodes[0], DRIVER), DRIVER, ["v1.DRAPlugin"]
        ) as plugin_log,
    ):
        for node in nodes:
            add_slice(cluster.store, node)
        resource = client.ResourceV1Api(api)
        await resource.create_namespaced_resource_claim_template(
            NAMESPACE,
            {
                "metadata": {"name": "daemon-claim"},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [{"name": "daemon", "exactly": {"deviceClassName": DAEMON_CLASS}}]
                        }
                    }
                },
            },
        )
        apps = client.AppsV1Api(api)
        await apps.create_namespaced_daemon_set(
            NAMESPACE,
            {
                "metadata": {"name": "imex"},
                "spec": {
                    "selector": {"matchLabels": {"app": "imex"}},
                    "template": {
                        "metadata": {"labels": {"app": "imex"}},
                        "spec": {
                            "nodeSelector": {GPU_PRESENT_LABEL: "true"},
                            "containers": [
                                {"name": "daemon", "image": "cdctl", "resources": {"claims": [{"name": "d"}]}}
                            ],
                            "resourceClaims": [{"name": "d", "resourceClaimTemplateName": "daemon-claim"}],
                        },
                    },
                },
            },
        )
        core = client.CoreV1Api(api)

        async def pod_on_first_node_runs() -> bool:
            pods = await core.list_namespaced_pod(NAMESPACE, field_selector=f"spec.nodeName={nodes[0]}")
            return bool(pods.items) and pods.items[0].status.phase == "Running"

        await _wait_for(pod_on_first_node_runs, "the pod on the node with a plugin to run")
        pods = await core.list_namespaced_pod(NAMESPACE, label_selector="app=imex")
        by_node = {p.spec.node_name: p for p in pods.items}
        assert sorted(by_node) == nodes
        assert by_node[nodes[1]].status.phase == "Pending", "no plugin registered on the second node"
        ready = {c.type: c.status for c in by_node[nodes[0]].status.conditions}
        assert ready["Ready"] == "True"
        assert len(plugin_log.prepared) == 1
        kubelet = cluster.kubelets[nodes[0]]
        assert kubelet.cdi_devices(by_node[nodes[0]].metadata.uid)[0].startswith(f"k8s.{DRIVER}/claim=")
        status = (await apps.read_namespaced_daemon_set("imex", NAMESPACE)).status
        assert status.desired_number_scheduled == 2

        await apps.delete_namespaced_daemon_set("imex", NAMESPACE)

        async def unprepared() -> bool:
            return bool(plugin_log.unprepared)

        await _wait_for(unprepared, "the daemon claim to be unprepared")
        assert plugin_log.unprepared[0][1] == plugin_log.prepared[0][1]

        async def one_claim_left() -> bool:
            return len((await resource.list_namespaced_resource_claim(NAMESPACE)).items) == 1

        await _wait_for(one_claim_left, "the claim of the pod that ran to be collected")
        # The other node's pod stays Terminating, as a real kubelet leaves it: its DRA manager must call
        # NodeUnprepareResources on the claim's driver, which is not registered there.
        stuck = (await core.read_namespaced_pod(by_node[nodes[1]].metadata.name, NAMESPACE)).metadata
        assert stuck.deletion_timestamp is not None
        assert "not registered" in cluster.kubelets[nodes[1]].last_errors[stuck.uid]


async def test_fake_imex_commands_are_on_the_cluster_path(cluster: SimCluster) -> None:
    env = cluster.fake_imex_env()
    process = await asyncio.create_subprocess_exec(
        "nvidia-imex-ctl",
        "-c",
        "/nonexistent.cfg",
        "-q",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(30):
        _, error = await process.communicate()
    assert process.returncode == 2
    assert b"cannot read IMEX config /nonexistent.cfg" in error
