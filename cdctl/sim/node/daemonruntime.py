"""The rack's container runtime for IMEX daemon pods: `cdctl daemon run` as a local process per pod.

A ProcessRuntime (cdctl.sim.node.processruntime) that runs the pods of the controller's daemon DaemonSets (the
driver namespace, labelled with a ComputeDomain uid) and gives each the paths its container would see
through the daemon claim's CDI mount: `IMEXD_DIR` is the domain directory the node's plugin prepared
(`<node>/plugins/<driver>/domains/<domain uid>`), with the pod's own hosts file in it (also handed to the
fake `nvidia-imex-ctl`); the daemon keeps its event log there (`/imexd/events.db` in its container), where
the node's plugin serves it and, once the domain is gone, keeps it as `imex-history/<domain uid>.db`
(`daemon_logs`). The shared IMEX daemon of channel isolation (the chart's DaemonSet, its pods labelled
cdctl.api.shareddaemon.SHARED_DAEMON_LABELS, `is_shared_daemon_pod`) gets the node's shared directory the
chart mounts from the host (`<node>/plugins/<driver>/shared-imex`, which the node's plugin keeps), and lives
as long as the install (`domain_containers` leaves it out). Other pods the rack selects (workers) run as
plain containers of the ProcessRuntime.
With a fork server (cdctl.sim.node.forkserver), `cdctl ...` commands start from its warm copy of cdctl instead
of a fresh interpreter, and probes from `probe_server` (one that imported only what `cdctl daemon check`
needs, so each fork is small) when the rack sets one; either way as the pod's user (cdctl.sim.node.runas):
the domain directory, the hosts file and the event log directory are root's, as on a node, so a daemon pod
that does not run as root cannot start. Used by cdctl.sim.rack.launch.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, cast

from cdctl.api.shareddaemon import COMPONENT_LABEL, SHARED_DAEMON_COMPONENT, SHARED_DIR
from cdctl.domain.computedomains import DRIVER_NAME, LABEL_COMPUTE_DOMAIN
from cdctl.plugin.prepare import DAEMON_LOG, IMEX_HISTORY
from cdctl.sim.node.fakeimex import HOSTS_ENV
from cdctl.sim.node.forkserver import ForkServer
from cdctl.sim.node.processruntime import ProcessRuntime
from cdctl.sim.node.runas import RunAs


class DaemonPodRuntime(ProcessRuntime):
    def __init__(self, work_dir: Path, driver_namespace: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.work_dir = work_dir
        self.driver_namespace = driver_namespace
        self.fork_server: ForkServer | None = None
        self.probe_server: ForkServer | None = None  # a lighter one for probes, else fork_server
        self.shared_uids: set[str] = set()  # pods of the shared IMEX daemon DaemonSet this runtime started

    def _forkable(self, command: list[str]) -> bool:
        return self.fork_server is not None and bool(command) and Path(command[0]).name == "cdctl"

    def is_daemon_pod(self, pod: dict[str, Any]) -> bool:
        """A pod of a ComputeDomain's own daemon DaemonSet (`domain` isolation)."""
        metadata = pod["metadata"]
        return metadata.get("namespace") == self.driver_namespace and LABEL_COMPUTE_DOMAIN in (
            metadata.get("labels") or {}
        )

    def is_shared_daemon_pod(self, pod: dict[str, Any]) -> bool:
        metadata = pod["metadata"]
        labels = metadata.get("labels") or {}
        return (
            metadata.get("namespace") == self.driver_namespace
            and labels.get(COMPONENT_LABEL) == SHARED_DAEMON_COMPONENT
        )

    def runs(self, pod: dict[str, Any]) -> bool:
        """The pods this runtime runs: the controller's daemon pods and the shared daemon's."""
        return self.is_daemon_pod(pod) or self.is_shared_daemon_pod(pod)

    def domain_containers(self) -> list[str]:
        """Pod uids of the running containers that belong to a workload or a domain: all but the shared
        daemons, which live as long as the install."""
        return [uid for uid in self.running if uid not in self.shared_uids]

    def daemon_logs(self) -> list[tuple[str, str, Path]]:
        """(node, domain uid, path) of every daemon log on the nodes: live ones in their domain directory,
        kept ones in the plugin's imex-history."""
        found: list[tuple[str, str, Path]] = []
        for plugin_dir in sorted(self.work_dir.glob(f"*/plugins/{DRIVER_NAME}")):
            node = plugin_dir.parent.parent.name
            found += [(node, p.parent.name, p) for p in sorted(plugin_dir.glob(f"domains/*/{DAEMON_LOG}"))]
            found += [(node, p.stem, p) for p in sorted(plugin_dir.glob(f"{IMEX_HISTORY}/*.db"))]
            found += [(node, SHARED_DIR, p) for p in sorted(plugin_dir.glob(f"{SHARED_DIR}/{DAEMON_LOG}"))]
        return found

    async def _spawn(self, pod: dict[str, Any], env: dict[str, str]) -> asyncio.subprocess.Process:
        shared = self.is_shared_daemon_pod(pod)
        if not shared and not self.is_daemon_pod(pod):  # a worker the rack runs: a plain container
            return await super()._spawn(pod, env)
        node = pod["spec"]["nodeName"]
        plugin_dir = self.work_dir / node / "plugins" / DRIVER_NAME
        if shared:  # the chart's hostPath volume at /imexd
            self.shared_uids.add(pod["metadata"]["uid"])
            imexd = plugin_dir / SHARED_DIR
            imexd.mkdir(parents=True, exist_ok=True)  # hostPath type DirectoryOrCreate
        else:
            imexd = plugin_dir / "domains" / pod["metadata"]["labels"][LABEL_COMPUTE_DOMAIN]
        hosts = imexd / "hosts"
        if not hosts.exists():
            hosts.write_text(f"127.0.0.1\tlocalhost\n{env.get('POD_IP', '')}\t{pod['metadata']['name']}\n")
        # The same dict is the probes' environment, so `cdctl daemon check` finds the same files.
        env.update({"IMEXD_DIR": str(imexd), "HOSTS_FILE": str(hosts), HOSTS_ENV: str(hosts)})
        env.pop("CDCTL_DB", None)  # the daemon's default: <IMEXD_DIR>/events.db
        container = self._container(pod)
        command = [str(a) for a in [*(container.get("command") or []), *(container.get("args") or [])]]
        if self.fork_server is None or not self._forkable(command):
            return await super()._spawn(pod, env)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_path(pod["metadata"]["namespace"], pod["metadata"]["name"])
        forked = await self.fork_server.spawn(command[1:], env, log_path, user=self.user_of(pod))
        # The runtime uses pid, returncode, wait, send_signal and kill: a ForkedProcess has them all.
        return cast(asyncio.subprocess.Process, forked)

    async def _probe(self, command: list[str], env: dict[str, str], user: RunAs | None) -> bool:
        if self.fork_server is None or not self._forkable(command):
            return await super()._probe(command, env, user)
        server = self.probe_server or self.fork_server
        checker = await server.spawn(command[1:], env, Path(os.devnull), user=user)
        return await checker.wait() == 0
