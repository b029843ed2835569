"""The rack as a 1.36 kubelet sees it: every plugin's resource-health stream, a fabric that degrades at run
time, CPU-only nodes that get no plugin (and a plugin started there anyway that stays up and publishes
nothing), and a health stream that fails making the checks fail."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.server import Server

from cdctl._proto import v1alpha1 as health_v1alpha1
from cdctl.plugin.app import PluginProcess
from cdctl.plugin.connections import close_connections, tracking
from cdctl.plugin.pluginconfig import PluginConfig
from cdctl.sim.node.healthwatch import HealthWatch
from cdctl.sim.node.topology import FabricState, NodeDeviceLib
from cdctl.sim.rack.checks import kubelet_problems
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.settings import RackSettings

pytestmark = pytest.mark.integration
DRIVER = "compute-domain.nvidia.com"


@pytest.fixture
def work_dir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="cdhl-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


async def until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(30):
        while True:
            if check():
                return
            await asyncio.sleep(0.05)


async def test_health_streams_cpu_nodes_and_a_degrading_fabric(work_dir: Path) -> None:
    async with Rack(RackSettings(work_dir, nodes_per_rack=2, fabric_probe_s=0.5)) as rack:
        cpu = sorted(rack.topology.cpu_nodes)
        assert cpu and not set(cpu) & set(rack.plugins)  # the chart's placement leaves them out
        assert sorted(rack.plugins) == sorted(rack.topology.nodes)
        gpu_node = sorted(rack.topology.nodes)[0]
        kubelet = rack.cluster.kubelets[gpu_node]
        await until(lambda: kubelet.health.health(DRIVER, gpu_node, "channel-0") == "Healthy")
        assert kubelet.health.health(DRIVER, gpu_node, "daemon-0") == "Healthy"

        rack.set_fabric_state(gpu_node, FabricState.IN_PROGRESS)
        await until(lambda: kubelet.health.health(DRIVER, gpu_node, "channel-0") == "Unhealthy")
        message = kubelet.health.devices[(DRIVER, gpu_node, "channel-0")].message
        assert "fabric state is IN_PROGRESS" in message
        rack.set_fabric_state(gpu_node, FabricState.COMPLETED)
        await until(lambda: kubelet.health.health(DRIVER, gpu_node, "channel-0") == "Healthy")

        # A plugin started on a CPU-only node anyway (placement overridden) stays up and publishes nothing.
        node = cpu[0]
        cfg = PluginConfig(
            node_name=node, namespace=rack.settings.driver_namespace, cdi_root=rack.cdi_root(node),
            registrar_dir=rack.cluster.registry_dir(node),
            plugins_dir=rack.cluster.node_dir(node) / "plugins",
            kubeconfig=str(rack.kubeconfig), kube_api_qps=0, kube_api_burst=0,
            proc_devices=str(rack.cluster.driver_files(node).proc_devices),
            boot_id_path=str(rack.cluster.driver_files(node).boot_id), fabric_reprobe_s=0.2,
        )  # fmt: skip
        stop = asyncio.Event()
        process = PluginProcess(cfg, device_lib=NodeDeviceLib(rack.topology, node))
        task = asyncio.create_task(process.run(stop))
        try:
            cpu_kubelet = rack.cluster.kubelets[node]
            await until(
                lambda: DRIVER in cpu_kubelet.plugins.plugins and bool(cpu_kubelet.health.streams_opened)
            )
            await asyncio.sleep(1.0)  # several probes later
            assert not task.done()
            slices, _ = rack.store.list_objects(rack.store.type_of("resource.k8s.io", "resourceslices"))
            assert [s for s in slices if s["spec"].get("nodeName") == node] == []
            assert not [k for k in cpu_kubelet.health.devices if k[1] == node]
        finally:
            stop.set()
            await task
        assert kubelet_problems(rack) == []


class FailingHealth(health_v1alpha1.DraResourceHealthBase):
    async def node_watch_resources(self, message: health_v1alpha1.NodeWatchResourcesRequest):  # type: ignore[no-untyped-def]
        raise GRPCError(Status.INTERNAL, "health is broken")
        yield health_v1alpha1.NodeWatchResourcesResponse()


async def test_an_error_on_the_health_stream_is_recorded_and_retried(work_dir: Path) -> None:
    server = tracking(Server([FailingHealth()]))
    sock = work_dir / "dra.sock"
    await server.start(path=str(sock))
    watch = HealthWatch("n1", reopen_s=0.1)
    try:
        watch.follow(DRIVER, sock)
        await until(lambda: watch.streams_opened.get(DRIVER, 0) >= 2)  # re-opened after the failure
        assert watch.errors and "health is broken" in watch.errors[0]
    finally:
        await watch.stop()
        server.close()
        await asyncio.wait_for(server.wait_closed(), 30)
        close_connections(server)  # the watch's last connection, cut while it was being made
