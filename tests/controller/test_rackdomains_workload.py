"""End to end on the simulated cluster: a rack of 18 GB200 nodes joins, its domain and template appear, and a
workload shaped like the seed's MPIJob workers (18 pods, 4 GPUs each, required pod affinity on the rack label,
the claim from `imex-channel-<rack>`) lands on the rack and gets channel 0 on all 18 nodes through the real
kubelet plugin of each node. A second rack gets its own domain. While the workload runs, the rack leaving
keeps its domain (with an Event); once the workload is gone, the domain goes. In driver-managed mode and under
HostManagedIMEX (no daemons: the host's IMEX serves the channel).

The simulated kubelets run pods with the immediate runtime, so what `cdctl daemon run` does for its own pod
(label it with its node's clique) is done here by `stand_in_for_daemons`; everything else is the real
controller, the real plugins and the simulated API server, scheduler and DaemonSet controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cdctl.api.gates import HOST_MANAGED_IMEX, FeatureGates, parse_feature_gates
from cdctl.api.imexgate import GateKeeper
from cdctl.controller.app import run_controller
from cdctl.controller.manager import ControllerManager
from cdctl.controller.settings import ControllerSettings
from cdctl.domain.computedomains import DRIVER_NAME, LABEL_CLIQUE_ID, LABEL_COMPUTE_DOMAIN
from cdctl.domain.racks import rack_domain_name
from cdctl.plugin.app import PluginProcess
from cdctl.plugin.daemonclaims import DOMAINS_DIR
from cdctl.plugin.pluginconfig import PluginConfig
from cdctl.sim.node.topology import NodeDeviceLib, Topology, build_topology
from cdctl.sim.rack.chart import cluster_bootstrap_objects, daemon_service_accounts
from cdctl.sim.rack.cluster import SimCluster
from cdctl.store.memory import InMemoryEventStore
from tests.controller.harness import DRIVER_NAMESPACE, USER_NAMESPACE, eventually

pytestmark = pytest.mark.integration

CLIQUE_LABEL = "nvidia.com/gpu.clique"
GPU = "nvidia.com/gpu"
WORKERS = 18
GIVE_UP_S = 90.0
PLURALS = {"CustomResourceDefinition": "customresourcedefinitions", "DeviceClass": "deviceclasses"}


@pytest.fixture(params=["driver-managed", "host-managed"])
def gates(request: pytest.FixtureRequest) -> FeatureGates:
    return parse_feature_gates("HostManagedIMEX=true" if request.param == "host-managed" else "")


@pytest.fixture
async def sim(gates: FeatureGates) -> AsyncIterator[SimCluster]:
    root = Path(tempfile.mkdtemp(prefix="cdrack-", dir="/tmp"))  # short paths for the unix sockets
    values = {"featureGates": {"HostManagedIMEX": gates.enabled(HOST_MANAGED_IMEX)}}
    try:
        async with SimCluster(root, build_topology(racks=2), kubelet_tick_s=0.05) as cluster:
            store = cluster.store
            for obj in cluster_bootstrap_objects(values):
                store.create(
                    store.type_of(obj["apiVersion"].rpartition("/")[0], PLURALS[obj["kind"]]), "", obj
                )
            for namespace in (DRIVER_NAMESPACE, USER_NAMESPACE):
                store.create(store.type_of("", "namespaces"), "", {"metadata": {"name": namespace}})
            for account in daemon_service_accounts(DRIVER_NAMESPACE, values):  # as `helm install` does
                store.create(store.type_of("", "serviceaccounts"), DRIVER_NAMESPACE, account)
            yield cluster
    finally:
        shutil.rmtree(root, ignore_errors=True)


def rack_joins(cluster: SimCluster, rack: int) -> str:
    """What GPU Feature Discovery and the device plugin publish on a rack's nodes; returns its clique ID."""
    nodes = cluster.store.type_of("", "nodes")
    for fake in cluster.topology.rack(rack):
        node = cluster.store.get(nodes, "", fake.name)
        node["metadata"].setdefault("labels", {})[CLIQUE_LABEL] = fake.clique_id
        node = cluster.store.update(nodes, "", fake.name, node)
        gpus = {GPU: str(len(fake.gpu_uuids))}
        node["status"] = {**(node.get("status") or {}), "capacity": gpus, "allocatable": dict(gpus)}
        cluster.store.update(nodes, "", fake.name, node, subresource="status")
    return cluster.topology.rack(rack)[0].clique_id


