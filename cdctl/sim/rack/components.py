"""The rack's child processes: `cdctl controller` and one `cdctl kubelet-plugin` per plugin node.

`controller_command` and `plugin_command` build each component's command line with the flags the chart would
set (driver namespace, feature gates, per-node plugin, registration and CDI directories, the fake NVML (a spec
file the rack rewrites, probed every `fabric_probe_s`) and fake `/proc` driver files, one event log per
process, and under channel isolation `isolation_flags`) as the arguments after `cdctl`; `Component.launch`
starts it, through the fork server (cdctl.sim.node.forkserver) when one is given, else as the console script,
with its output in a log file, and `stop()` sends SIGTERM and waits (SIGKILL after a grace period); `kill()`
is `kill -9` (cdctl.sim.node.proctree). The simulated API server has no rate limit, so client-side throttling
is off. Used by cdctl.sim.rack.launch.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from cdctl.asynctasks import wait_at_most
from cdctl.sim.node.forkserver import ForkedProcess, ForkServer
from cdctl.sim.node.proctree import kill_tree
from cdctl.sim.node.topology import NODES_PER_RACK, Topology
from cdctl.sim.rack.cluster import SimCluster
from cdctl.sim.rack.settings import RackSettings

STOP_GRACE_S = 15.0
CONTROLLER_POD = "cdctl-controller-0"
DAEMON_IMAGE = "cdctl:sim"


def cdctl_argv() -> list[str]:
    """How to run this installation's `cdctl`: the console script beside the interpreter, else `-m cdctl`."""
    script = Path(sys.executable).parent / "cdctl"
    if script.is_file():
        return [str(script)]
    found = shutil.which("cdctl")
    return [found] if found else [sys.executable, "-m", "cdctl"]


def isolation_flags(settings: RackSettings, *, controller: bool) -> list[str]:
    """The chart's channel isolation flags (none under `domain`, today's command lines unchanged): the channel
    count for the controller's allocator and the plugins' check of a published channel, the slot devices for
    the plugins."""
    if not settings.channel_isolation:
        return []
    flags = ["--imex-isolation", settings.isolation]
    if settings.imex_channel_count is not None:
        flags += ["--imex-channel-count", str(settings.imex_channel_count)]
    if not controller and settings.channel_slots is not None:
        flags += ["--channel-slots", str(settings.channel_slots)]
    return flags


def controller_command(
    settings: RackSettings, kubeconfig: Path, db: Path, topology: Topology, pod: str = CONTROLLER_POD
) -> list[str]:
    db.parent.mkdir(parents=True, exist_ok=True)
    per_clique = max(len(topology.rack(r)) for r in {n.rack for n in topology.nodes.values()})
    return [
        "controller",
        "--pod-name", pod,
        "--namespace", settings.driver_namespace,
        "--image-name", DAEMON_IMAGE,
        "--log-verbosity-cd-daemon", "4",
        "--max-nodes-per-imex-domain", str(max(per_clique, NODES_PER_RACK)),
        "--kubeconfig", str(kubeconfig),
        "--kube-api-qps", "0",
        "--feature-gates", settings.feature_gates,
        "--db", str(db),
        *isolation_flags(settings, controller=True),
    ]  # fmt: skip


def plugin_command(
    settings: RackSettings, node: str, cluster: SimCluster, kubeconfig: Path, cdi_root: Path, db: Path
) -> list[str]:
    files = cluster.driver_files(node)
    return [
        "kubelet-plugin",
        "--node-name", node,
        "--namespace", settings.driver_namespace,
        "--cdi-root", str(cdi_root),
        "--kubelet-registrar-directory-path", str(cluster.registry_dir(node)),
        "--kubelet-plugins-directory-path", str(cluster.node_dir(node) / "plugins"),
        "--db", str(db),
        "--kubeconfig", str(kubeconfig),
        "--kube-api-qps", "1000",
        "--kube-api-burst", "1000",
        "--feature-gates", settings.feature_gates,
        "--fake-nvml", f"@{cluster.node_dir(node) / 'fake-nvml'}",
        "--fabric-reprobe-interval", str(settings.fabric_probe_s),
        "--imex-handover-hold", str(settings.imex_handover_hold_s),
        "--proc-devices", str(files.proc_devices),
        "--fabric-imex-mgmt-cap", str(files.fabric_imex_mgmt_cap),
        "--boot-id-path", str(files.boot_id),
        *isolation_flags(settings, controller=False),
    ]  # fmt: skip


async def terminate(process: asyncio.subprocess.Process | ForkedProcess, grace_s: float) -> None:
    """SIGTERM, then SIGKILL after `grace_s`; returns once the process is reaped."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await wait_at_most(process.wait(), grace_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
    await process.wait()


@dataclass
class Component:
    name: str
    process: asyncio.subprocess.Process | ForkedProcess
    log_path: Path

    @classmethod
    async def launch(
        cls, name: str, args: list[str], env: dict[str, str], log_path: Path, fork_server: ForkServer | None
    ) -> Component:
        """Run `cdctl ARGS...` (through the fork server when there is one)."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        if fork_server is not None:
            return cls(name, await fork_server.spawn(args, env, log_path), log_path)
        with log_path.open("ab") as output:
            process = await asyncio.create_subprocess_exec(
                *cdctl_argv(), *args, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=output, stderr=output
            )
        return cls(name, process, log_path)

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def failure(self) -> str:
        """Why it stopped: the exit code and the last line of its log."""
        lines = [line for line in self.log_path.read_text(errors="replace").splitlines() if line.strip()]
        last = lines[-1].strip() if lines else "no output"
        return f"{self.name} exited with {self.returncode}: {last} (log: {self.log_path})"

    async def kill(self) -> None:
        """`kill -9` the process (and anything it started); returns once it is reaped."""
        if self.process.returncode is None:
            kill_tree(self.process.pid)
        await self.process.wait()

    async def stop(self) -> None:
        await terminate(self.process, STOP_GRACE_S)
