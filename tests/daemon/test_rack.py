"""The simulated rack end to end: controller, kubelet plugins and `cdctl daemon run` pods with the fake IMEX.

A two-node domain: the workload pods' channel claims make the plugins label the nodes, the DaemonSet puts a
daemon pod on each, the simulated runtime runs `cdctl daemon run` with the CDI env of the daemon claim and
probes it with `cdctl daemon check`, the controller lists both daemons in the clique, and the workloads start
only once their node's daemon is Ready. Both daemons reach READY together (each needs the other up).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cdctl.api.gates import parse_feature_gates
from cdctl.controller.app import run_controller
from cdctl.controller.settings import ControllerSettings
from cdctl.domain.computedomains import DRIVER_NAME, LABEL_COMPUTE_DOMAIN
from cdctl.plugin.app import PluginConfig, PluginProcess
from cdctl.sim.chart import cluster_bootstrap_objects
from cdctl.sim.cluster import SimCluster
from cdctl.sim.fakeimex import HOSTS_ENV
from cdctl.sim.processruntime import ProcessRuntime
from cdctl.sim.topology import NodeDeviceLib, build_topology
from tests.daemon.conftest import eventually

pytestmark = pytest.mark.integration
DRIVER_NAMESPACE = "nvidia-dra"
NODES = 2


class DaemonPodRuntime(ProcessRuntime):
    """Runs daemon pods only; gives each the paths its container would have through the CDI mount."""

    def __init__(self, cluster_dir: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cluster_dir = cluster_dir

    async def _spawn(self, pod: dict[str, Any], env: dict[str, str]) -> asyncio.subprocess.Process:
        node = pod["spec"]["nodeName"]
        domain = pod["metadata"]["labels"][LABEL_COMPUTE_DOMAIN]
        imexd = self.cluster_dir / node / "plugins" / DRIVER_NAME / "domains" / domain
        hosts = imexd / "hosts"
        if not hosts.exists():
            hosts.write_text(f"127.0.0.1\tlocalhost\n{env.get('POD_IP', '')}\t{pod['metadata']['name']}\n")
        # The same dict is the probes' environment, so `cdctl daemon check` finds the same files.
        env.update({"IMEXD_DIR": str(imexd), "HOSTS_FILE": str(hosts), HOSTS_ENV: str(hosts)})
        env.pop("CDCTL_DB", None)
        return await super()._spawn(pod, env)


def _is_daemon_pod(pod: dict[str, Any]) -> bool:
    return pod["metadata"].get("namespace") == DRIVER_NAMESPACE and LABEL_COMPUTE_DOMAIN in (
        pod["metadata"].get("labels") or {}
    )


def _create(cluster: SimCluster, obj: dict[str, Any], namespace: str = "") -> dict[str, Any]:
    group = obj["apiVersion"].rpartition("/")[0]
    plural = {"CustomResourceDefinition": "customresourcedefinitions", "DeviceClass": "deviceclasses"}.get(
        obj["kind"], obj["kind"].lower() + "s"
    )
    return cluster.store.create(cluster.store.type_of(group, plural), namespace, obj)


@pytest.fixture
async def rack() -> AsyncIterator[SimCluster]:
    root = Path(tempfile.mkdtemp(prefix="cdrack-", dir="/tmp"))
    base_env = dict(os.environ)
    runtime = DaemonPodRuntime(
        root,
        selects=_is_daemon_pod,
        cdi_dirs=lambda node: [root / node / "cdi"],
        log_dir=root / "logs",
        base_env=base_env,
        probe_period_s=0.5,
    )
    cluster = SimCluster(root, build_topology(racks=1, nodes_per_rack=NODES), runtime=runtime)
    imex_env = cluster.fake_imex_env()
    base_env.update(imex_env)
    base_env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{imex_env['PATH']}"
    base_env["KUBECONFIG"] = str(root / "kubeconfig")
    try:
        async with cluster:
            cluster.write_kubeconfig(root / "kubeconfig")
            yield cluster
            for running in list(runtime.running.values()):
                if running.process.returncode is None:
                    running.process.terminate()
                await running.process.wait()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _workload(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "workload"}],
            "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": "cd1-channel"}],
        },
    }


async def test_the_daemons_of_one_domain_reach_ready_together(rack: SimCluster) -> None:
    for obj in cluster_bootstrap_objects():
        _create(rack, obj)
    for namespace in (DRIVER_NAMESPACE, "default"):
        with contextlib.suppress(Exception):
            rack.store.create(rack.store.type_of("", "namespaces"), "", {"metadata": {"name": namespace}})
    kubeconfig = str(rack.work_dir / "kubeconfig")
    gates = parse_feature_gates("")
    controller_settings = ControllerSettings(
        pod_name="controller-0",
        image_name="cdctl:test",
        log_verbosity_cd_daemon=4,
        namespace=DRIVER_NAMESPACE,
        max_nodes_per_imex_domain=NODES,
        feature_gates=gates,
        kubeconfig=kubeconfig,
    )
    stop = asyncio.Event()
    controller = asyncio.create_task(run_controller(controller_settings))
    plugins = []
    for node in rack.topology.nodes:
        files = rack.driver_files(node)
        config = PluginConfig(
            node_name=node,
            namespace=DRIVER_NAMESPACE,
            cdi_root=rack.node_dir(node) / "cdi",
            registrar_dir=rack.registry_dir(node),
            plugins_dir=rack.node_dir(node) / "plugins",
            kubeconfig=kubeconfig,
            gates=gates,
            proc_devices=str(files.proc_devices),
            fabric_imex_mgmt_cap=str(files.fabric_imex_mgmt_cap),
            boot_id_path=str(files.boot_id),
        )
        plugins.append(
            asyncio.create_task(PluginProcess(config, NodeDeviceLib(rack.topology, node)).run(stop))
        )
    pods = rack.store.type_of("", "pods")
    try:
        domain = {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomain",
            "metadata": {"name": "cd1"},
            "spec": {"numNodes": NODES, "channel": {"resourceClaimTemplate": {"name": "cd1-channel"}}},
        }
        uid = _create(rack, domain, "default")["metadata"]["uid"]
        for index, node in enumerate(rack.topology.nodes):
            _create(rack, _workload(f"worker-{index}", node), "default")

        def phase(name: str) -> str:
            return str((rack.store.get(pods, "default", name).get("status") or {}).get("phase", ""))

        await eventually(lambda: all(phase(f"worker-{i}") == "Running" for i in range(NODES)), timeout_s=90)
        daemons = [p for p in rack.store.list_objects(pods, DRIVER_NAMESPACE)[0] if _is_daemon_pod(p)]
        assert sorted(p["spec"]["nodeName"] for p in daemons) == sorted(rack.topology.nodes)
        for pod in daemons:
            conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions") or []}
            assert conditions.get("Ready") == "True", "the daemon's probe (cdctl daemon check) passed"
            imexd = rack.plugin_dir(pod["spec"]["nodeName"], DRIVER_NAME) / "domains" / uid
            assert (imexd / "nodes.cfg").read_text().splitlines() == [
                "compute-domain-daemon-0000",
                "compute-domain-daemon-0001",
            ]
            ips = sorted(p["status"]["podIP"] for p in daemons)
            mapped = [line.split("\t")[0] for line in (imexd / "hosts").read_text().splitlines()[-NODES:]]
            assert sorted(mapped) == ips, "each daemon maps both slots to the two daemons' pod IPs"
    finally:
        stop.set()
        controller.cancel()
        async with asyncio.timeout(30):
            await asyncio.gather(controller, *plugins, return_exceptions=True)
