"""The simulated GB200 rack with the real components, each in its own process: what `cdctl sim rack` runs.

`async with Rack(RackSettings(...)) as rack:` starts, in this order:
1. the simulated cluster (cdctl.sim.rack.cluster: API server, claim-template controller, scheduler/allocator,
   DaemonSet controller, one simulated kubelet per node) plus the Job controller stand-in
   (cdctl.sim.controllers.jobs);
2. the chart's CRDs and DeviceClasses (cdctl.sim.rack.chart, with the mode's HostManagedIMEX gate), the driver
   namespace with the daemons' ServiceAccount (driver-managed mode), and on every node what GPU Feature
   Discovery and the device plugin would add: the
   `nvidia.com/gpu.clique` label (from the fake NVLink topology) and 4 allocatable `nvidia.com/gpu`;
3. `cdctl controller` (`controller_replicas` of them, under leader election when more than one, each with its
   own event log) and one `cdctl kubelet-plugin` on each node where the chart's placement
   (`kubeletPlugin` nodeSelector, affinity, tolerations) would run its DaemonSet's pod: the GPU nodes, not the
   CPU-only ones. Each is a child process with its own event log, sockets and CDI root under the node's
   directory (cdctl.sim.rack.components), and reads its fake NVML from a spec file the rack rewrites when a
   test changes the node's fabric (`set_fabric_state`). Each has its pod as an API object, created first
   (cdctl.sim.rack.componentpods): its service-account token is bound to it, and its HTTP server (metrics and
   the event log `cdctl collect` reads) is reached through the pod proxy at the pod's IP and the chart's port;
4. in driver-managed mode the daemon pods the controller's DaemonSets create are run by the simulated
   container runtime as `cdctl daemon run` processes, probed with `cdctl daemon check`
   (cdctl.sim.node.daemonruntime); host-managed mode runs none (the host's IMEX stands in). These `cdctl`
   processes start from a fork server that has imported cdctl once (cdctl.sim.node.forkserver), and the
   daemons' probes from a second, small one that imported only `cdctl daemon check`, unless
   `fork_server=False`: each is still its own process, without a second of imports apiece. The daemon pods are
   probed as their spec says (its startupProbe, then at once and every period its readinessProbe:
   `probe_period_s=None`). Host-managed mode runs the host's own `nvidia-imex` on every GPU node instead
   (cdctl.sim.node.hostimex: its node list the clique's node addresses, one IMEX domain per clique);
5. where the settings run workers (channel isolation), the worker pods too, as containers that see the device
   nodes their CDI edits gave them and their node (cdctl.sim.node.processruntime, `exec_in`).
It returns once every plugin has registered with its kubelet and published its ResourceSlice. A component can
be started again alone (`launch_controller`, `launch_plugin`), as its StatefulSet or DaemonSet and the kubelet
would after it died (cdctl.sim.rack.faults); `label_gpu_node` labels a node registered anew. Leaving the block
stops the children with SIGTERM (the daemons first), then the cluster. Used by cdctl.sim.rack.scenario, the
integration tests and bench/formation.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from cdctl.domain.computedomains import DRIVER_NAME
from cdctl.sim.apiserver.errors import AlreadyExists
from cdctl.sim.apiserver.identity import service_account_token
from cdctl.sim.apiserver.settings import ServerSettings
from cdctl.sim.controllers.controllerloop import ControllerLoop
from cdctl.sim.controllers.jobs import JobController, serve_jobs
from cdctl.sim.controllers.nodematch import pod_fits_node
from cdctl.sim.node import fakeimexmem
from cdctl.sim.node.daemonruntime import DaemonPodRuntime
from cdctl.sim.node.forkserver import ForkServer
from cdctl.sim.node.hostimex import HostImex
from cdctl.sim.node.topology import GPUS_PER_NODE, FabricState, build_topology
from cdctl.sim.rack.chart import (
    CHART_NAME,
    admission_policies,
    cluster_bootstrap_objects,
    collector_service_account,
    daemon_service_accounts,
    http_ports,
    plugin_placement,
    shared_daemon_objects,
)
from cdctl.sim.rack.cluster import SimCluster
from cdctl.sim.rack.componentpods import LOCAL_HOST, ComponentPods
from cdctl.sim.rack.components import CONTROLLER_POD, Component, controller_command, plugin_command
from cdctl.sim.rack.settings import MODES, RackSettings

CLIQUE_LABEL = "nvidia.com/gpu.clique"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT = "NVIDIA-GB200"
KUBELET_TICK_S = 0.1
NODES_PER_KUBELET_TICK_S = 180  # 18 nodes: 0.1 s; 144 nodes: 0.8 s
JOBS_RESYNC_S = 1.0  # the Job stand-in's resync: a failed worker's replacement comes due on its own
# What the rack's processes import, loaded once by the fork server.
FORK_SERVER_PRELOAD = [
    "cdctl.cli.main", "cdctl.cli.controller", "cdctl.cli.plugin", "cdctl.cli.daemon",
    "cdctl.controller.app", "cdctl.plugin.app", "cdctl.daemon.app",
    # imported lazily on first use, which every process reaches: SQLAlchemy loads its dialect at the first
    # create_engine, betterproto2 touches pydantic.dataclasses at the first message it encodes or parses
    "sqlalchemy.dialects.sqlite.aiosqlite", "pydantic.dataclasses",
]  # fmt: skip
# What the daemons' probes (`cdctl daemon check`) import: a fork of this small server costs half as much.
PROBE_SERVER_PRELOAD = ["cdctl.cli.main", "cdctl.cli.daemon"]
_PLURALS = {
    "CustomResourceDefinition": "customresourcedefinitions",
    "DeviceClass": "deviceclasses",
    "ServiceAccount": "serviceaccounts",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "DaemonSet": "daemonsets",
}


class RackStartError(Exception):
    """A component did not come up (it exited, or did not register in time)."""


@dataclass
class StartTimings:
    cluster_s: float = 0.0
    components_s: float = 0.0  # processes launched -> every plugin registered with a ResourceSlice
    per_step: dict[str, float] = field(default_factory=dict)


class Rack:
    def __init__(self, settings: RackSettings) -> None:
        if settings.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        self.settings = settings
        self.work_dir = settings.work_dir
        self.topology = build_topology(racks=settings.racks, nodes_per_rack=settings.nodes_per_rack)
        self.logs_dir = self.work_dir / "logs"
        self.kubeconfig = self.work_dir / "kubeconfig"
        self.base_env = dict(os.environ)
        self.runtime = DaemonPodRuntime(
            self.work_dir,
            settings.driver_namespace,
            selects=self._runs_container,
            cdi_dirs=lambda node: [self.cdi_root(node)],
            log_dir=self.logs_dir / "pods",
            base_env=self.base_env,
            probe_period_s=settings.probe_period_s,
            service_account_kubeconfig=self._pod_kubeconfig,
            sandbox_dir=self.work_dir / "containers" if settings.runs_workers else None,
            host_env=self._host_env,
        )
        self.host_imex = HostImex(self.work_dir, self.base_env)
        # Each kubelet also passes every tick (probes, retries); on a big rack that adds up in this process.
        tick_s = max(KUBELET_TICK_S, len(self.topology.nodes) / NODES_PER_KUBELET_TICK_S)
        self.cluster = SimCluster(
            self.work_dir,
            self.topology,
            settings=ServerSettings(dra_consumable_capacity=settings.dra_consumable_capacity),
            runtime=self.runtime,
            kubelet_tick_s=tick_s,
            timings=settings.node_timings,
        )
        self.runtime.on_change = self._readiness_changed
        self.store = self.cluster.store
        serve_jobs(self.store)
        jobs = JobController(self.store)
        # A resync: a failed worker's replacement is due when the back-off ends, not on a write.
        self.cluster.controllers.append(
            ControllerLoop("jobs", self.store, jobs.kinds, jobs.reconcile, resync_s=JOBS_RESYNC_S)
        )
        self.controllers: dict[int, Component] = {}  # by replica
        self.controller_generations: dict[int, int] = {}  # replica -> its event log's generation (lost: +1)
        self.fork_server: ForkServer | None = None
        self.probe_server: ForkServer | None = None
        self.plugins: dict[str, Component] = {}
        self.pods = ComponentPods(self.store, self.cluster.apiserver.pod_network, settings.driver_namespace)
        self.timings = StartTimings()
        self.started = False  # every component is up (later pods are routed as they get an address)
        self._routing: set[asyncio.Task[None]] = set()

    # ---- paths ---------------------------------------------------------------------------------------------
    def cdi_root(self, node: str) -> Path:
        return self.cluster.cdi_dir(node)

    def plugin_db(self, node: str) -> Path:
        return self.cluster.plugin_dir(node, DRIVER_NAME) / "events.db"

    @property
    def controller_db(self) -> Path:
        return self.work_dir / "controller" / "events.db"

    def daemon_dbs(self) -> list[Path]:
        """Every IMEX daemon's event log on the nodes (live, or kept by the plugin once its domain is
        gone)."""
        return [path for _, _, path in self.runtime.daemon_logs()]

    def _readiness_changed(self, pod: dict[str, Any]) -> None:
        kubelet = self.cluster.kubelets.get(str((pod.get("spec") or {}).get("nodeName", "")))
        if kubelet is not None:
            kubelet.poke()

    def _runs_container(self, pod: dict[str, Any]) -> bool:
        """Daemon pods (driver-managed), and workers where the settings run them (any pod outside the driver
        namespace: the components there run as processes of their own)."""
        if self.runtime.runs(pod):
            return not self.settings.host_managed
        return (
            self.settings.runs_workers and pod["metadata"].get("namespace") != self.settings.driver_namespace
        )

    def _host_env(self, node: str) -> dict[str, str]:
        """What the node's kernel tells a container: which node it is, its /proc/devices."""
        proc_devices = self.cluster.driver_files(node).proc_devices
        return {fakeimexmem.HOST_ENV: node, fakeimexmem.PROC_DEVICES_ENV: str(proc_devices)}

    async def exec_in(self, pod_uid: str, argv: list[str]) -> tuple[int, str]:
        """`kubectl exec` into a running container: its exit code and output."""
        return await self.runtime.exec_in(pod_uid, argv)

    async def _start_host_imex(self) -> None:
        """Host-managed: the operator's nvidia-imex.service on every GPU node, spanning its clique."""
        addresses = {name: self.cluster.kubelets[name].node_ip for name in self.topology.nodes}
        for name, fake in self.topology.nodes.items():
            if fake.clique_id:
                peers = [
                    addresses[n] for n, f in self.topology.nodes.items() if f.clique_id == fake.clique_id
                ]
                await self.host_imex.start(name, addresses[name], peers)

    # ---- start ---------------------------------------------------------------------------------------------
    async def start(self) -> None:
        started = time.perf_counter()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        await self.cluster.start()
        self.cluster.write_kubeconfig(self.kubeconfig)
        imex_env = self.cluster.fake_imex_env()
        self.base_env.update(imex_env)
        self.base_env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{imex_env['PATH']}"
        self.base_env["KUBECONFIG"] = str(self.kubeconfig)
        self.base_env.pop("CDCTL_DB", None)
        # The simulated API server is plain http, so the processes trust no certificate authority. Without
        # this, each Kubernetes client parses the system CA bundle (about 17 ms of CPU per process).
        trust = self.work_dir / "trust"
        (trust / "certs").mkdir(parents=True, exist_ok=True)
        (trust / "none.pem").touch()
        self.base_env.update(SSL_CERT_FILE=str(trust / "none.pem"), SSL_CERT_DIR=str(trust / "certs"))
        self._install_chart()
        self._label_gpu_nodes()
        if self.settings.host_managed:
            await self._start_host_imex()
        if self.settings.fork_server:
            self.fork_server = await ForkServer.start(FORK_SERVER_PRELOAD, env=self.base_env)
            self.runtime.fork_server = self.fork_server
            self.probe_server = await ForkServer.start(PROBE_SERVER_PRELOAD, env=self.base_env)
            self.runtime.probe_server = self.probe_server
        self.timings.cluster_s = time.perf_counter() - started
        started = time.perf_counter()
        await self._start_components()
        self.timings.components_s = time.perf_counter() - started

    def _create(self, group: str, plural: str, namespace: str, obj: dict[str, Any]) -> None:
        with contextlib.suppress(AlreadyExists):
            self.store.create(self.store.type_of(group, plural), namespace, obj)

    def chart_values(self) -> dict[str, Any]:
        values: dict[str, Any] = {"featureGates": {"HostManagedIMEX": self.settings.host_managed}}
        if self.settings.channel_isolation:
            compute_domains: dict[str, Any] = {"imex": {"isolation": self.settings.isolation}}
            if self.settings.imex_channel_count is not None:
                compute_domains["imexChannelCount"] = self.settings.imex_channel_count
            values["resources"] = {"computeDomains": compute_domains}
        return values

    def nvml_spec_file(self, node: str) -> Path:
        return self.cluster.node_dir(node) / "fake-nvml"

    def set_fabric_state(self, node: str, state: FabricState) -> None:
        """Change the node's fabric; its plugin sees it at its next NVML probe."""
        self.topology.set_fabric_state(node, state)

    def plugin_nodes(self) -> list[str]:
        """The nodes where the chart's kubelet plugin DaemonSet would place a pod."""
        placement = plugin_placement(self.chart_values())
        nodes = self.store.type_of("", "nodes")
        return [
            name
            for name in self.topology.all_nodes()
            if pod_fits_node(placement, self.store.get(nodes, "", name))
        ]

    def _install_chart(self) -> None:
        values = self.chart_values()
        for obj in cluster_bootstrap_objects(values):
            group = obj["apiVersion"].rpartition("/")[0]
            self._create(group, _PLURALS[obj["kind"]], "", obj)
        self._create("", "namespaces", "", {"metadata": {"name": self.settings.driver_namespace}})
        # The chart's admission policies, enforced for the controller and plugins, which connect as their
        # service accounts with tokens bound to their pods (`_pod_kubeconfig`).
        self.cluster.apiserver.load_policies(
            admission_policies(values, namespace=self.settings.driver_namespace)
        )
        if self.settings.rack_domains_namespace:
            self._create("", "namespaces", "", {"metadata": {"name": self.settings.rack_domains_namespace}})
        for account in daemon_service_accounts(self.settings.driver_namespace, values):
            self._create("", "serviceaccounts", self.settings.driver_namespace, account)
        # Channel isolation, driver-managed: the shared IMEX daemon's account, Role, binding and DaemonSet.
        for obj in shared_daemon_objects(self.settings.driver_namespace, values):
            group = obj["apiVersion"].rpartition("/")[0]
            self._create(group, _PLURALS[obj["kind"]], self.settings.driver_namespace, obj)
        if self.collector_account:
            collector = {"metadata": {"name": self.collector_account}}
            self._create("", "serviceaccounts", self.settings.driver_namespace, collector)

    @property
    def collector_account(self) -> str:
        """The ServiceAccount whose tokens read the components' event logs (`cdctl collect`)."""
        return collector_service_account(self.chart_values())

    def _component_flags(self, local_port: int) -> list[str]:
        """The chart's HTTP endpoint, event-log reader and OTLP export flags, the endpoint on this machine's
        loopback."""
        flags = ["--http-endpoint", f"{LOCAL_HOST}:{local_port}"]
        if self.collector_account:
            flags += ["--event-log-reader", f"{self.settings.driver_namespace}/{self.collector_account}"]
        if self.settings.otlp_endpoint:
            flags += ["--otlp-endpoint", self.settings.otlp_endpoint]
        return flags

    def _label_gpu_nodes(self) -> None:
        """What GPU Feature Discovery and the device plugin publish: the clique label and the GPU count."""
        nodes = self.store.type_of("", "nodes")
        for fake in self.topology.cpu_nodes.values():
            node = self.store.get(nodes, "", fake.name)
            node["metadata"].setdefault("labels", {})["kubernetes.io/hostname"] = fake.name
            self.store.update(nodes, "", fake.name, node)
        for name in self.topology.nodes:
            self.label_gpu_node(name)

    def label_gpu_node(self, name: str) -> None:
        """Label one GPU node and advertise its GPUs (again, for a Node registered anew after a reboot)."""
        nodes = self.store.type_of("", "nodes")
        fake = self.topology.node(name)
        node = self.store.get(nodes, "", fake.name)
        labels = node["metadata"].setdefault("labels", {})
        labels.update(
            {
                "kubernetes.io/hostname": fake.name,
                "nvidia.com/gpu.count": str(len(fake.gpu_uuids)),
                "nvidia.com/gpu.product": GPU_PRODUCT,
            }
        )
        if fake.clique_id:
            labels[CLIQUE_LABEL] = fake.clique_id
        node = self.store.update(nodes, "", fake.name, node)
        gpus = {GPU_RESOURCE: str(len(fake.gpu_uuids) or GPUS_PER_NODE)}
        node["status"] = {**(node.get("status") or {}), "capacity": gpus, "allocatable": dict(gpus)}
        self.store.update(nodes, "", fake.name, node, subresource="status")

    def _pod_kubeconfig(self, pod: dict[str, Any]) -> Path:
        """What the kubelet mounts into a pod: a token of its service account bound to the pod and node."""
        meta, spec = pod["metadata"], pod["spec"]
        token = service_account_token(
            meta["namespace"],
            spec.get("serviceAccountName") or "default",
            pod=meta["name"],
            pod_uid=meta["uid"],
            node=spec["nodeName"],
        )
        path = self.work_dir / "kubeconfigs" / f"{meta['namespace']}_{meta['name']}"
        return self.cluster.apiserver.write_kubeconfig(path, token)

    def _controller_node(self) -> str:
        """Where the controller's pod runs: the first CPU-only node, else the first GPU node."""
        return next(iter(self.topology.cpu_nodes or self.topology.nodes))

    async def _start_components(self) -> None:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        launched = time.perf_counter()
        for replica in range(max(1, self.settings.controller_replicas)):
            await self.launch_controller(replica)
        for node in self.plugin_nodes():
            await self.launch_plugin(node)
        self.timings.per_step["launch processes"] = time.perf_counter() - launched
        await self._wait_until_registered()
        await self.pods.route_all(self.settings.start_timeout_s)
        self.started = True
        self.timings.per_step["plugins registered"] = time.perf_counter() - launched

    # ---- components, one at a time (at start, and as a Deployment or DaemonSet does after a crash) ---------
    @property
    def controller(self) -> Component | None:
        """The first controller replica (the only one unless `controller_replicas` says more)."""
        return self.controllers.get(0)

    def controller_pod(self, replica: int) -> str:
        """The replica's pod name: a StatefulSet's, so a pod deleted comes back under the same name."""
        return CONTROLLER_POD if replica == 0 else CONTROLLER_POD.removesuffix("-0") + f"-{replica}"

    def controller_db_for(self, replica: int, generation: int = 0) -> Path:
        """The replica's event log, on its PersistentVolumeClaim; a new `generation` is a new, empty log (the
        volume was lost, or persistence is off and the log was on the deleted pod's emptyDir)."""
        directory = self.work_dir / ("controller" if replica == 0 else f"controller-{replica}")
        return directory / ("events.db" if generation == 0 else f"events-g{generation}.db")

    def controller_dbs(self) -> list[Path]:
        """Every controller event log written so far (all replicas, all their pods)."""
        return sorted(p for p in self.work_dir.glob("controller*/events*.db") if p.is_file())

    def _component_pod(
        self, name: str, component: str, node: str, account: str, *, new_pod: bool = False
    ) -> tuple[dict[str, Any], int]:
        """The component's pod and the local port its process serves HTTP on. A pod that still exists is
        the one its process runs in again (a container restart); one that is gone (its node was deleted) or
        `new_pod` (force-deleted: its StatefulSet or DaemonSet makes it again) is created anew, and routed
        once its kubelet has given it an address."""
        pods = self.store.type_of("", "pods")
        namespace = self.settings.driver_namespace
        existing = (
            self.store.get(pods, namespace, name) if self.store.exists_name(pods, namespace, name) else None
        )
        if existing is not None and (new_pod or existing["metadata"].get("deletionTimestamp")):
            self.store.delete(pods, namespace, name, grace_period_s=0)  # force-deleted
            existing = None
        if existing is not None and name in self.pods.local_ports:
            return existing, self.pods.local_ports[name][1]
        port = http_ports(self.chart_values())[component]
        pod, local_port = self.pods.create(name, component, node, account, port)
        if self.started:
            routing = asyncio.create_task(self._route(), name=f"route {name}")
            self._routing.add(routing)
            routing.add_done_callback(self._routing.discard)
        return pod, local_port

    async def _route(self) -> None:
        with contextlib.suppress(TimeoutError):
            await self.pods.route_all(self.settings.start_timeout_s)

    async def launch_controller(
        self, replica: int, generation: int = 0, *, new_pod: bool = False
    ) -> Component:
        """Start controller replica `replica` on its event log `generation` (see `controller_db_for`)."""
        name = self.controller_pod(replica)
        pod, local_port = self._component_pod(
            name, "controller", self._controller_node(), f"{CHART_NAME}-controller", new_pod=new_pod
        )
        args = [
            *controller_command(
                self.settings,
                self._pod_kubeconfig(pod),
                self.controller_db_for(replica, generation),
                self.topology,
                pod=name,
            ),
            *self._component_flags(local_port),
        ]
        if self.settings.controller_replicas > 1:
            lease_s, renew_s, retry_s = self.settings.leader_election_s
            args += [
                "--leader-election-enabled",
                "--leader-election-lease-lock-namespace", self.settings.driver_namespace,
                "--leader-election-lease-duration", f"{lease_s}s",
                "--leader-election-renew-deadline", f"{renew_s}s",
                "--leader-election-retry-period", f"{retry_s}s",
            ]  # fmt: skip
        env = dict(self.base_env)
        if self.settings.rack_domains_namespace:
            env.update(RACK_DOMAINS="true", RACK_DOMAIN_NAMESPACE=self.settings.rack_domains_namespace)
        log_name = "controller" if replica == 0 else f"controller-{replica}"
        component = await Component.launch(
            "controller" if replica == 0 else f"controller {replica}",
            args,
            env,
            self.logs_dir / f"{log_name}.log",
            self.fork_server,
        )
        self.controllers[replica] = component
        self.controller_generations[replica] = generation
        return component

    async def launch_plugin(self, node: str) -> Component:
        """Start the kubelet plugin on `node`, in the pod the plugin DaemonSet runs there."""
        self.topology.node(node).write_nvml_spec(self.nvml_spec_file(node))
        name = f"{CHART_NAME}-kubelet-plugin-{node}"
        pod, local_port = self._component_pod(name, "kubelet-plugin", node, f"{CHART_NAME}-kubelet-plugin")
        component = await Component.launch(
            f"plugin {node}",
            [
                *plugin_command(
                    self.settings,
                    node,
                    self.cluster,
                    self._pod_kubeconfig(pod),
                    self.cdi_root(node),
                    self.plugin_db(node),
                ),
                "--pod-name",
                name,
                *self._component_flags(local_port),
                # Host-managed: the plugin asks the host IMEX (its /etc/nvidia-imex) before each channel.
                *(
                    ["--host-imex-config", str(self.host_imex.config_file(node))]
                    if self.settings.host_managed
                    else []
                ),
            ],
            dict(self.base_env),
            self.logs_dir / f"plugin-{node}.log",
            self.fork_server,
        )
        self.plugins[node] = component
        return component

    def registered_nodes(self) -> set[str]:
        """Nodes whose plugin is registered with the kubelet and has published a ResourceSlice."""
        slices, _ = self.store.list_objects(self.store.type_of("resource.k8s.io", "resourceslices"))
        published = {
            (s.get("spec") or {}).get("nodeName")
            for s in slices
            if (s.get("spec") or {}).get("driver") == DRIVER_NAME
        }
        return {
            node
            for node, kubelet in self.cluster.kubelets.items()
            if DRIVER_NAME in kubelet.plugins.plugins and node in published
        }

    def exited(self) -> list[Component]:
        components = [*self.controllers.values(), *self.plugins.values()]
        return [c for c in components if c.returncode is not None]

    async def _wait_until_registered(self) -> None:
        await self.wait_until_registered(set(self.plugins))

    async def wait_until_registered(self, nodes: set[str]) -> None:
        """Until the plugins of `nodes` are registered with their kubelets and have published their slices."""
        deadline = time.monotonic() + self.settings.start_timeout_s
        while nodes - self.registered_nodes():
            dead = self.exited()
            if dead:
                raise RackStartError("; ".join(c.failure() for c in dead))
            if time.monotonic() > deadline:
                missing = sorted(nodes - self.registered_nodes())
                raise RackStartError(
                    f"plugins not registered after {self.settings.start_timeout_s:.0f} s: {missing}"
                )
            await asyncio.sleep(0.1)

    # ---- stop ----------------------------------------------------------------------------------------------
    async def stop(self) -> None:
        """Kubelets and stand-ins first (no call reaches a plugin that is stopping), then daemons, then the
        components, then the API server."""
        for routing in list(self._routing):
            routing.cancel()
        await asyncio.gather(*self._routing, return_exceptions=True)
        for kubelet in self.cluster.kubelets.values():
            await kubelet.stop()
        for loop in self.cluster.controllers:
            await loop.stop()
        await self.runtime.stop_all()
        await self.host_imex.stop_all()
        components = [*self.plugins.values(), *self.controllers.values()]
        await asyncio.gather(*(c.stop() for c in components))
        for server in (self.fork_server, self.probe_server):
            if server is not None:
                await server.stop()
        await self.cluster.stop()

    async def __aenter__(self) -> Rack:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
