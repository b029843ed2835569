"""The fake IMEX export/import check (cdctl.sim.node.fakeimexmem) as workers run it in their containers.

Host IMEX daemons (cdctl.sim.node.hostimex) form one IMEX domain per clique, the plugin's CDI code writes the
claims' channel device nodes, the simulated container runtime runs worker containers (`imex-memcheck worker`)
with the devices their CDI edits gave them, and each import runs inside a container (`exec_in`). An import
succeeds only between containers that hold the same channel in one clique's IMEX domain; a file named after
a channel, a device of another major, a channel of another clique's domain, a daemon down, an exporter gone:
all refused.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdctl.plugin.cdi import (
    ClaimDevice,
    ContainerEdits,
    DeviceNode,
    build_claim_spec,
    channel_device_node,
    claim_device_id,
    claim_spec_path,
)
from cdctl.sim.node import fakeimex, fakeimexmem
from cdctl.sim.node.fakedriver import write_driver_files
from cdctl.sim.node.hostimex import HostImex
from cdctl.sim.node.processruntime import ProcessRuntime

MAJOR = 234  # nvidia-caps-imex-channels in the fake /proc/devices
CLIQUES = {"node-a": ("10.0.0.1", "A"), "node-b": ("10.0.0.2", "A"), "node-c": ("10.0.1.1", "C")}


@dataclass
class Rig:
    root: Path
    runtime: ProcessRuntime
    imex: HostImex
    pods: list[dict[str, Any]] = field(default_factory=list)

    async def run(self, name: str, node: str, *device_nodes: DeviceNode, command: str = "worker") -> str:
        """Start a worker container on `node` holding `device_nodes` (through a claim's CDI spec)."""
        cdi = self.root / node / "cdi"
        cdi.mkdir(parents=True, exist_ok=True)
        spec = build_claim_spec(name, [ClaimDevice("channel-0", ContainerEdits(device_nodes=device_nodes))])
        claim_spec_path(cdi, name).write_text(yaml.safe_dump(spec))
        pod: dict[str, Any] = {
            "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}"},
            "spec": {
                "nodeName": node,
                "restartPolicy": "Never",
                "securityContext": {"runAsUser": 0},  # as the nvbandwidth image: root
                "containers": [
                    {
                        "name": "c",
                        "command": [fakeimexmem.EXECUTABLE, *command.split()],
                        "env": [
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {
                                "name": "POD_NAMESPACE",
                                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                            },
                        ],
                    }
                ],
            },
        }
        await self.runtime.start(pod, [claim_device_id(name, "channel-0")])
        self.pods.append(pod)
        await self.exported(pod["metadata"]["uid"])
        return pod["metadata"]["uid"]

    async def exported(self, uid: str) -> None:
        """Until the worker has exported (or exited)."""
        name = self.runtime.running[uid].env["POD_NAME"]
        path = self.root / "registry" / fakeimexmem.EXPORTS / f"team_{name}"
        for _ in range(500):
            if path.exists() or self.runtime.running[uid].process.returncode is not None:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"{name} never exported")

    async def imports(self, uid: str, name: str) -> tuple[int, str]:
        return await self.runtime.exec_in(uid, [fakeimexmem.EXECUTABLE, "import", f"team/{name}"])


@pytest.fixture
async def rig(socket_root: Path) -> AsyncIterator[Rig]:
    bin_dir = socket_root / "bin"
    fakeimex.install_executables(bin_dir)
    fakeimexmem.install_executable(bin_dir)
    fakeimexmem.prepare_registry(socket_root / "registry")
    env = dict(os.environ)
    env.update(
        {"PATH": f"{bin_dir}{os.pathsep}{env['PATH']}", fakeimex.REGISTRY_ENV: str(socket_root / "registry")}
    )
    proc_devices = {n: write_driver_files(socket_root / n / "driver").proc_devices for n in CLIQUES}
    runtime = ProcessRuntime(
        selects=lambda pod: True,
        cdi_dirs=lambda node: [socket_root / node / "cdi"],
        log_dir=socket_root / "logs",
        base_env=env,
        sandbox_dir=socket_root / "containers",
        host_env=lambda node: {
            fakeimexmem.HOST_ENV: node,
            fakeimexmem.PROC_DEVICES_ENV: str(proc_devices[node]),
        },
    )
    imex = HostImex(socket_root, env)
    for node, (address, clique) in CLIQUES.items():
        peers = [a for a, c in CLIQUES.values() if c == clique]
        await imex.start(node, address, peers)
    rig = Rig(socket_root, runtime, imex)
    try:
        yield rig
    finally:
        for pod in rig.pods:
            await runtime.stop(pod)
        await imex.stop_all()


