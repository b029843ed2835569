"""The simulated cluster in one object: API server, stand-in controllers and one kubelet per GPU node.

`async with SimCluster(work_dir, topology) as cluster:` starts the API server on loopback, the
ResourceClaim-from-template controller, the allocator (scheduler), the DaemonSet controller, and a kubelet for
every node of the fake NVLink topology (each with its own plugin registration and plugin directories under
`work_dir`, short enough for unix socket paths, and its CDI spec directory `cdi_dir(node)`), and the two
parts of the controller manager that act when a node is lost: the node lifecycle controller (a node whose
kubelet's Lease is not renewed for `timings.node_monitor_grace_s` goes Ready=Unknown, tainted, its pods not
Ready) and the pod garbage collector (pods of a node deleted `timings.pod_gc_quarantine_s` ago go); the
kubelets renew their Leases every `timings.lease_renew_s`. `NodeTimings()` are a real cluster's defaults.
Clients connect
with `cluster.write_kubeconfig(path)` or `cluster.url`; a node's kubelet plugin is pointed at
`registry_dir(node)` / `plugin_dir(node)` and given `--fake-nvml <topology.node(node).fake_nvml_spec()>` (or,
in process, `NodeDeviceLib`) and the fake driver files of `driver_files(node)`; `fake_imex_env()` puts the
fake IMEX commands on a PATH. `restart_kubelet(node, while_down)` restarts one node's kubelet, which prepares
its running pods again and checks their CDI devices (cdctl.sim.node.kubelet). CPU-only nodes
(`topology.cpu_nodes`) get a kubelet too, without the GPU labels. Used by `cdctl sim` and the integration
tests.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cdctl.sim.apiserver.lifecycle import StartStop
from cdctl.sim.apiserver.server import ApiServer
from cdctl.sim.apiserver.settings import ServerSettings
from cdctl.sim.controllers.allocator import Allocator
from cdctl.sim.controllers.claimtemplates import ClaimTemplateController
from cdctl.sim.controllers.controllerloop import ControllerLoop
from cdctl.sim.controllers.daemonsets import DaemonSetController
from cdctl.sim.controllers.nodelifecycle import NodeLifecycleController
from cdctl.sim.controllers.podgc import PodGarbageCollector
from cdctl.sim.controllers.tainteviction import TaintEvictionController
from cdctl.sim.node import fakeimex, fakeimexmem
from cdctl.sim.node.fakedriver import DriverFiles, write_driver_files
from cdctl.sim.node.kubelet import SimKubelet
from cdctl.sim.node.noderouter import NodeRouter
from cdctl.sim.node.runtime import ImmediateRuntime, PodRuntime
from cdctl.sim.node.topology import Topology, build_topology

GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
RACK_LABEL = "cdctl.sim/rack"


@dataclass(frozen=True)
class NodeTimings:
    """How fast the cluster notices a lost node; the defaults are a real cluster's."""

    lease_renew_s: float = 10.0  # kubelet: node Lease renewal (0.25 of its 40 s duration)
    node_monitor_period_s: float = 5.0  # node lifecycle controller: how often it looks
    node_monitor_grace_s: float = 40.0  # node lifecycle controller: silence before Ready=Unknown
    pod_gc_quarantine_s: float = 40.0  # pod GC: how long a node must be gone before its pods go
    dra_reconcile_s: float = 60.0  # kubelet DRA manager: unprepare claims of pods gone while it was down


