"""The host's own `nvidia-imex` on each simulated GPU node, for host-managed IMEX (HostManagedIMEX).

On a host-managed cluster the operator runs `nvidia-imex.service` on every GPU node, configured with the
addresses of the nodes of its NVLink clique, so one IMEX domain spans the clique; cdctl neither starts nor
configures it. `HostImex(work_dir, env)` is that service on the simulated nodes: `start(node, address,
peers)` writes the node's `/etc/nvidia-imex` (config and `nodes_config.cfg`: the clique's node addresses)
under `<work_dir>/<node>/etc/nvidia-imex` and runs the fake `nvidia-imex` (cdctl.sim.node.fakeimex) with
`NODE_NAME` set, so that the fake registry knows it as the node's IMEX daemon, and returns once it is
registered; `stop(node)` is `systemctl stop nvidia-imex`, `kill(node)` a crash of it; `stop_all()` at the end.
Its output goes to `<work_dir>/logs/host-imex-<node>.log`. Used by cdctl.sim.rack.launch.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from cdctl.asynctasks import wait_at_most
from cdctl.sim.node import fakeimex
from cdctl.sim.node.proctree import kill_tree

SERVER_PORT = 50000
COMMAND_PORT = 50005
START_TIMEOUT_S = 30.0
STOP_GRACE_S = 10.0


@dataclass
class HostImex:
    work_dir: Path
    env: dict[str, str]  # the fake IMEX's PATH and registry (cdctl.sim.rack.cluster.fake_imex_env)
    processes: dict[str, asyncio.subprocess.Process] = field(default_factory=dict)  # by node

    def config_dir(self, node: str) -> Path:
        return self.work_dir / node / "etc" / "nvidia-imex"

    def config_file(self, node: str) -> Path:
        """The node's /etc/nvidia-imex/config.cfg (what its kubelet plugin asks `nvidia-imex-ctl -q` with)."""
        return self.config_dir(node) / "config.cfg"

    def _write_config(self, node: str, address: str, peers: list[str]) -> Path:
        directory = self.config_dir(node)
        directory.mkdir(parents=True, exist_ok=True)
        node_file = directory / "nodes_config.cfg"
        node_file.write_text("".join(f"{peer}\n" for peer in peers))
        config = self.config_file(node)
        config.write_text(
            f"SERVER_PORT={SERVER_PORT}\nIMEX_NODE_CONFIG_FILE={node_file}\n"
            f"IMEX_CMD_BIND_INTERFACE_IP={address}\nIMEX_CMD_PORT={COMMAND_PORT}\n"
        )
        return config

    async def start(self, node: str, address: str, peers: list[str]) -> None:
        """Run the node's host IMEX with the clique's node addresses `peers` as its node list."""
        config = self._write_config(node, address, peers)
        log_path = self.work_dir / "logs" / f"host-imex-{node}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**self.env, fakeimex.NODE_NAME_ENV: node}
        env.pop(fakeimex.HOSTS_ENV, None)  # the node list is addresses: nothing to resolve
        with log_path.open("ab") as output:
            process = await asyncio.create_subprocess_exec(
                "nvidia-imex", "-c", str(config), env=env, stdout=output, stderr=output
            )
        self.processes[node] = process
        registry = fakeimex.Registry(env[fakeimex.REGISTRY_ENV])
        deadline = time.monotonic() + START_TIMEOUT_S
        while (registry.node_daemon(node) or {}).get("pid") != process.pid:
            if process.returncode is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the host IMEX of {node} did not start (log: {log_path})")
            await asyncio.sleep(0.02)

    async def stop(self, node: str) -> None:
        process = self.processes.pop(node, None)
        if process is None:
            return
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
            try:
                await wait_at_most(process.wait(), STOP_GRACE_S)
            except TimeoutError:
                kill_tree(process.pid)
        await process.wait()

    async def kill(self, node: str) -> None:
        """The node's IMEX crashes (`kill -9`): it leaves its registration behind, dead."""
        process = self.processes.pop(node, None)
        if process is not None:
            if process.returncode is None:
                kill_tree(process.pid)
            await process.wait()

    async def stop_all(self) -> None:
        await asyncio.gather(*(self.stop(node) for node in list(self.processes)))