def channel(number: int) -> DeviceNode:
    return channel_device_node(number, MAJOR)


async def test_pods_holding_one_channel_in_one_clique_import_each_other(rig: Rig) -> None:
    first = await rig.run("x-0", "node-a", channel(3))
    second = await rig.run("x-1", "node-b", channel(3))
    same_node = await rig.run("x-2", "node-a", channel(3))
    code, output = await rig.imports(second, "x-0")
    assert (code, output) == (0, "IMPORTED team/x-0 on IMEX channel 3 from the IMEX daemon at 10.0.0.1")
    assert (await rig.imports(first, "x-1"))[0] == 0
    assert (await rig.imports(same_node, "x-1"))[0] == 0
    assert await rig.runtime.exec_in(first, [fakeimexmem.EXECUTABLE, "channels"]) == (0, "3")


async def test_another_domains_channel_cannot_import_on_the_same_node_or_across(rig: Rig) -> None:
    await rig.run("x-0", "node-a", channel(3))
    other_here = await rig.run("y-0", "node-a", channel(5))
    other_there = await rig.run("y-1", "node-b", channel(5))
    for importer in (other_here, other_there):
        code, output = await rig.imports(importer, "x-0")
        assert code == 1
        assert output == "DENIED: team/x-0 is bound to IMEX channel 3, which this container does not hold"
    assert (await rig.imports(other_there, "y-0"))[0] == 0


async def test_the_same_channel_number_in_another_cliques_imex_domain_is_refused(rig: Rig) -> None:
    await rig.run("x-0", "node-a", channel(3))
    elsewhere = await rig.run("z-0", "node-c", channel(3))
    code, output = await rig.imports(elsewhere, "x-0")
    assert (code, output) == (1, "DENIED: the IMEX daemons at 10.0.1.1 and 10.0.0.1 are not one IMEX domain")


async def test_the_channel_is_the_device_minor_and_major_not_the_file_name(rig: Rig) -> None:
    await rig.run("x-0", "node-a", channel(3))
    renamed = await rig.run("r-0", "node-b", DeviceNode("/dev/nvidia-caps-imex-channels/channel3", MAJOR, 5))
    wrong_major = await rig.run("m-0", "node-b", DeviceNode("/dev/nvidia-caps-imex-channels/channel3", 1, 3))
    assert (await rig.imports(renamed, "x-0"))[0] == 1
    assert await rig.runtime.exec_in(renamed, [fakeimexmem.EXECUTABLE, "channels"]) == (0, "5")
    # A worker without a channel cannot even export: the container exits, as a CUDA job would.
    assert rig.runtime.running[wrong_major].process.returncode == 1


async def test_an_import_needs_both_daemons_up_and_the_exporter_alive(rig: Rig) -> None:
    exporter = await rig.run("x-0", "node-a", channel(3))
    importer = await rig.run("x-1", "node-b", channel(3))
    await rig.imex.kill("node-a")
    code, output = await rig.imports(importer, "x-0")
    assert code == 1 and "not ready" in output
    await rig.imex.start("node-a", "10.0.0.1", ["10.0.0.1", "10.0.0.2"])
    assert (await rig.imports(importer, "x-0"))[0] == 0
    await rig.runtime.stop(rig.pods[0])
    assert rig.runtime.running.get(exporter) is None
    assert (await rig.imports(importer, "x-0")) == (1, "DENIED: nothing is exported under team/x-0")


async def test_a_lingering_worker_keeps_its_export_after_sigterm_until_it_exits(rig: Rig) -> None:
    lingering = await rig.run("x-0", "node-a", channel(3), command="worker --linger 0.5")
    importer = await rig.run("x-1", "node-b", channel(3))
    process = rig.runtime.running[lingering].process
    process.terminate()
    assert (await rig.imports(importer, "x-0"))[0] == 0  # still running, still exporting
    await asyncio.wait_for(process.wait(), 10)
    assert process.returncode == 0
    assert (await rig.imports(importer, "x-0"))[0] == 1


@pytest.mark.parametrize("args", [["worker", "--linger", "soon"], ["import"], ["nothing"]])
async def test_bad_arguments_print_the_usage_and_exit_2(args: list[str]) -> None:
    assert fakeimexmem.main(args) == 2


async def test_exported_answers_for_a_live_exporter_only(rig: Rig) -> None:
    worker = await rig.run("x-0", "node-a", channel(3))
    assert await rig.runtime.exec_in(worker, [fakeimexmem.EXECUTABLE, "exported"]) == (0, "")
    assert (await rig.runtime.exec_in(worker, [fakeimexmem.EXECUTABLE, "exported", "team/other"]))[0] == 1
