"""The simulated rack end to end: controller, kubelet plugins and `cdctl daemon run` pods with the fake IMEX.

A two-node domain whose nodes carry its label (what a channel prepare does; the simulated kubelet prepares one
pod at a time, so a workload waiting for its daemon would hold up the daemon's own start): the DaemonSet puts
a daemon pod on each node, the plugin prepares its claim, the simulated runtime runs `cdctl daemon run` with
the claim's CDI env and probes it with `cdctl daemon check`, the controller lists both daemons in the clique.
Both daemons reach READY together (each needs the other up), the domain turns Ready, and workload pods with
channel claims then start on both nodes.
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
from cdctl.domain.imex import hosts_mapping
from cdctl.plugin.app import PluginProcess
from cdctl.plugin.pluginconfig import PluginConfig
from cdctl.sim.node.fakeimex import HOSTS_ENV
from cdctl.sim.node.processruntime import ProcessRuntime
from cdctl.sim.node.topology import NodeDeviceLib, build_topology
from cdctl.sim.rack.chart import cluster_bootstrap_objects, daemon_service_accounts
from cdctl.sim.rack.cluster import SimCluster
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
        await asyncio.wait_for(runtime.stop_all(), 60)
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
    for account in daemon_service_accounts(DRIVER_NAMESPACE):  # what `helm install` creates for the daemons
        rack.store.create(rack.store.type_of("", "serviceaccounts"), DRIVER_NAMESPACE, account)
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
        nodes = rack.store.type_of("", "nodes")
        for node in rack.topology.nodes:  # what the plugin does on a channel prepare, done ahead here
            current = rack.store.get(nodes, "", node)
            current["metadata"].setdefault("labels", {})[LABEL_COMPUTE_DOMAIN] = uid
            rack.store.update(nodes, "", node, current)

        def daemon_pods() -> list[dict[str, Any]]:
            return [p for p in rack.store.list_objects(pods, DRIVER_NAMESPACE)[0] if _is_daemon_pod(p)]

        def ready(pod: dict[str, Any]) -> bool:
            conditions = (pod.get("status") or {}).get("conditions") or []
            return {c["type"]: c["status"] for c in conditions}.get("Ready") == "True"

        await eventually(lambda: len(daemon_pods()) == NODES and all(map(ready, daemon_pods())), timeout_s=90)
        daemons = daemon_pods()
        assert sorted(p["spec"]["nodeName"] for p in daemons) == sorted(rack.topology.nodes)
        ips = sorted(p["status"]["podIP"] for p in daemons)
        for pod in daemons:
            imexd = rack.plugin_dir(pod["spec"]["nodeName"], DRIVER_NAME) / "domains" / uid
            assert (imexd / "nodes.cfg").read_text().splitlines() == [
                "compute-domain-daemon-0000",
                "compute-domain-daemon-0001",
            ]
            assert sorted(hosts_mapping((imexd / "hosts").read_text()).values()) == ips

        domains = rack.store.type_of("resource.nvidia.com", "computedomains")
        await eventually(
            lambda: (rack.store.get(domains, "default", "cd1").get("status") or {}).get("status") == "Ready"
        )
        for index, node in enumerate(rack.topology.nodes):
            _create(rack, _workload(f"worker-{index}", node), "default")

        def phase(name: str) -> str:
            return str((rack.store.get(pods, "default", name).get("status") or {}).get("phase", ""))

        await eventually(lambda: all(phase(f"worker-{i}") == "Running" for i in range(NODES)))
    finally:
        stop.set()
        controller.cancel()
        async with asyncio.timeout(30):
            await asyncio.gather(controller, *plugins, return_exceptions=True)