class SimCluster(StartStop):
    def __init__(
        self,
        work_dir: Path,
        topology: Topology | None = None,
        *,
        settings: ServerSettings | None = None,
        runtime: PodRuntime | None = None,
        kubelet_tick_s: float = 0.1,
        timings: NodeTimings | None = None,
    ) -> None:
        self.timings = timings = timings or NodeTimings()
        self.work_dir = work_dir
        self.topology = topology or build_topology(racks=1)
        self.apiserver = ApiServer(settings=settings)
        self.store = self.apiserver.store
        self.runtime = runtime or ImmediateRuntime()
        claim_templates = ClaimTemplateController(self.store)
        allocator = Allocator(self.store)
        daemonsets = DaemonSetController(self.store)
        self.node_lifecycle = NodeLifecycleController(self.store, grace_s=timings.node_monitor_grace_s)
        self.pod_gc = PodGarbageCollector(self.store, quarantine_s=timings.pod_gc_quarantine_s)
        self.taint_eviction = TaintEvictionController(self.store)
        period = timings.node_monitor_period_s
        self.controllers = [
            ControllerLoop("claim-templates", self.store, claim_templates.kinds, claim_templates.reconcile),
            ControllerLoop("allocator", self.store, allocator.kinds, allocator.reconcile),
            ControllerLoop("daemonsets", self.store, daemonsets.kinds, daemonsets.reconcile),
            ControllerLoop("node-lifecycle", self.store, self.node_lifecycle.kinds,
                           self.node_lifecycle.reconcile, resync_s=period),
            ControllerLoop("taint-eviction", self.store, self.taint_eviction.kinds,
                           self.taint_eviction.reconcile, resync_s=period),
            ControllerLoop("pod-gc", self.store, self.pod_gc.kinds, self.pod_gc.reconcile,
                           resync_s=min(period, max(timings.pod_gc_quarantine_s / 4, 0.05))),
        ]  # fmt: skip
        self.kubelets: dict[str, SimKubelet] = {}
        self._driver_files: dict[str, DriverFiles] = {}
        router = NodeRouter(self.store)
        for index, node in enumerate(self.topology.all_nodes().values()):
            labels = {GPU_PRESENT_LABEL: "true", RACK_LABEL: str(node.rack)} if node.has_gpu else {}
            self.kubelets[node.name] = SimKubelet(
                self.store,
                node.name,
                self.registry_dir(node.name),
                node_labels=labels,
                node_ip=f"192.168.{index // 250}.{index % 250 + 1}",
                pod_ip_prefix=f"10.{index // 250}.{index % 250}.",
                runtime=self.runtime,
                tick_s=kubelet_tick_s,
                router=router,
                cdi_dirs=[self.cdi_dir(node.name)],
                lease_renew_s=timings.lease_renew_s,
                dra_reconcile_s=timings.dra_reconcile_s,
            )

    @property
    def url(self) -> str:
        return self.apiserver.url

    def node_dir(self, node: str) -> Path:
        return self.work_dir / node

    def cdi_dir(self, node: str) -> Path:
        """The node's CDI spec directory: where its plugin writes specs and its runtime reads them."""
        return self.node_dir(node) / "cdi"

    def registry_dir(self, node: str) -> Path:
        """The node's kubelet plugin registration directory (`plugins_registry`)."""
        return self.node_dir(node) / "plugins_registry"

    def plugin_dir(self, node: str, driver: str) -> Path:
        """The node's data directory of one plugin (`plugins/<driver>`)."""
        return self.node_dir(node) / "plugins" / driver

    def driver_files(self, node: str) -> DriverFiles:
        """The node's fake `/proc` driver files (written at start) for the plugin's settings."""
        return self._driver_files[node]

    def fake_imex_env(self) -> dict[str, str]:
        """Environment that puts the fake `nvidia-imex` / `nvidia-imex-ctl` first on PATH, with one peer
        registry for the whole cluster (installed at start)."""
        return {
            "PATH": f"{self.work_dir / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            fakeimex.REGISTRY_ENV: str(self.imex_registry_dir),
        }

    @property
    def imex_registry_dir(self) -> Path:
        """The fake IMEX registry of the whole cluster: daemons, which is each node's, exported buffers."""
        return self.work_dir / "imex-registry"

    def write_kubeconfig(self, path: Path) -> Path:
        return self.apiserver.write_kubeconfig(path)

    async def restart_kubelet(self, node: str, while_down: Callable[[], None] | None = None) -> None:
        """Stop the node's kubelet, run `while_down` (delete a CDI spec, say), start it again."""
        await self.kubelets[node].restart(while_down)

    async def start(self) -> None:
        fakeimex.install_executables(self.work_dir / "bin")
        fakeimexmem.install_executable(self.work_dir / "bin")
        fakeimexmem.prepare_registry(self.imex_registry_dir)
        for node in self.topology.all_nodes():
            self.registry_dir(node).mkdir(parents=True, exist_ok=True)
            self._driver_files[node] = write_driver_files(self.node_dir(node) / "driver")
        await self.apiserver.start()
        for kubelet in self.kubelets.values():
            await kubelet.start()
        for controller in self.controllers:
            controller.start()

    async def stop(self) -> None:
        for controller in self.controllers:
            await controller.stop()
        for kubelet in self.kubelets.values():
            await kubelet.stop()
        await self.apiserver.stop()


async def serve_cluster_until_stopped(
    work_dir: Path, topology: Topology, settings: ServerSettings, kubeconfig_out: Path | None
) -> None:
    """Run a SimCluster until SIGTERM or SIGINT (the body of `cdctl sim cluster`)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with SimCluster(work_dir, topology, settings=settings) as cluster:
        if kubeconfig_out is not None:
            cluster.write_kubeconfig(kubeconfig_out)
        print(
            f"simulated cluster listening on {cluster.url}: {len(topology.nodes)} GPU nodes and "
            f"{len(topology.cpu_nodes)} CPU-only node{'' if len(topology.cpu_nodes) == 1 else 's'}, "
            f"plugin registration directories under {work_dir}",
            file=sys.stderr,
            flush=True,
        )
        await stop.wait()