def rack_leaves(cluster: SimCluster, rack: int) -> None:
    nodes = cluster.store.type_of("", "nodes")
    for fake in cluster.topology.rack(rack):
        node = cluster.store.get(nodes, "", fake.name)
        node["metadata"]["labels"].pop(CLIQUE_LABEL, None)
        cluster.store.update(nodes, "", fake.name, node)


def mpi_worker(index: int, app: str, template: str) -> dict[str, Any]:
    """One worker pod of the seed's MPIJob (what the MPI operator creates from `mpiReplicaSpecs.Worker`)."""
    same_rack = {
        "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": [app]}]},
        "topologyKey": CLIQUE_LABEL,
    }
    return {
        "metadata": {"name": f"{app}-{index}", "namespace": USER_NAMESPACE, "labels": {"app": app}},
        "spec": {
            "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [same_rack]}},
            "containers": [
                {
                    "name": "nccl",
                    "image": "ghcr.io/nvidia/k8s-samples:nvbandwidth-v0.7-8d103163",
                    "resources": {
                        "requests": {GPU: "4"},
                        "limits": {GPU: "4"},
                        "claims": [{"name": "imex-channel-0"}],
                    },
                }
            ],
            "resourceClaims": [{"name": "imex-channel-0", "resourceClaimTemplateName": template}],
        },
    }


async def stand_in_for_daemons(cluster: SimCluster, topology: Topology) -> None:
    """Label each daemon pod with its node's clique, as `cdctl daemon run` does at start, and open the
    handover gate in its domain directory once the plugin made it, as the daemon does when IMEX is READY."""
    pods = cluster.store.type_of("", "pods")
    gates: dict[Path, GateKeeper] = {}
    try:
        while True:
            items, _ = cluster.store.list_objects(pods, DRIVER_NAMESPACE)
            for pod in items:
                labels = pod["metadata"].get("labels") or {}
                node = (pod.get("spec") or {}).get("nodeName")
                if LABEL_COMPUTE_DOMAIN in labels and node and LABEL_CLIQUE_ID not in labels:
                    with contextlib.suppress(Exception):  # a concurrent write: the next pass retries
                        labels[LABEL_CLIQUE_ID] = topology.node(node).clique_id
                        cluster.store.update(pods, DRIVER_NAMESPACE, pod["metadata"]["name"], pod)
                if LABEL_COMPUTE_DOMAIN in labels and node:
                    imexd = cluster.node_dir(node) / "plugins" / DRIVER_NAME / DOMAINS_DIR
                    imexd = imexd / labels[LABEL_COMPUTE_DOMAIN]
                    if imexd.is_dir() and imexd not in gates:
                        gates[imexd] = GateKeeper(imexd)
                        gates[imexd].open()
            await asyncio.sleep(0.1)
    finally:
        for gate in gates.values():
            gate.close()


def plugin_config(cluster: SimCluster, node: str, kubeconfig: Path, gates: FeatureGates) -> PluginConfig:
    files = cluster.driver_files(node)
    return PluginConfig(
        node_name=node,
        namespace=DRIVER_NAMESPACE,
        cdi_root=cluster.node_dir(node) / "cdi",
        registrar_dir=cluster.registry_dir(node),
        plugins_dir=cluster.node_dir(node) / "plugins",
        kubeconfig=str(kubeconfig),
        kube_api_qps=0,
        proc_devices=str(files.proc_devices),
        fabric_imex_mgmt_cap=str(files.fabric_imex_mgmt_cap),
        boot_id_path=str(files.boot_id),
        gates=gates,
    )


