"""A container runtime stand-in: runs a pod's first container as a local process.

The simulated kubelet (cdctl.sim.node.kubelet) hands it every pod whose claims are prepared. For pods
`selects` accepts, it starts the container's `command` + `args` with the environment a container would see:
the container's `env` (values and the downward-API fieldRefs metadata.name/namespace/uid, spec.nodeName,
status.podIP/hostIP) plus the CDI edits of the pod's devices (cdctl.sim.node.cdiresolver), and, when the
runtime is given `service_account_kubeconfig`, the pod's own bound service-account token as KUBECONFIG.
Probes run as the kubelet's probe workers do, one task per running container, each probe on a tick every
`periodSeconds` from
the container's start: the `startupProbe.exec` command from `initialDelaySeconds` until it passes (its
failureThreshold, 20 minutes for the IMEX daemon, is not enforced); then at once the `readinessProbe.exec`
command (the kubelet triggers it when the startup probe succeeds) and at every tick after, Ready flipping
after `successThreshold` passes or `failureThreshold` failures in a row. Without a readiness probe the
container is Ready once started. Each change of readiness, each exit and each restart is handed to
`on_change` (the rack wakes the node's kubelet, which writes the pod status from `container(pod)`);
`probe_period_s`, when set, replaces every period (tests). An exited process is restarted or not as the
kubelet decides (cdctl.sim.node.runtime: the restartPolicy, then the crash-loop back-off from
`crash_backoff_s`); one that is not leaves the pod's phase Succeeded or Failed with its exit code. Stop sends
SIGTERM, and SIGKILL after the deleted pod's `deletionGracePeriodSeconds` or else its
`terminationGracePeriodSeconds` (unset: STOP_GRACE_S); `stop` answers the exit code. Other
pods are Ready at once. `kill(pod)` is `kill -9` of the container (it and what it started die; it is
restarted as any exited container is); `kill_node(node)` is the node
losing power: every container there dies and is forgotten. Output goes to `<log_dir>/<namespace>_<pod>.log`.
With `sandbox_dir`, each container gets the device nodes its resolved CDI edits name, as files under its own
`<sandbox_dir>/<pod uid>/` (`c MAJOR:MINOR` at the container path; `$CDCTL_FAKE_DEV_ROOT` points there), so
what runs inside sees the devices it was really given (cdctl.sim.node.fakeimexmem reads its IMEX channels
there); `host_env(node)` is what the node's kernel tells a process (its identity, its /proc/devices), applied
after the pod's own env so that a pod cannot choose it. `exec_in(pod uid, argv)` runs a command in a running
container's environment, as `kubectl exec` does.
The container and its exec probes run as the user the pod's securityContext or the image names
(cdctl.sim.node.runas), switched to for real when this process is root, so a container that needs root and
does not ask for it fails here as on a node.
Used by the rack launcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdctl.asynctasks import wait_at_most
from cdctl.sim.apiserver.objectmeta import now_rfc3339
from cdctl.sim.apiserver.selectors import field_value
from cdctl.sim.node.cdiresolver import resolve
from cdctl.sim.node.fakeimexmem import DEV_ROOT_ENV
from cdctl.sim.node.proctree import kill_tree
from cdctl.sim.node.runas import RunAs, container_user, enforced
from cdctl.sim.node.runtime import (
    CRASH_BACKOFF_MAX_S,
    CRASH_BACKOFF_S,
    CRASH_LOOP,
    READY,
    ContainerView,
    exit_code,
    exit_reason,
    restart_delay,
    restarts_after,
    stop_grace_s,
)

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


@dataclass(frozen=True)
class ExecProbe:
    """One exec probe of a container spec, with the kubelet's defaults."""

    command: list[str]
    initial_delay_s: float = 0.0
    period_s: float = 10.0
    success_threshold: int = 1
    failure_threshold: int = 3

    @classmethod
    def of(cls, container: dict[str, Any], kind: str) -> ExecProbe | None:
        probe = container.get(kind) or {}
        command = (probe.get("exec") or {}).get("command")
        if not command:
            return None
        return cls(
            [str(a) for a in command],
            float(probe.get("initialDelaySeconds") or 0),
            float(probe.get("periodSeconds") or 10),
            int(probe.get("successThreshold") or 1),
            int(probe.get("failureThreshold") or 3),
        )


