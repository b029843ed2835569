"""A host-managed IMEX cluster for the end-to-end tests: the simulated cluster, the real controller and the
real kubelet plugins with HostManagedIMEX on, and a fake host `nvidia-imex` per NVLink node run by the test
as the operator's systemd would run it.

Three nodes: two share an NVLink clique and run the host IMEX daemon (one IMEX domain, both in its node
list); the third has no NVLink fabric (NVML reports no clique). The chart's objects come from
cdctl.sim.rack.chart with `featureGates.HostManagedIMEX=true` (no daemon DeviceClass). Every structlog line of
the controller and the plugins is captured in `logs`. `sql` runs `cdctl sql` (the real CLI, click's runner)
over a node's plugin log. Nothing here is timed: `until` waits for a condition, with a generous bound that
only stops a broken test from hanging.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import structlog
from click.testing import CliRunner

from cdctl.api.gates import parse_feature_gates
from cdctl.cli.main import cli
from cdctl.controller.app import run_controller
from cdctl.controller.settings import ControllerSettings
from cdctl.plugin.app import PluginProcess
from cdctl.plugin.pluginconfig import PluginConfig
from cdctl.sim.node import fakeimex
from cdctl.sim.node.topology import FabricState, NodeDeviceLib, build_topology
from cdctl.sim.rack.chart import cluster_bootstrap_objects
from cdctl.sim.rack.cluster import SimCluster

GATES = "HostManagedIMEX=true"
NAMESPACE = "default"
DRIVER = "compute-domain.nvidia.com"
GIVE_UP_S = 60.0
_PLURALS = {"CustomResourceDefinition": "customresourcedefinitions", "DeviceClass": "deviceclasses"}


async def until(check: Callable[[], Any], what: str) -> Any:
    """Wait until `check()` is truthy; its value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + GIVE_UP_S
    while True:
        value = check()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(0.05)


@dataclass
class HostImex:
    """The operator's `nvidia-imex.service` on one node (the fake daemon of cdctl.sim.node.fakeimex)."""

    node: str
    address: str
    config: Path
    env: dict[str, str]
    process: asyncio.subprocess.Process | None = None
    starts: int = 0

    @property
    def registry(self) -> fakeimex.Registry:
        return fakeimex.Registry(Path(self.env[fakeimex.REGISTRY_ENV]))

    def running(self) -> bool:
        return self.registry.entry(self.address) is not None

    async def start(self) -> None:
        """`systemctl start nvidia-imex`."""
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cdctl.sim.node.fakeimex", "imex", "-c", str(self.config),
            env=self.env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        self.starts += 1
        await until(self.running, f"host IMEX on {self.node} registered")

    async def stop(self) -> None:
        """`systemctl stop nvidia-imex`."""
        if self.process is None or self.process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(self.process.wait(), 60)

    async def query(self) -> tuple[int, str]:
        """What an IMEX client on the node gets: `nvidia-imex-ctl -q` (exit status, output)."""
        ctl = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cdctl.sim.node.fakeimex", "ctl", "-c", str(self.config), "-q",
            env=self.env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(ctl.communicate(), 60)
        return int(ctl.returncode or 0), out.decode().strip()


@dataclass
class RunningPlugin:
    process: PluginProcess
    task: asyncio.Task[None]
    stop: asyncio.Event


