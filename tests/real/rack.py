"""cdctl on the real parts: the chart installed on a fresh real control plane, one hollow kubelet per node,
and our controller, one kubelet plugin per node and the IMEX daemons as local processes.

`async with RealRack(work_dir, RealSettings(...)) as rack:`
1. starts a fresh control plane (tests/real/kit.py) and installs what `helm install` would: the chart's CRDs
   and every template it renders for the settings' values (RBAC, DeviceClasses, ValidatingAdmissionPolicies
   and their bindings, the controller StatefulSet, the plugin DaemonSet), Helm's test hook aside;
2. starts one hollow kubelet per node of a simulated NVL72 topology (cdctl.sim.node.topology), labelled as
   GPU Feature Discovery labels a GB200 node (`nvidia.com/gpu.present`, `nvidia.com/gpu.clique`) with 4
   `nvidia.com/gpu`; the real DaemonSet and StatefulSet controllers then make the plugin and controller pods;
3. runs `cdctl controller` and one `cdctl kubelet-plugin` per node with the environment the chart gives their
   containers (downward-API fields resolved against their real pods, mount paths mapped to each node's
   directories) and a token of the chart's service account bound to their pod, as the kubelet would mount:
   the chart's RBAC and admission policies apply to every request. The plugins read a fake NVML and fake
   driver files (the simulated rack's) in place of a GPU;
4. driver-managed: when the real kubelet creates a daemon pod's container (its fake runtime records it, with
   the CDI ids the DRA manager handed it), runs it as `cdctl daemon run` with that pod's environment, CDI
   edits and bound token (cdctl.sim.node.daemonruntime), and stops it when the pod goes; host-managed: the
   host's own fake `nvidia-imex` on every node, spanning its clique (cdctl.sim.node.hostimex).
What no container does here: pods are Ready as soon as their containers are created (the fake runtime runs
no probe), and workers run nothing; `records(node)` says which containers the kubelet created and with which
CDI devices. Leaving the block stops every process and the kubelets; the control plane is left running.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from helm_python import chart as hc

from cdctl.domain.computedomains import DRIVER_NAME
from cdctl.sim.apiserver.server import free_port
from cdctl.sim.node import fakeimex
from cdctl.sim.node.daemonruntime import DaemonPodRuntime
from cdctl.sim.node.fakedriver import DriverFiles, write_driver_files
from cdctl.sim.node.hostimex import HostImex
from cdctl.sim.node.processruntime import container_env
from cdctl.sim.node.topology import Topology, build_topology
from cdctl.sim.rack import chart
from cdctl.sim.rack.components import terminate
from tests.real.kit import ControlPlane, HollowNode

NAMESPACE = "cdctl-system"
RELEASE = "cdctl"
PLUGIN_ACCOUNT = "cdctl-kubelet-plugin"
CONTROLLER_ACCOUNT = "cdctl-controller"
CONTROLLER_POD = "cdctl-controller-0"
CLIQUE_LABEL = "nvidia.com/gpu.clique"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
HOOK = "helm.sh/hook"


@dataclass(frozen=True)
class RealSettings:
    nodes: int = 6
    host_managed: bool = False
    isolation: str = "domain"  # or "channel"
    values: dict[str, Any] = field(default_factory=dict)  # more chart values
    late_plugins: int = 0  # the last N nodes' plugins are left to the test (`start_plugin`): nodes that join

    def chart_values(self) -> dict[str, Any]:
        values: dict[str, Any] = {"featureGates": {"HostManagedIMEX": self.host_managed}}
        if self.isolation != "domain":
            values["resources"] = {"computeDomains": {"imex": {"isolation": self.isolation}}}
        return chart._coalesce(values, self.values)


async def eventually(what: str, check: Callable[[], Awaitable[Any]], timeout_s: float = 60.0) -> Any:
    """Poll `check` until it returns something true; its value. Fails with `what` and the last value."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.25)
    raise AssertionError(f"{what}: not within {timeout_s:g} s (last: {last!r})")


@dataclass
class Component:
    name: str
    process: asyncio.subprocess.Process
    log: Path