async def test_a_rack_joins_and_an_mpijob_shaped_workload_gets_channel_0_on_all_18_nodes(
    sim: SimCluster, gates: FeatureGates
) -> None:
    store, topology = sim.store, sim.topology
    kubeconfig = sim.write_kubeconfig(sim.work_dir / "kubeconfig")
    log = InMemoryEventStore()
    settings = ControllerSettings(
        pod_name="controller-0",
        image_name="example.com/cdctl:test",
        log_verbosity_cd_daemon=4,
        namespace=DRIVER_NAMESPACE,
        kubeconfig=str(kubeconfig),
        kube_api_qps=0.0,
        watch_timeout_s=30,
        cleanup_interval_s=3600.0,
        rack_domains=True,
        rack_domain_namespace=USER_NAMESPACE,
        feature_gates=gates,
    )
    started: list[ControllerManager] = []
    stop = asyncio.Event()
    rack0 = [fake.name for fake in topology.rack(0)]
    cancelled = [
        asyncio.create_task(run_controller(settings, started=started, store=log)),
        asyncio.create_task(stand_in_for_daemons(sim, topology)),
    ]
    plugins = [
        asyncio.create_task(
            PluginProcess(plugin_config(sim, node, kubeconfig, gates), NodeDeviceLib(topology, node)).run(
                stop
            )
        )
        for node in rack0
    ]
    kind = store.type_of
    try:
        await eventually(
            lambda: all(DRIVER_NAME in sim.kubelets[n].plugins.plugins for n in rack0), give_up_s=GIVE_UP_S
        )
        await eventually(lambda: started and started[0].synced.is_set(), give_up_s=GIVE_UP_S)

        clique0 = rack_joins(sim, 0)
        name0 = rack_domain_name(clique0)
        template0 = f"imex-channel-{name0}"
        domain = await eventually(
            lambda: _get(sim, "resource.nvidia.com", "computedomains", name0), give_up_s=GIVE_UP_S
        )
        assert domain["spec"]["numNodes"] == 0 and domain["spec"]["channel"]["allocationMode"] == "Single"
        await eventually(
            lambda: _get(sim, "resource.k8s.io", "resourceclaimtemplates", template0), give_up_s=GIVE_UP_S
        )

        clique1 = rack_joins(sim, 1)
        name1 = rack_domain_name(clique1)
        assert name1 != name0
        await eventually(
            lambda: _get(sim, "resource.k8s.io", "resourceclaimtemplates", f"imex-channel-{name1}"),
            give_up_s=GIVE_UP_S,
        )

        app = "nvbandwidth-test-worker"
        for index in range(WORKERS):
            store.create(kind("", "pods"), USER_NAMESPACE, mpi_worker(index, app, template0))

        def running() -> list[dict[str, Any]]:
            items, _ = store.list_objects(kind("", "pods"), USER_NAMESPACE)
            return [p for p in items if (p.get("status") or {}).get("phase") == "Running"]

        await eventually(lambda: len(running()) == WORKERS, give_up_s=GIVE_UP_S)
        workers = running()
        assert sorted(p["spec"]["nodeName"] for p in workers) == sorted(rack0)  # one per node, all on rack 0
        for pod in workers:
            devices = sim.kubelets[pod["spec"]["nodeName"]].cdi_devices(pod["metadata"]["uid"])
            assert any(
                d.startswith(f"k8s.{DRIVER_NAME}/claim=") and d.endswith("-channel-0") for d in devices
            ), devices
        claims, _ = store.list_objects(kind("resource.k8s.io", "resourceclaims"), USER_NAMESPACE)
        results = [c["status"]["allocation"]["devices"]["results"][0] for c in claims]
        assert sorted((r["pool"], r["device"]) for r in results) == sorted((n, "channel-0") for n in rack0)

        # The rack leaves while the workload holds its claims: the domain stays and says why.
        rack_leaves(sim, 0)
        await eventually(lambda: _events(sim, name0, "RackDomainInUse"), give_up_s=GIVE_UP_S)
        assert _get(sim, "resource.nvidia.com", "computedomains", name0) is not None
        for pod in workers:
            store.delete(kind("", "pods"), USER_NAMESPACE, pod["metadata"]["name"])
        await eventually(
            lambda: _get(sim, "resource.nvidia.com", "computedomains", name0) is None, give_up_s=GIVE_UP_S
        )
        assert _get(sim, "resource.nvidia.com", "computedomains", name1) is not None
        kinds = [e.type for e in await log.read_all() if e.stream == f"rack/{name0}"]
        assert kinds == ["RackDomainCreated", "RackDomainKept", "RackDomainDeleted"]
    finally:
        stop.set()
        for task in cancelled:
            task.cancel()
        await asyncio.gather(*cancelled, return_exceptions=True)
        stopped = await asyncio.gather(*plugins, return_exceptions=True)
    assert not [r for r in stopped if isinstance(r, BaseException)]


def _get(cluster: SimCluster, group: str, plural: str, name: str) -> dict[str, Any] | None:
    try:
        return cluster.store.get(cluster.store.type_of(group, plural), USER_NAMESPACE, name)
    except Exception:  # the store's NotFound
        return None


def _events(cluster: SimCluster, name: str, reason: str) -> list[dict[str, Any]]:
    items, _ = cluster.store.list_objects(cluster.store.type_of("", "events"), USER_NAMESPACE)
    return [e for e in items if e["involvedObject"]["name"] == name and e["reason"] == reason]