@dataclass
class HostManagedCluster:
    sim: SimCluster
    root: Path
    logs: list[MutableMapping[str, Any]]
    imex: dict[str, HostImex] = field(default_factory=dict)
    plugins: dict[str, RunningPlugin] = field(default_factory=dict)
    controller: asyncio.Task[None] | None = None

    @property
    def nodes(self) -> list[str]:
        return list(self.sim.topology.nodes)

    @property
    def fabric_nodes(self) -> list[str]:
        return [n for n in self.nodes if self.sim.topology.node(n).clique_id]

    @property
    def node_without_clique(self) -> str:
        return next(n for n in self.nodes if not self.sim.topology.node(n).clique_id)

    def type_of(self, group: str, plural: str) -> Any:
        return self.sim.store.type_of(group, plural)

    def get(self, group: str, plural: str, name: str, namespace: str = NAMESPACE) -> dict[str, Any] | None:
        with contextlib.suppress(Exception):
            return self.sim.store.get(self.type_of(group, plural), namespace, name)
        return None

    def list(self, group: str, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return self.sim.store.list_objects(self.type_of(group, plural), namespace)[0]

    def create_domain(self, name: str, mode: str = "Single") -> dict[str, Any]:
        body = {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomain",
            "metadata": {"name": name},
            "spec": {
                "numNodes": 0,
                "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}, "allocationMode": mode},
            },
        }
        return self.sim.store.create(self.type_of("resource.nvidia.com", "computedomains"), NAMESPACE, body)

    async def admitted_domain(self, name: str, mode: str = "Single") -> dict[str, Any]:
        """Create a ComputeDomain and wait until the controller made its template and set it Ready."""
        self.create_domain(name, mode)

        def ready() -> dict[str, Any] | None:
            cd = self.get("resource.nvidia.com", "computedomains", name)
            template = self.get("resource.k8s.io", "resourceclaimtemplates", f"{name}-channel")
            return cd if template and (cd or {}).get("status", {}).get("status") == "Ready" else None

        found: dict[str, Any] = await until(ready, f"ComputeDomain {name} Ready with its template")
        return found

    def create_workload(self, name: str, node: str, domain: str) -> dict[str, Any]:
        """A pod pinned to `node` with a channel claim from the domain's template."""
        body = {
            "metadata": {"name": name},
            "spec": {
                "nodeName": node,
                "containers": [
                    {"name": "main", "image": "x", "resources": {"claims": [{"name": "channel"}]}}
                ],
                "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": f"{domain}-channel"}],
            },
        }
        return self.sim.store.create(self.type_of("", "pods"), NAMESPACE, body)

    def pod(self, name: str) -> dict[str, Any] | None:
        return self.get("", "pods", name)

    def running(self, name: str) -> bool:
        return ((self.pod(name) or {}).get("status") or {}).get("phase") == "Running"

    def prepare_error(self, pod: dict[str, Any]) -> str:
        """Why the pod's node has not started it (the kubelet's last prepare error), "" if none."""
        return self.sim.kubelets[pod["spec"]["nodeName"]].last_errors.get(pod["metadata"]["uid"], "")

    def delete_pod(self, name: str) -> None:
        self.sim.store.delete(self.type_of("", "pods"), NAMESPACE, name)

    def plugin_db(self, node: str) -> Path:
        return self.plugins[node].process.cfg.db_path

    async def sql(self, node: str, statement: str) -> list[dict[str, Any]]:
        """`cdctl sql --json` over the node's plugin log (the CLI runs its own loop: in a thread)."""
        args = ["sql", "--db", str(self.plugin_db(node)), "--json", statement]
        result = await asyncio.to_thread(CliRunner().invoke, cli, args)
        assert result.exit_code == 0, result.output + result.stderr
        rows: list[dict[str, Any]] = json.loads(result.stdout)
        return rows

    async def refused(self, node: str, claim: str) -> dict[str, Any]:
        """The claim's claim_lifecycle row once the plugin's projections show it failed."""
        statement = (
            "SELECT name, state, outcome, last_error FROM claim_lifecycle"
            f" WHERE outcome = 'failed' AND name = '{claim}'"
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + GIVE_UP_S
        while True:
            rows = await self.sql(node, statement)
            if rows:
                return rows[0]
            if loop.time() > deadline:
                raise AssertionError(f"claim {claim} never listed as refused on {node}")
            await asyncio.sleep(0.1)

    def claim_of(self, pod_name: str) -> str | None:
        statuses = ((self.pod(pod_name) or {}).get("status") or {}).get("resourceClaimStatuses") or []
        return next((s.get("resourceClaimName") for s in statuses if s.get("resourceClaimName")), None)

    # ---- start / stop --------------------------------------------------------------------------------------
    def install_chart(self) -> None:
        for obj in cluster_bootstrap_objects({"featureGates": {"HostManagedIMEX": True}}):
            group = obj["apiVersion"].rpartition("/")[0]
            self.sim.store.create(self.type_of(group, _PLURALS[obj["kind"]]), "", obj)

    async def start_host_imex(self) -> None:
        """The operator's part: nodes_config.cfg with every NVLink node, nvidia-imex running on each."""
        addresses = {n: self.sim.kubelets[n].node_ip for n in self.fabric_nodes}
        etc = self.root / "etc-nvidia-imex"
        etc.mkdir(parents=True, exist_ok=True)
        nodes_config = etc / "nodes_config.cfg"
        nodes_config.write_text("".join(f"{a}\n" for a in addresses.values()))
        env = {**os.environ, **self.sim.fake_imex_env()}
        for node, address in addresses.items():
            config = etc / f"{node}.cfg"
            config.write_text(f"IMEX_NODE_CONFIG_FILE={nodes_config}\nIMEX_CMD_BIND_INTERFACE_IP={address}\n")
            self.imex[node] = HostImex(node, address, config, env)
            await self.imex[node].start()

    async def start_controller(self) -> None:
        settings = ControllerSettings(
            pod_name="controller-0",
            image_name="example.com/cdctl:test",
            log_verbosity_cd_daemon=4,
            kubeconfig=str(self.sim.write_kubeconfig(self.root / "controller.kubeconfig")),
            kube_api_qps=0.0,
            feature_gates=parse_feature_gates(GATES),
        )
        self.controller = asyncio.create_task(run_controller(settings))

    async def start_plugin(self, node: str, host_imex_config: Path | None = None) -> None:
        """Start the node's plugin; with `host_imex_config`, one that asks the host's IMEX before each channel
        (through an `nvidia-imex-ctl` in its driver root that reaches the fake IMEX registry)."""
        files = self.sim.driver_files(node)
        driver_root = self.root / f"driver-root-{node}"
        if host_imex_config is not None:
            fake_env = self.sim.fake_imex_env()
            ctl = driver_root / "usr" / "bin" / "nvidia-imex-ctl"
            ctl.parent.mkdir(parents=True, exist_ok=True)
            ctl.write_text(
                f"#!/bin/sh\nexport {fakeimex.REGISTRY_ENV}={fake_env[fakeimex.REGISTRY_ENV]}\n"
                f'exec {self.sim.work_dir / "bin" / "nvidia-imex-ctl"} "$@"\n'
            )
            ctl.chmod(0o755)
        config = PluginConfig(
            node_name=node,
            cdi_root=self.sim.node_dir(node) / "cdi",
            registrar_dir=self.sim.registry_dir(node),
            plugins_dir=self.sim.node_dir(node) / "plugins",
            kubeconfig=str(self.sim.write_kubeconfig(self.sim.node_dir(node) / "kubeconfig")),
            kube_api_qps=0,
            kube_api_burst=0,
            gates=parse_feature_gates(GATES),
            proc_devices=str(files.proc_devices),
            fabric_imex_mgmt_cap=str(files.fabric_imex_mgmt_cap),
            boot_id_path=str(files.boot_id),
            projection_batch_s=0.05,
            host_imex_config=host_imex_config,
            container_driver_root=driver_root,
        )
        process = PluginProcess(config, NodeDeviceLib(self.sim.topology, node))
        stop = asyncio.Event()
        self.plugins[node] = RunningPlugin(process, asyncio.create_task(process.run(stop)), stop)
        slices = self.type_of("resource.k8s.io", "resourceslices")

        def published() -> bool:
            items = self.sim.store.list_objects(slices)[0]
            return any((s.get("spec") or {}).get("nodeName") == node for s in items)

        await until(lambda: published() or self.plugins[node].task.done(), f"plugin on {node} published")
        if self.plugins[node].task.done():
            self.plugins[node].task.result()

    async def stop_plugin(self, node: str) -> None:
        plugin = self.plugins.pop(node)
        plugin.stop.set()
        await asyncio.wait_for(plugin.task, 60)

    async def close(self) -> None:
        for plugin in self.plugins.values():
            plugin.stop.set()
        for plugin in self.plugins.values():
            await plugin.task
        if self.controller is not None:
            self.controller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.controller
        for imex in self.imex.values():
            await imex.stop()


@pytest.fixture
async def cluster() -> AsyncIterator[HostManagedCluster]:
    root = Path(tempfile.mkdtemp(prefix="cdhm-", dir="/tmp"))  # short: unix socket paths live under it
    topology = build_topology(racks=1, nodes_per_rack=3)
    topology.set_fabric_state(list(topology.nodes)[-1], FabricState.NOT_SUPPORTED)
    try:
        with structlog.testing.capture_logs() as logs:
            async with SimCluster(root, topology, kubelet_tick_s=0.05) as sim:
                running = HostManagedCluster(sim, root, logs)
                try:
                    running.install_chart()
                    await running.start_host_imex()
                    await running.start_controller()
                    for node in running.nodes:
                        await running.start_plugin(node)
                    yield running
                finally:
                    await running.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