@dataclass
class _Running:
    process: asyncio.subprocess.Process
    env: dict[str, str]
    user: RunAs | None  # None: the runtime cannot switch users (not root), so it runs as itself
    node: str = ""
    restarts: int = 0
    ready: bool = False
    started: bool = False  # the startup probe passed (or there is none)
    prober: asyncio.Task[None] | None = None
    watcher: asyncio.Task[None] | None = None  # waits for the process to exit, then restarts it or not
    started_at: str = ""
    spawned: float = 0.0  # monotonic time of the current process's start
    exit_code: int | None = None
    finished_at: str = ""
    waiting: str = ""  # CrashLoopBackOff while a restart waits
    final: bool = False  # exited for good (restartPolicy)
    backoff_steps: int = 0
    stopping: bool = False

    def view(self) -> ContainerView:
        alive = self.process.returncode is None
        reason = "" if self.exit_code is None else exit_reason(self.exit_code)
        return ContainerView(
            ready=self.ready and alive, running=alive, restarts=self.restarts, started_at=self.started_at,
            exit_code=self.exit_code, exit_reason=reason, finished_at=self.finished_at,
            waiting_reason=self.waiting, final=self.final,
        )  # fmt: skip


@dataclass
class ProcessRuntime:
    selects: Callable[[dict[str, Any]], bool]
    cdi_dirs: Callable[[str], list[Path]]  # node name -> that node's CDI spec directories
    log_dir: Path
    base_env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    probe_period_s: float | None = None  # None: each probe's periodSeconds
    on_change: Callable[[dict[str, Any]], None] | None = None  # a running pod's readiness changed
    # The pod's service-account credentials, as the kubelet projects them: a kubeconfig whose token is bound
    # to the pod (its service account, name, uid and node), handed to the container as KUBECONFIG. None: the
    # container gets base_env's KUBECONFIG.
    service_account_kubeconfig: Callable[[dict[str, Any]], Path] | None = None
    sandbox_dir: Path | None = None  # None: containers get no device files (nothing reads them)
    host_env: Callable[[str], dict[str, str]] | None = None  # node name -> what its kernel tells processes
    crash_backoff_s: float = CRASH_BACKOFF_S  # the kubelet's first restart back-off (tests shorten it)
    crash_backoff_max_s: float = CRASH_BACKOFF_MAX_S
    running: dict[str, _Running] = field(default_factory=dict)  # by pod uid

    @staticmethod
    def _container(pod: dict[str, Any]) -> dict[str, Any]:
        containers = (pod.get("spec") or {}).get("containers") or []
        if not containers:
            raise ValueError(f"pod {pod['metadata']['name']} has no container")
        return dict(containers[0])

    def log_path(self, namespace: str, name: str) -> Path:
        """Where the container of pod `namespace`/`name` writes its output (`kubectl logs`)."""
        return self.log_dir / f"{namespace}_{name}.log"

    def user_of(self, pod: dict[str, Any]) -> RunAs | None:
        """The user the pod's container runs as; None when this process cannot switch users."""
        return container_user(pod, self._container(pod)) if enforced() else None

    @staticmethod
    def _as_user(user: RunAs | None) -> dict[str, Any]:
        """create_subprocess_exec's arguments that start the process as `user` (none: as this process)."""
        return {} if user is None else {"user": user.uid, "group": user.gid, "extra_groups": []}

    async def _spawn(self, pod: dict[str, Any], env: dict[str, str]) -> asyncio.subprocess.Process:
        container = self._container(pod)
        argv = [str(a) for a in [*(container.get("command") or []), *(container.get("args") or [])]]
        if not argv:
            raise ValueError(f"pod {pod['metadata']['name']}: the container has no command to run")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_path(pod["metadata"]["namespace"], pod["metadata"]["name"])
        with log_path.open("ab") as output:
            return await asyncio.create_subprocess_exec(
                *argv, env=env, stdout=output, stderr=output, **self._as_user(self.user_of(pod))
            )

    async def start(self, pod: dict[str, Any], cdi_devices: list[str]) -> None:
        if not self.selects(pod):
            return
        node = str((pod.get("spec") or {}).get("nodeName", ""))
        env = dict(self.base_env)
        edits = resolve(self.cdi_dirs(node), cdi_devices)
        env.update(edits.env)
        env.update(container_env(pod, self._container(pod)))
        automount = (pod.get("spec") or {}).get("automountServiceAccountToken", True) is not False
        if self.service_account_kubeconfig is not None and automount:
            env["KUBECONFIG"] = str(self.service_account_kubeconfig(pod))
        if self.host_env is not None:
            env.update(self.host_env(node))
        if self.sandbox_dir is not None:
            env[DEV_ROOT_ENV] = str(self._make_devices(pod["metadata"]["uid"], edits.device_nodes))
        process = await self._spawn(pod, env)
        running = _Running(process, env, self.user_of(pod), node, started_at=now_rfc3339())
        running.spawned = time.monotonic()
        self.running[pod["metadata"]["uid"]] = running
        self._start_prober(pod, running)
        self._watch(pod, running)
        log.info(
            "simulated runtime: started %s/%s as pid %d",
            pod["metadata"]["namespace"],
            pod["metadata"]["name"],
            process.pid,
        )

    def _sandbox(self, pod_uid: str) -> Path | None:
        return None if self.sandbox_dir is None else self.sandbox_dir / pod_uid

    def _make_devices(self, pod_uid: str, device_nodes: list[dict[str, Any]]) -> Path:
        """The container's device nodes as files `c MAJOR:MINOR` under its sandbox (made afresh)."""
        root = self.sandbox_dir / pod_uid if self.sandbox_dir is not None else Path(os.devnull)
        shutil.rmtree(root, ignore_errors=True)
        for node in device_nodes:
            path = root / str(node.get("path") or "").lstrip("/")
            if path == root or ".." in path.parts:
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            numbers = ":".join("-" if node.get(k) is None else str(node[k]) for k in ("major", "minor"))
            path.write_text(f"{node.get('type') or 'c'} {numbers}\n")
        root.mkdir(parents=True, exist_ok=True)
        return root

    def _drop_sandbox(self, pod_uid: str) -> None:
        sandbox = self._sandbox(pod_uid)
        if sandbox is not None:
            shutil.rmtree(sandbox, ignore_errors=True)

    async def exec_in(self, pod_uid: str, argv: list[str], timeout_s: float = 30.0) -> tuple[int, str]:
        """Run `argv` in the running container's environment, as its user (`kubectl exec`): the exit code and
        the output. A container that does not run raises ProcessLookupError."""
        running = self.running.get(pod_uid)
        if running is None or running.process.returncode is not None:
            raise ProcessLookupError(f"no running container for pod {pod_uid}")
        process = await asyncio.create_subprocess_exec(
            *argv,
            env=running.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            **self._as_user(running.user),
        )
        try:
            output, _ = await wait_at_most(process.communicate(), timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise
        return int(process.returncode or 0), output.decode(errors="replace").strip()

    async def container(self, pod: dict[str, Any]) -> ContainerView:
        """The container now: running (Ready as the probes last said), waiting to restart, or exited."""
        if not self.selects(pod):
            return READY
        running = self.running.get(pod["metadata"]["uid"])
        if running is None:
            return ContainerView(ready=False, running=False)
        return running.view()

    async def ready(self, pod: dict[str, Any]) -> bool:
        return (await self.container(pod)).ready

    # ---- exits and restarts, as the kubelet decides them ------------------------------------------------
    def _watch(self, pod: dict[str, Any], running: _Running) -> None:
        name = f"exit {pod['metadata']['namespace']}/{pod['metadata']['name']}"
        running.watcher = asyncio.create_task(self._after_exit(pod, running, running.process), name=name)

    def _changed(self, pod: dict[str, Any]) -> None:
        if self.on_change is not None:
            self.on_change(pod)

    async def _after_exit(
        self, pod: dict[str, Any], running: _Running, process: asyncio.subprocess.Process
    ) -> None:
        returncode = await process.wait()
        if running.stopping or running.process is not process:
            return
        await self._stop_prober(running)
        code = exit_code(returncode)
        running.exit_code, running.finished_at = code, now_rfc3339()
        running.ready = running.started = False
        if not restarts_after((pod.get("spec") or {}).get("restartPolicy"), code):
            running.final = True
            log.info("simulated runtime: %s exited %d; not restarted", pod["metadata"]["name"], code)
            self._changed(pod)
            return
        ran_s = time.monotonic() - running.spawned
        delay, steps = restart_delay(
            running.backoff_steps, ran_s, self.crash_backoff_s, self.crash_backoff_max_s
        )
        running.waiting = CRASH_LOOP if delay > 0 else ""
        self._changed(pod)
        await asyncio.sleep(delay)
        if running.stopping or self.running.get(pod["metadata"]["uid"]) is not running:
            return
        running.process = await self._spawn(pod, running.env)
        running.spawned, running.started_at = time.monotonic(), now_rfc3339()
        running.restarts, running.backoff_steps, running.waiting = running.restarts + 1, steps, ""
        self._start_prober(pod, running)
        self._watch(pod, running)
        self._changed(pod)

    # ---- probe workers ---------------------------------------------------------------------------------
    def _start_prober(self, pod: dict[str, Any], running: _Running) -> None:
        container = self._container(pod)
        if not any(ExecProbe.of(container, kind) for kind in ("startupProbe", "readinessProbe")):
            running.started = running.ready = True  # no probes: Ready once started
            return
        name = f"probes {pod['metadata']['namespace']}/{pod['metadata']['name']}"
        running.prober = asyncio.create_task(self._probe_container(pod, running), name=name)

    @staticmethod
    async def _stop_watching(running: _Running) -> None:
        """No restart from here on (the pod is stopping or its node lost power)."""
        running.stopping = True
        task, running.watcher = running.watcher, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    @staticmethod
    async def _stop_prober(running: _Running) -> None:
        task, running.prober = running.prober, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def _period(self, probe: ExecProbe) -> float:
        return max(0.01, probe.period_s if self.probe_period_s is None else self.probe_period_s)

    async def _passes(self, probe: ExecProbe, running: _Running) -> bool:
        try:
            return await self._probe(probe.command, running.env, running.user)
        except OSError as error:  # the probe's command cannot start: a failed probe, as for the kubelet
            log.warning("simulated runtime: probe %s failed to start: %s", probe.command, error)
            return False

    def _set_ready(self, pod: dict[str, Any], running: _Running, ready: bool) -> None:
        if ready != running.ready:
            running.ready = ready
            if self.on_change is not None:
                self.on_change(pod)

    async def _until_tick(self, began: float, probe: ExecProbe) -> None:
        """Sleep to the probe's next tick: a kubelet probe worker ticks every period from its start, whatever
        ran in between (so a probe triggered off the beat, as readiness after startup, waits less)."""
        period = self._period(probe)
        ticks = math.floor((time.monotonic() - began) / period) + 1
        await asyncio.sleep(max(0.0, began + ticks * period - time.monotonic()))

    async def _probe_container(self, pod: dict[str, Any], running: _Running) -> None:
        container = self._container(pod)
        startup = ExecProbe.of(container, "startupProbe")
        readiness = ExecProbe.of(container, "readinessProbe")
        began = time.monotonic()
        if startup is not None:
            await asyncio.sleep(startup.initial_delay_s)
            while not await self._passes(startup, running):
                await self._until_tick(began, startup)
        running.started = True
        if readiness is None:
            self._set_ready(pod, running, True)
            return
        await asyncio.sleep(max(0.0, readiness.initial_delay_s - (time.monotonic() - began)))
        passes = fails = 0
        while True:
            if await self._passes(readiness, running):
                passes, fails = passes + 1, 0
                if passes >= readiness.success_threshold:
                    self._set_ready(pod, running, True)
            else:
                passes, fails = 0, fails + 1
                if fails >= readiness.failure_threshold:
                    self._set_ready(pod, running, False)
            await self._until_tick(began, readiness)

    async def _probe(self, command: list[str], env: dict[str, str], user: RunAs | None) -> bool:
        """Run one exec probe, as the container's user; it passes when the command exits 0."""
        checker = await asyncio.create_subprocess_exec(
            *command,
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            **self._as_user(user),
        )
        try:
            return await checker.wait() == 0
        except asyncio.CancelledError:  # the pod is stopping: so does its probe
            with contextlib.suppress(ProcessLookupError):
                checker.kill()
            await checker.wait()
            raise

    def kill(self, pod_uid: str) -> bool:
        """`kill -9` of the pod's container and what it started; False when it does not run."""
        running = self.running.get(pod_uid)
        if running is None or running.process.returncode is not None:
            return False
        kill_tree(running.process.pid)
        return True

    async def kill_node(self, node: str) -> int:
        """The node loses power: its containers die with what they started and are forgotten."""
        gone = [uid for uid, running in self.running.items() if running.node == node]
        for uid in gone:
            running = self.running.pop(uid)
            await self._stop_watching(running)
            await self._stop_prober(running)
            if running.process.returncode is None:
                kill_tree(running.process.pid)
            await running.process.wait()
            self._drop_sandbox(uid)
        return len(gone)

    async def stop_all(self) -> None:
        """Stop every container still running, restarting none (the rack or the test is ending)."""
        for uid in list(self.running):
            running = self.running[uid]
            await self._stop_watching(running)
            await self._stop_prober(running)
            with contextlib.suppress(ProcessLookupError):
                if running.process.returncode is None:
                    running.process.terminate()
        await asyncio.gather(*(r.process.wait() for r in self.running.values()))
        self.running.clear()

    async def stop(self, pod: dict[str, Any]) -> int | None:
        if not self.selects(pod):
            return 0  # a pod not run here was Ready at once: it ends as one that exits 0 on SIGTERM
        running = self.running.pop(pod["metadata"]["uid"], None)
        if running is None:
            return None
        self._drop_sandbox(pod["metadata"]["uid"])
        await self._stop_watching(running)
        await self._stop_prober(running)
        if running.process.returncode is not None:
            return exit_code(running.process.returncode)
        with contextlib.suppress(ProcessLookupError):
            running.process.send_signal(signal.SIGTERM)
        grace = stop_grace_s(pod)
        try:
            await wait_at_most(running.process.wait(), STOP_GRACE_S if grace is None else grace)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                running.process.kill()
            await running.process.wait()
        return exit_code(running.process.returncode or 0)