class RealRack:
    def __init__(self, work_dir: Path, settings: RealSettings) -> None:
        self.work_dir = work_dir
        self.settings = settings
        self.plane = ControlPlane()
        self.topology: Topology = build_topology(racks=1, nodes_per_rack=settings.nodes, cpu_nodes_per_rack=0)
        self.logs = work_dir / "logs"
        self.base_env = dict(os.environ)
        self.nodes = {
            name: HollowNode(name, index, work_dir / name, self._node_labels(name))
            for index, name in enumerate(self.topology.nodes)
        }
        self.driver_files: dict[str, DriverFiles] = {}
        self.components: dict[str, Component] = {}
        self.objects: list[dict[str, Any]] = []
        self._pod_kubeconfigs: dict[str, Path] = {}
        self.runtime = DaemonPodRuntime(
            work_dir,
            NAMESPACE,
            selects=lambda pod: self.runtime.is_daemon_pod(pod) or self.runtime.is_shared_daemon_pod(pod),
            cdi_dirs=lambda node: [self.nodes[node].cdi],
            log_dir=self.logs / "pods",
            base_env=self.base_env,
            service_account_kubeconfig=lambda pod: self._pod_kubeconfigs[pod["metadata"]["uid"]],
        )
        self.host_imex = HostImex(work_dir, self.base_env)
        self._bridge: asyncio.Task[None] | None = None
        self._started_records: set[str] = set()
        self.bridge_errors: list[str] = []

    # ---- set-up --------------------------------------------------------------------------------------------
    def _node_labels(self, name: str) -> dict[str, str]:
        fake = self.topology.node(name)
        return {GPU_PRESENT_LABEL: "true", CLIQUE_LABEL: fake.clique_id, "nvidia.com/gpu.product": "GB200"}

    @property
    def early_nodes(self) -> list[str]:
        """The nodes whose plugins start with the rack (all but `late_plugins`)."""
        return list(self.nodes)[: len(self.nodes) - self.settings.late_plugins]

    def plugin_dir(self, node: str) -> Path:
        return self.work_dir / node / "plugins" / DRIVER_NAME

    async def start(self) -> None:
        for directory in (self.work_dir, self.logs):
            directory.mkdir(parents=True, exist_ok=True)
        fakeimex.install_executables(self.work_dir / "bin")
        imex_path = f"{Path(sys.executable).parent}{os.pathsep}{self.work_dir / 'bin'}"
        self.base_env.update(PATH=f"{imex_path}{os.pathsep}{os.environ.get('PATH', '')}")
        self.base_env[fakeimex.REGISTRY_ENV] = str(self.work_dir / "imex-registry")
        self.base_env.pop("KUBECONFIG", None)
        self.base_env.pop("CDCTL_DB", None)
        await self.plane.fresh()
        await self._install_chart()
        for node in self.nodes.values():
            self.driver_files[node.name] = write_driver_files(node.directory / "driver")
            (node.directory / "fake-nvml").write_text(self.topology.node(node.name).fake_nvml_spec())
            await node.start()
        await self.wait_nodes_ready(list(self.nodes))
        if self.settings.host_managed:
            await self._start_host_imex()
        await self.start_controller()
        for name in self.early_nodes:
            await self.start_plugin(name)
        for name in self.early_nodes:
            await self.wait_published(name)
        self._bridge = asyncio.create_task(self._run_daemon_pods(), name="daemon-bridge")

    async def wait_nodes_ready(self, nodes: list[str]) -> None:
        async def ready() -> bool:
            listed = {n["metadata"]["name"]: n for n in (await self.plane.get("nodes"))["items"]}
            conditions = [(listed.get(n) or {}).get("status", {}).get("conditions") or [] for n in nodes]
            return all(any(c["type"] == "Ready" and c["status"] == "True" for c in cs) for cs in conditions)

        await eventually(f"nodes {', '.join(nodes)} registered and Ready", ready, 120)

    async def _install_chart(self) -> None:
        helm = hc.Chart.load(chart.chart_dir())
        try:
            manifests = helm.render(self.settings.chart_values(), name=RELEASE, namespace=NAMESPACE,
                                    is_install=True)  # fmt: skip
        finally:
            helm.close()
        for name in sorted(manifests):
            if name.endswith(".yaml"):
                self.objects += [d for d in yaml.safe_load_all(manifests[name]) if d]
        self.objects = [o for o in self.objects if HOOK not in ((o["metadata"].get("annotations")) or {})]
        await self.plane.apply(chart.crds())
        await self.plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        await self.plane.kubectl("create", "namespace", NAMESPACE)
        await self.plane.apply(self.objects, "-n", NAMESPACE)

    async def _start_host_imex(self) -> None:
        addresses = {name: f"127.2.0.{node.index + 1}" for name, node in self.nodes.items()}
        for name in self.nodes:
            clique = self.topology.node(name).clique_id
            peers = [addresses[n] for n in self.nodes if self.topology.node(n).clique_id == clique]
            await self.host_imex.start(name, addresses[name], peers)

    # ---- components ----------------------------------------------------------------------------------------
    def _container(self, kind: str, name: str) -> dict[str, Any]:
        found = next(o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name)
        return dict(found["spec"]["template"]["spec"]["containers"][0])

    def _secret_file(self, name: str, key: str, path: Path) -> Path:
        secret = next(o for o in self.objects if o["kind"] == "Secret" and o["metadata"]["name"] == name)
        data = (secret.get("data") or {}).get(key)
        value = base64.b64decode(data) if data else str((secret.get("stringData") or {})[key]).encode()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(value)
        path.chmod(0o600)
        return path

    async def _pod(self, name: str, timeout_s: float = 60.0) -> dict[str, Any]:
        async def found() -> dict[str, Any] | None:
            pods = (await self.plane.get("pods", "-n", NAMESPACE))["items"]
            return next((p for p in pods if p["metadata"]["name"] == name), None)

        pod: dict[str, Any] = await eventually(f"pod {NAMESPACE}/{name}", found, timeout_s)
        return pod

    async def _pod_kubeconfig(self, pod: dict[str, Any], account: str) -> Path:
        meta = pod["metadata"]
        token = await self.plane.token(account, meta["namespace"], meta["name"])
        path = self.work_dir / "kubeconfigs" / f"{meta['namespace']}_{meta['name']}"
        self._pod_kubeconfigs[meta["uid"]] = self.plane.write_kubeconfig(path, token)
        return path

    def _env(self, container: dict[str, Any], pod: dict[str, Any], mounts: dict[str, Path]) -> dict[str, str]:
        """The container's environment as the chart sets it, its mount paths mapped to this machine's."""
        env = dict(self.base_env)
        for name, value in container_env(pod, container).items():
            for mount_path, host_path in sorted(mounts.items(), key=lambda m: -len(m[0])):
                if value == mount_path or value.startswith(mount_path + "/"):
                    value = str(host_path) + value[len(mount_path) :]
                    break
            env[name] = value
        return env

    async def _launch(self, name: str, argv: list[str], env: dict[str, str]) -> Component:
        log = self.logs / f"{name.replace('/', '_')}.log"
        with log.open("ab") as output:
            process = await asyncio.create_subprocess_exec(
                *argv, env=env, stdout=output, stderr=output, start_new_session=True
            )
        component = Component(name, process, log)
        self.components[name] = component
        return component

    async def start_controller(self) -> Component:
        pod = await self._pod(CONTROLLER_POD)
        container = self._container("StatefulSet", f"{RELEASE}-controller")
        mounts = {
            "/var/lib/cdctl": self.work_dir / "controller",
            "/etc/cdctl/event-log-key": self._secret_file(
                f"{RELEASE}-event-log-key", "key", self.work_dir / "keys" / "key"
            ).parent,
            "/tmp": self.work_dir / "controller" / "tmp",
        }
        for path in mounts.values():
            path.mkdir(parents=True, exist_ok=True)
        env = self._env(container, pod, mounts)
        env.update(KUBECONFIG=str(await self._pod_kubeconfig(pod, CONTROLLER_ACCOUNT)),
                   HTTP_ENDPOINT=f"127.0.0.1:{free_port()}", KUBE_API_QPS="0")  # fmt: skip
        return await self._launch("controller", [*container["command"]], env)

    async def plugin_pod(self, node: str) -> dict[str, Any]:
        async def on_node() -> dict[str, Any] | None:
            selector = f"spec.nodeName={node}"
            pods = (await self.plane.get("pods", "-n", NAMESPACE, "--field-selector", selector))["items"]
            return next((p for p in pods if p["metadata"]["name"].startswith(f"{RELEASE}-kubelet-plugin-")
                         and not p["metadata"].get("deletionTimestamp")), None)  # fmt: skip

        pod: dict[str, Any] = await eventually(f"the plugin pod on {node}", on_node)
        return pod

    async def start_plugin(self, node: str) -> Component:
        pod = await self.plugin_pod(node)
        hollow = self.nodes[node]
        container = self._container("DaemonSet", f"{RELEASE}-kubelet-plugin")
        files = self.driver_files[node]
        mounts = {
            "/var/lib/kubelet/plugins_registry": hollow.registry,
            "/var/lib/kubelet/plugins": self.work_dir / node / "plugins",
            "/var/run/cdi": hollow.cdi,
            "/host-proc-devices": files.proc_devices,
            "/driver-root": hollow.directory / "driver",
            "/etc/cdctl/event-log-key": self.work_dir / "keys",
        }
        env = self._env(container, pod, mounts)
        env.update(KUBECONFIG=str(await self._pod_kubeconfig(pod, PLUGIN_ACCOUNT)),
                   HTTP_ENDPOINT=f"127.0.0.1:{free_port()}", HEALTHCHECK_PORT="-1")  # fmt: skip
        argv = [
            *container["command"],
            "--fake-nvml", f"@{hollow.directory / 'fake-nvml'}",
            "--fabric-imex-mgmt-cap", str(files.fabric_imex_mgmt_cap),
            "--boot-id-path", str(files.boot_id),
        ]  # fmt: skip
        return await self._launch(f"plugin/{node}", argv, env)

    async def kill_component(self, name: str) -> None:
        """SIGKILL: the process dies with what it started (a node losing power)."""
        component = self.components.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(component.process.pid, 9)
        await asyncio.wait_for(component.process.wait(), 60)

    async def restart_kubelet(self, node: str, while_down: Callable[[], None] | None = None) -> None:
        hollow = self.nodes[node]
        await hollow.stop()
        if while_down is not None:
            while_down()
        await hollow.start()
        await self.wait_nodes_ready([node])

    async def reboot(self, node: str) -> None:
        """The node loses power and boots again: every process there dies (the kubelet, the plugin, the
        daemons), a new boot id, an empty CDI directory (a tmpfs, as /var/run is); then the kubelet and the
        plugin start again, as systemd and the DaemonSet's pod do."""
        hollow = self.nodes[node]
        await hollow.stop()
        await self.kill_component(f"plugin/{node}")
        await self.runtime.kill_node(node)
        self.driver_files[node] = write_driver_files(hollow.directory / "driver")
        for spec in hollow.cdi.glob("*"):
            spec.unlink()
        await hollow.start()
        await self.wait_nodes_ready([node])
        await self.start_plugin(node)
        await self.wait_published(node)

    async def stop_component(self, name: str) -> int | None:
        """SIGTERM, as the kubelet stops a container; the exit code."""
        component = self.components.pop(name)
        await terminate(component.process, 30.0)
        return component.process.returncode

    async def wait_published(self, node: str, timeout_s: float = 60.0) -> None:
        async def published() -> bool:
            slices = await self.plane.get("resourceslices", "--field-selector", f"spec.nodeName={node}")
            return any(s["spec"]["driver"] == DRIVER_NAME for s in slices["items"])

        await eventually(f"{node}'s plugin registered and published", published, timeout_s)

    # ---- the daemon pods' containers -----------------------------------------------------------------------
    async def _run_daemon_pods(self) -> None:
        """Run each daemon container the real kubelet created; stop those whose pod is gone."""
        while True:
            try:
                await self._bridge_once()
            except Exception as error:  # a test's failure to report, not this task's end
                self.bridge_errors.append(f"{type(error).__name__}: {error}")
            await asyncio.sleep(0.25)

    async def _bridge_once(self) -> None:
        latest: dict[str, tuple[HollowNode, dict[str, Any]]] = {}  # pod uid -> its current container
        for node in self.nodes.values():
            for record in node.records():  # oldest first: a later container supersedes an earlier one
                if record["ok"] and record["namespace"] == NAMESPACE:
                    latest[record["podUID"]] = (node, record)
        fresh = [(n, r) for n, r in latest.values() if f"{n.name}/{r['file']}" not in self._started_records]
        pods: dict[str, dict[str, Any]] = {}
        if fresh or self.runtime.running:
            listing = await self.plane.get("pods", "-n", NAMESPACE)
            pods = {
                p["metadata"]["uid"]: p
                for p in listing["items"]
                if not p["metadata"].get("deletionTimestamp")
            }
        for uid in [u for u in self.runtime.running if u not in pods]:
            gone = {"metadata": {"uid": uid, "namespace": NAMESPACE, "name": uid}, "spec": {}}
            await self.runtime.stop(gone)
        for node, record in fresh:
            pod = pods.get(record["podUID"])
            if pod is None or not self.runtime.selects(pod) or not (pod.get("status") or {}).get("podIP"):
                continue  # not a daemon, gone already, or its status not written yet: the next pass
            self._started_records.add(f"{node.name}/{record['file']}")
            if record["podUID"] in self.runtime.running:
                await self.runtime.stop(pod)
            await self._pod_kubeconfig(pod, str(pod["spec"].get("serviceAccountName", "default")))
            await self.runtime.start(pod, list(record.get("cdiDevices") or []))

    # ---- the end -------------------------------------------------------------------------------------------
    async def stop(self) -> None:
        if self._bridge is not None:
            self._bridge.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._bridge
        await self.runtime.stop_all()
        for name in [n for n in self.components if n != "controller"] + ["controller"]:
            if name in self.components:
                await self.stop_component(name)
        await self.host_imex.stop_all()
        for node in self.nodes.values():
            await node.stop()

    async def __aenter__(self) -> RealRack:
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
