"""A container runtime stand-in: runs a pod's first container as a local process.

The simulated kubelet (cdctl.sim.kubelet) hands it every pod whose claims are prepared. For pods `selects`
accepts, it starts the container's `command` + `args` with the environment a container would see: the
container's `env` (values and the downward-API fieldRefs metadata.name/namespace/uid, spec.nodeName,
status.podIP/hostIP) plus the CDI edits of the pod's devices (cdctl.sim.cdiresolver). Readiness is the
container's `readinessProbe.exec` command run with that environment (at most once per `probe_period_s`), else
"the process is alive"; an exited process is restarted unless `restartPolicy` is Never. Stop sends SIGTERM.
Other pods are Ready at once. Output goes to `<log_dir>/<namespace>_<pod>.log`. Used by the rack launcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdctl.sim.cdiresolver import resolve
from cdctl.sim.selectors import field_value

log = logging.getLogger(__name__)
STOP_GRACE_S = 10.0


def container_env(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """The container's `env`, with downward-API field references resolved against the pod."""
    env: dict[str, str] = {}
    for entry in container.get("env") or []:
        if "value" in entry:
            env[entry["name"]] = str(entry["value"])
            continue
        path = ((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if path:
            env[entry["name"]] = field_value(pod, str(path))
    return env


@dataclass
class _Running:
    process: asyncio.subprocess.Process
    env: dict[str, str]
    restarts: int = 0
    probed_at: float = 0.0
    ready: bool = False


@dataclass
class ProcessRuntime:
    selects: Callable[[dict[str, Any]], bool]
    cdi_dirs: Callable[[str], list[Path]]  # node name -> that node's CDI spec directories
    log_dir: Path
    base_env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    probe_period_s: float = 1.0
    running: dict[str, _Running] = field(default_factory=dict)  # by pod uid

    @staticmethod
    def _container(pod: dict[str, Any]) -> dict[str, Any]:
        containers = (pod.get("spec") or {}).get("containers") or []
        if not containers:
            raise ValueError(f"pod {pod['metadata']['name']} has no container")
        return dict(containers[0])

    async def _spawn(self, pod: dict[str, Any], env: dict[str, str]) -> asyncio.subprocess.Process:
        container = self._container(pod)
        argv = [str(a) for a in [*(container.get("command") or []), *(container.get("args") or [])]]
        if not argv:
            raise ValueError(f"pod {pod['metadata']['name']}: the container has no command to run")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{pod['metadata']['namespace']}_{pod['metadata']['name']}.log"
        with log_path.open("ab") as output:
            return await asyncio.create_subprocess_exec(*argv, env=env, stdout=output, stderr=output)

    async def start(self, pod: dict[str, Any], cdi_devices: list[str]) -> None:
        if not self.selects(pod):
            return
        node = str((pod.get("spec") or {}).get("nodeName", ""))
        env = dict(self.base_env)
        env.update(resolve(self.cdi_dirs(node), cdi_devices).env)
        env.update(container_env(pod, self._container(pod)))
        process = await self._spawn(pod, env)
        self.running[pod["metadata"]["uid"]] = _Running(process, env)
        log.info(
            "simulated runtime: started %s/%s as pid %d",
            pod["metadata"]["namespace"],
            pod["metadata"]["name"],
            process.pid,
        )

    async def ready(self, pod: dict[str, Any]) -> bool:
        if not self.selects(pod):
            return True
        running = self.running.get(pod["metadata"]["uid"])
        if running is None:
            return False
        if running.process.returncode is not None:
            if (pod.get("spec") or {}).get("restartPolicy") == "Never":
                return False
            running.process = await self._spawn(pod, running.env)
            running.restarts += 1
            running.ready = False
        if time.monotonic() - running.probed_at < self.probe_period_s:
            return running.ready
        running.probed_at = time.monotonic()
        probe = ((self._container(pod).get("readinessProbe") or {}).get("exec") or {}).get("command")
        if not probe:
            running.ready = True
            return True
        running.ready = await self._probe([str(a) for a in probe], running.env)
        return running.ready

    async def _probe(self, command: list[str], env: dict[str, str]) -> bool:
        """Run one exec probe; it passes when the command exits 0."""
        checker = await asyncio.create_subprocess_exec(
            *command, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
        )
        return await checker.wait() == 0

    async def stop(self, pod: dict[str, Any]) -> None:
        running = self.running.pop(pod["metadata"]["uid"], None)
        if running is None or running.process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            running.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(running.process.wait(), timeout=STOP_GRACE_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                running.process.kill()
            await running.process.wait()
