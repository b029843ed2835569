"""A simulated kubelet for one node: plugin registration, DRA prepare/unprepare over gRPC, pod status.

On start it registers its Node (if absent) and deletes the node's ResourceSlices, as the real kubelet does.
Each pass it scans the plugin registration directory (cdctl.sim.node.pluginwatcher), and for every pod bound
to the node whose claims are allocated and reserved for it, calls NodePrepareResources on each driver's plugin
over its unix socket with the service version negotiated at registration (one call per driver with all the
pod's claims; every claim UID must come back without error; failed calls are retried with backoff), records
the CDI device IDs, hands the pod to a `PodRuntime` and marks it Running (Ready as the runtime says), or
Succeeded or Failed once its container exited for good (cdctl.sim.node.runtime's restart rules). When the pod
goes away, or ends, it stops it and calls NodeUnprepareResources for the claims it tried to prepare that no
other pod on the node still uses; a pod the API server marked for deletion is then given its final phase and
removed (cdctl.sim.node.termination: SIGTERM, SIGKILL after the deletion's grace period). A driver without a
registered plugin for `slice_wipe_delay_s` loses its slices on the node.

As a 1.36 kubelet, the running kubelet follows each registered plugin's resource-health stream
(cdctl.sim.node.healthwatch: re-opened every 5 s, every error kept in `health.errors`) and writes each running
pod's `allocatedResourcesStatus` from it. Like the kubelet's pod workers, the running kubelet starts each pod
in its own task, so a prepare call that waits (a channel claim waiting for its node's IMEX daemon, up to the
45 s budget) does not hold back other pods on the node (that daemon's own pod) nor their readiness; so does
each running pod prepared again after a restart (one waiting call holds back no other pod, and a pod that goes
away has its call cancelled, as the pod worker's context is); a pod that goes away is torn down in its own
task too (its containers stopped, as long as their grace period takes, then its claims unprepared), so other
pods of the node start meanwhile, as on a real node. Run by the rack; tests drive `sync()`, which starts pods
one after another and returns when they are done.

`restart(while_down)` stops the kubelet, runs `while_down` (a test deletes a CDI spec there) and starts it
again, keeping what the real kubelet keeps in its checkpoint (the pods it runs and their claims; their
containers run on): as the real kubelet does on start, it calls NodePrepareResources again for the claims of
pods still running, and resolves the CDI devices the plugin answers against the node's spec files (`cdi_dirs`)
as the runtime does when it creates a container. Devices that do not resolve leave the pod not Ready, with the
runtime's `unresolvable CDI devices` error, and are tried again each pass.

Node lifecycle: the running kubelet renews its Lease `kube-node-lease/<node>` (owned by the Node) every
`lease_renew_s` (10 s on a real node), which the node lifecycle controller
(cdctl.sim.controllers.nodelifecycle) watches; registration keeps what others wrote in the Node's status
(allocatable, say) and posts Ready. As the status manager does, a running pod whose Ready condition someone
else changed (the node lifecycle controller marks pods of a silent node not ready) is written back as the
kubelet sees it.

`power_off()` is the node going down: the kubelet stops and the node's containers are gone, while what the
kubelet keeps on disk stays (its DRA manager's checkpoint: which claims it prepared for which pods);
`power_on()` starts it again, registering the Node anew if it was deleted meanwhile. Claims of pods the
kubelet knew only from that checkpoint (pods force-deleted while it was down; one deleted gracefully stays
Terminating until the kubelet, back, ends it) are unprepared by the DRA manager's
reconcile, every `dra_reconcile_s` (60 s on a real node) or when a test calls `reconcile_dra()`; claims of
pods it saw go away while running are unprepared at once, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdctl.sim.apiserver.deletion import PODS_KEY as PODS
from cdctl.sim.apiserver.deletion import TERMINAL_PHASES
from cdctl.sim.apiserver.errors import ApiError, NotFound
from cdctl.sim.apiserver.objectmeta import now_rfc3339
from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.apiserver.watch import Watcher, WatchEvent
from cdctl.sim.node.cdiresolver import UnresolvableDevice, resolve
from cdctl.sim.node.draclient import (
    ClaimRef,
    NotPreparableYet,
    PrepareFailed,
    call_plugin,
    check_answer,
    claims_by_driver,
)
from cdctl.sim.node.healthwatch import HealthWatch, PreparedDevice, allocated_resources_status
from cdctl.sim.node.noderegistration import register, renew_lease
from cdctl.sim.node.noderouter import NodeRouter, concerned_nodes
from cdctl.sim.node.pluginwatcher import PluginWatcher
from cdctl.sim.node.podstatus import pod_status, with_addresses
from cdctl.sim.node.runtime import ContainerView, ImmediateRuntime, PodRuntime, not_created
from cdctl.sim.node.termination import finish_deletion, is_terminating, with_deletion_grace

log = logging.getLogger(__name__)
NODES = ("", "nodes")
SLICES = ("resource.k8s.io", "resourceslices")


def _ready_condition(pod: Mapping[str, Any]) -> bool | None:
    """The pod's Ready condition as the API has it (None: not written yet)."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return None


@dataclass
class RunningPod:
    pod: dict[str, Any]
    cdi_devices: list[str]
    ready: bool = False
    devices_error: str = ""  # after a restart: why its CDI devices do not resolve (the pod is not Ready)
    container: ContainerView | None = None  # what the runtime last said
    create_error: str = ""  # why the runtime could not create its container (tried again after a back-off)


@dataclass
class SimKubelet:
    store: ObjectStore
    node_name: str
    registry_dir: Path
    node_labels: dict[str, str] = field(default_factory=dict)
    node_ip: str = "192.168.0.1"
    pod_ip_prefix: str = "10.244.0."
    runtime: PodRuntime = field(default_factory=ImmediateRuntime)
    tick_s: float = 0.1
    router: NodeRouter | None = None  # wakes this kubelet for writes that concern its node; else a watch
    slice_wipe_delay_s: float = 30.0  # the kubelet's defaultWipingDelay after a driver deregisters
    retry_backoff_s: float = (
        0.5  # first delay after a failed prepare; doubles per failure up to max_backoff_s
    )
    max_backoff_s: float = 10.0
    cdi_dirs: list[Path] = field(default_factory=list)  # the node's CDI spec directories (checked on restart)
    running: dict[str, RunningPod] = field(default_factory=dict)  # by pod uid
    claim_refs: dict[str, dict[str, list[ClaimRef]]] = field(
        default_factory=dict
    )  # pod uid -> driver -> claims
    last_errors: dict[str, str] = field(default_factory=dict)  # pod uid -> why it is not running yet
    prepare_calls: list[tuple[str, str, list[str]]] = field(
        default_factory=list
    )  # (driver, service, claim uids)
    unprepare_calls: list[tuple[str, str, list[str]]] = field(default_factory=list)
    lease_renew_s: float = 10.0  # how often the running kubelet renews its node Lease
    lease_duration_s: int = 40  # the Lease's leaseDurationSeconds (the kubelet's nodeLeaseDurationSeconds)
    dra_reconcile_s: float = 60.0  # the DRA manager's reconcile period (claims of pods that are gone)

    def __post_init__(self) -> None:
        self.plugins = PluginWatcher(self.registry_dir)
        self._next_ip = 2
        self._task: asyncio.Task[None] | None = None
        self._registered: set[str] = set()
        self._failures: dict[str, int] = {}
        self._retry_at: dict[str, float] = {}
        self._deregistered_at: dict[str, float] = {}
        self._starting: dict[str, asyncio.Task[None]] = {}  # pod uid -> its start, in the running kubelet
        self._stopping: dict[str, asyncio.Task[None]] = {}  # pod uid -> its teardown, in the running kubelet
        self._wake: Watcher | None = None
        self._reprepare: set[str] = set()  # running pods to prepare again (the kubelet restarted)
        self.health = HealthWatch(self.node_name, on_change=self._health_changed)
        self.claim_devices: dict[str, list[PreparedDevice]] = {}  # claim uid -> what its prepare returned
        self.pod_claims: dict[str, dict[str, str]] = {}  # pod uid -> pod claim name -> claim uid
        self._workers: set[str] = set()  # pods this run of the kubelet has seen bound here (its pod workers)
        self._exit_codes: dict[str, int] = {}  # pod uid -> its stopped container's exit code, until removed
        self._lease_renewed_at = float("-inf")
        self._dra_reconciled_at = 0.0
        self.powered = True

    # ---- lifecycle -----------------------------------------------------------------------------------------
    def register_node(self) -> None:
        """Create the Node if absent, post Ready, renew the Lease, and wipe the node's ResourceSlices (kubelet
        start-up)."""
        node = register(self.store, self.node_name, self.node_labels, self.node_ip)
        self._renew_lease(node)
        slices = self.store.type_of(*SLICES)
        self.store.delete_collection(
            slices, None, lambda s: (s.get("spec") or {}).get("nodeName") == self.node_name
        )

    def _renew_lease(self, node: dict[str, Any] | None = None) -> None:
        self._lease_renewed_at = time.monotonic()
        renew_lease(self.store, self.node_name, self.lease_duration_s, node)

    async def start(self) -> None:
        self.powered = True
        self._workers = set(self.running)
        self._dra_reconciled_at = time.monotonic()
        self.register_node()
        self._task = asyncio.create_task(self._run(), name=f"sim-kubelet-{self.node_name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.health.stop()
        for uid in list(self._starting):
            await self._cancel_start(uid)
        for uid in list(self._stopping):
            stopping = self._stopping.pop(uid)
            stopping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stopping

    async def restart(self, while_down: Callable[[], None] | None = None) -> None:
        """Stop, run `while_down`, start: running pods are prepared again and their CDI devices resolved."""
        await self.stop()
        if while_down is not None:
            while_down()
        self._reprepare = set(self.running)
        await self.start()

    async def power_off(self) -> None:
        """The node goes down: the kubelet stops and the node's containers with it (the runtime's processes
        are the caller's to kill). What the kubelet keeps on disk stays: its DRA checkpoint (`claim_refs`)."""
        await self.stop()
        self.powered = False
        self.running.clear()
        self._reprepare.clear()
        self.last_errors.clear()
        self._failures.clear()
        self._retry_at.clear()
        self.plugins = PluginWatcher(self.registry_dir)  # plugin sockets are re-discovered after boot
        self._registered = set()
        self._deregistered_at.clear()

    async def power_on(self) -> None:
        """The node is back: start the kubelet (it registers the Node again if it was deleted)."""
        await self.start()

    def awaiting_dra_reconcile(self) -> list[str]:
        """Pods whose claims only the DRA manager's reconcile will unprepare (gone while the kubelet was
        down, never started by this run of it)."""
        return sorted(
            uid
            for uid in self.claim_refs
            if uid not in self._workers and uid not in self.running and uid not in self._starting
        )

    async def reconcile_dra(self) -> None:
        """The DRA manager's reconcile: unprepare the claims of pods that are gone and not running here."""
        self._dra_reconciled_at = time.monotonic()
        pods = self.store.pods_on_node(self.node_name)
        live = {p["metadata"]["uid"]: p for p in pods if not p["metadata"].get("deletionTimestamp")}
        for uid in [u for u in self.claim_refs if u not in live and u not in self.running]:
            if uid not in self._starting:
                await self._teardown(uid, live)

    async def _run(self) -> None:
        # Woken by what concerns this node (its pods and slices, claims allocated on it), else every tick:
        # on a big rack every kubelet waking on every write of the cluster was most of the work.
        if self.router is not None:
            watcher = self.router.attach(self.node_name)
        else:
            watcher = self.store.watch(None, matches=self._concerns_this_node, droppable=False)
        self._wake = watcher
        try:
            while True:
                try:
                    if time.monotonic() - self._lease_renewed_at >= self.lease_renew_s:
                        self._renew_lease()
                    await self.sync(wait=False)
                    if time.monotonic() - self._dra_reconciled_at >= self.dra_reconcile_s:
                        await self.reconcile_dra()
                    await self._follow_health()
                except ApiError as error:
                    log.warning("simulated kubelet %s: %s", self.node_name, error)
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow stop()'s cancellation
                # when the watch delivers at that moment: a busy cluster then never stops its kubelets.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.tick_s):
                        await watcher.next()
                while not watcher.queue.empty():
                    watcher.queue.get_nowait()
        finally:
            self._wake = None
            if self.router is not None:
                self.router.detach(self.node_name)
            else:
                self.store.hub.release(watcher)

    async def _follow_health(self) -> None:
        """Watch the health of every registered plugin; forget the ones that deregistered."""
        for driver, plugin in self.plugins.plugins.items():
            self.health.follow(driver, plugin.endpoint)
        for driver in self.health.followed() - set(self.plugins.plugins):
            await self.health.forget(driver)

    def _health_changed(self, driver: str) -> None:
        """A plugin's device health changed: rewrite the status of running pods whose claims use it."""
        for running in self.running.values():
            uses = {d.driver for c in self.pod_claims.get(running.pod["metadata"]["uid"], {}).values()
                    for d in self.claim_devices.get(c, [])}  # fmt: skip
            if driver in uses:
                with contextlib.suppress(ApiError):
                    self._write_status(running.pod, running.container or ContainerView(ready=running.ready))

    def poke(self) -> None:
        """Run a pass soon (the runtime's probes changed a pod's readiness), as a watch event would."""
        if self._wake is not None:
            self._wake.queue.put_nowait(WatchEvent("POKED", {}, PODS))

    def _concerns_this_node(self, obj: Mapping[str, Any]) -> bool:
        return self.node_name in concerned_nodes(obj)

    def _wipe_slices_of_gone_drivers(self) -> None:
        """Delete a driver's slices on this node once it has had no registered plugin for the wipe delay."""
        current = set(self.plugins.plugins)
        now = time.monotonic()
        for driver in self._registered - current:
            self._deregistered_at.setdefault(driver, now)
        for driver in current:
            self._deregistered_at.pop(driver, None)
        self._registered = current
        for driver, since in list(self._deregistered_at.items()):
            if now - since < self.slice_wipe_delay_s:
                continue
            del self._deregistered_at[driver]
            log.info(
                "simulated kubelet %s: wiping ResourceSlices of deregistered driver %s",
                self.node_name,
                driver,
            )
            self.store.delete_collection(self.store.type_of(*SLICES), None, self._slice_filter(driver))

    def _slice_filter(self, driver: str) -> Callable[[Mapping[str, Any]], bool]:
        def on_this_node(resource_slice: Mapping[str, Any]) -> bool:
            spec = resource_slice.get("spec") or {}
            return bool(spec.get("nodeName") == self.node_name and spec.get("driver") == driver)

        return on_this_node

    def pods_holding_claims(self) -> int:
        """How many pods' DRA claims this kubelet holds (pods without claims, such as the components', hold
        none)."""
        return sum(1 for refs in self.claim_refs.values() if refs)

    def cdi_devices(self, pod_uid: str) -> list[str]:
        running = self.running.get(pod_uid)
        return list(running.cdi_devices) if running else []

    # ---- one pass ------------------------------------------------------------------------------------------
    async def sync(self, *, wait: bool = True) -> None:
        """One pass. `wait=False` (the running kubelet) starts pods in background tasks instead of in turn."""
        await self.plugins.scan()
        self._wipe_slices_of_gone_drivers()
        live = self._live_pods()  # the kubelet's spec.nodeName field selector
        terminating = self._terminating_pods()
        for uid in [u for u in {*self.running, *self.claim_refs, *self._starting} if u not in live]:
            known = uid in self._workers or uid in self.running or uid in self._starting or uid in terminating
            if not known:
                continue  # known only from the DRA checkpoint: the DRA manager's reconcile unprepares it
            if not wait:  # the pod's own worker: its containers' grace period holds back no other pod
                if uid not in self._stopping:
                    self._stopping[uid] = asyncio.create_task(self._teardown_in_background(uid))
                continue
            await self._cancel_start(uid)
            await self._teardown(uid, live)
        for uid in terminating - {*self.running, *self.claim_refs, *self._starting, *self._stopping}:
            finish_deletion(self.store, uid, None)  # nothing ran here for it: it only needs removing
        self._workers.update(live)
        for uid, pod in live.items():
            if uid in self.running:
                if uid in self._reprepare or self.running[uid].devices_error:
                    if wait:
                        await self._prepare_again(uid, self.running[uid])
                    elif uid not in self._starting:
                        self._starting[uid] = asyncio.create_task(self._prepare_again_in_background(uid))
                elif self.running[uid].create_error and time.monotonic() >= self._retry_at.get(uid, 0.0):
                    if wait:
                        await self._create_container(self.running[uid])
                    elif uid not in self._starting:
                        self._starting[uid] = asyncio.create_task(self._create_in_background(uid))
                await self._refresh_readiness(self.running[uid], pod)
            elif wait:
                await self._try_start(pod)
            elif uid not in self._starting:
                self._starting[uid] = asyncio.create_task(self._start_in_background(uid, pod))

    async def _start_in_background(self, uid: str, pod: dict[str, Any]) -> None:
        try:
            await self._try_start(pod)
        except ApiError as error:
            log.warning(
                "simulated kubelet %s: starting %s: %s", self.node_name, pod["metadata"]["name"], error
            )
        finally:
            self._starting.pop(uid, None)

    async def _teardown_in_background(self, uid: str) -> None:
        """Stop a gone pod's containers (as long as their grace period takes), then unprepare its claims that
        no pod live by then still uses."""
        try:
            await self._cancel_start(uid)
            if uid in self.running:
                # Shielded: a kubelet restart mid-way leaves the container stopping, never untracked alive.
                await asyncio.shield(self._stop_containers(uid))
            await self._teardown(uid, self._live_pods())
        except ApiError as error:
            log.warning("simulated kubelet %s: tearing down %s: %s", self.node_name, uid, error)
        finally:
            self._stopping.pop(uid, None)

    def _terminating_pods(self) -> set[str]:
        """Pods bound here that the API server marked for deletion: the kubelet ends and removes them."""
        return {p["metadata"]["uid"] for p in self.store.pods_on_node(self.node_name) if is_terminating(p)}

    def _live_pods(self) -> dict[str, dict[str, Any]]:
        return {
            p["metadata"]["uid"]: p
            for p in self.store.pods_on_node(self.node_name)
            if not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in TERMINAL_PHASES
        }

    async def _prepare_again_in_background(self, uid: str) -> None:
        try:
            running = self.running.get(uid)
            if running is not None:
                await self._prepare_again(uid, running)
        finally:
            self._starting.pop(uid, None)

    async def _cancel_start(self, uid: str) -> None:
        """Stop a start in flight (its pod went away); the claims it asked for stay known to teardown."""
        task = self._starting.pop(uid, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _try_start(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        if time.monotonic() < self._retry_at.get(uid, 0.0):
            return
        try:
            by_driver = self._claims_by_driver(pod)
            # Like the kubelet's claim cache: known before the call, so a pod deleted after a failed prepare
            # still gets its claims unprepared.
            self.claim_refs[uid] = by_driver
            cdi_devices: list[str] = []
            for driver, refs in by_driver.items():
                cdi_devices += await self._prepare(driver, refs)
        except NotPreparableYet as reason:
            self.last_errors[uid] = str(reason)
            return
        except PrepareFailed as reason:
            self.last_errors[uid] = str(reason)
            failures = self._failures.get(uid, 0) + 1
            self._failures[uid] = failures
            delay = min(self.max_backoff_s, self.retry_backoff_s * 2 ** (failures - 1))
            self._retry_at[uid] = time.monotonic() + delay
            return
        self._forget_failures(uid)
        pod = self._assign_address(pod)
        running = RunningPod(pod, cdi_devices)
        self.running[uid] = running
        await self._create_container(running, first=True)

    async def _create_container(self, running: RunningPod, first: bool = False) -> None:
        """Have the runtime create and start the pod's container. When it cannot (an unresolvable CDI device,
        a missing command) the pod stays Pending with CreateContainerError, and the next pass after a back-off
        tries again, as the kubelet's pod worker does."""
        uid = running.pod["metadata"]["uid"]
        try:
            await self.runtime.start(running.pod, running.cdi_devices)
        except (OSError, ValueError, UnresolvableDevice) as error:
            running.create_error = f"{type(error).__name__}: {error}"
            self.last_errors[uid] = f"creating the container: {running.create_error}"
            failures = self._failures.get(uid, 0) + 1
            self._failures[uid] = failures
            self._retry_at[uid] = time.monotonic() + min(
                self.max_backoff_s, self.retry_backoff_s * 2 ** (failures - 1)
            )
        else:
            running.create_error = ""
            self._forget_failures(uid)
        await self._refresh_readiness(running, running.pod, first=first)

    async def _create_in_background(self, uid: str) -> None:
        try:
            running = self.running.get(uid)
            if running is not None:
                await self._create_container(running)
        finally:
            self._starting.pop(uid, None)

    async def _prepare_again(self, uid: str, running: RunningPod) -> None:
        """After a restart: NodePrepareResources again for a running pod's claims, then its CDI devices must
        resolve on the node (checked again each pass until they do, as container creation is retried)."""
        if uid in self._reprepare:
            if time.monotonic() < self._retry_at.get(uid, 0.0):
                return
            try:
                cdi_devices: list[str] = []
                for driver, refs in self.claim_refs.get(uid, {}).items():
                    cdi_devices += await self._prepare(driver, refs)
            except PrepareFailed as reason:
                self.last_errors[uid] = str(reason)
                failures = self._failures.get(uid, 0) + 1
                self._failures[uid] = failures
                self._retry_at[uid] = time.monotonic() + min(
                    self.max_backoff_s, self.retry_backoff_s * 2 ** (failures - 1)
                )
                return
            self._reprepare.discard(uid)
            running.cdi_devices = cdi_devices
        try:
            resolve(self.cdi_dirs, running.cdi_devices)
        except UnresolvableDevice as error:
            running.devices_error = f"starting the pod: {error}"
            self.last_errors[uid] = running.devices_error
            return
        running.devices_error = ""
        self._forget_failures(uid)

    def _assign_address(self, pod: dict[str, Any]) -> dict[str, Any]:
        """Give the pod its IP before its containers start (the sandbox comes first), so env can use it."""
        pods = self.store.type_of(*PODS)
        latest = self.store.get(pods, pod["metadata"]["namespace"], pod["metadata"]["name"])
        status = dict(latest.get("status") or {})
        if status.get("podIP"):
            return latest
        address = f"{self.pod_ip_prefix}{self._next_ip}"
        self._next_ip += 1
        status = with_addresses(status, address, self.node_ip, now_rfc3339())
        return self.store.update(
            pods,
            latest["metadata"]["namespace"],
            latest["metadata"]["name"],
            {**latest, "status": status},
            subresource="status",
        )

    def _forget_failures(self, uid: str) -> None:
        self.last_errors.pop(uid, None)
        self._failures.pop(uid, None)
        self._retry_at.pop(uid, None)

    def _claims_by_driver(self, pod: dict[str, Any]) -> dict[str, list[ClaimRef]]:
        by_driver, by_pod_name = claims_by_driver(self.store, pod)
        self.pod_claims[pod["metadata"]["uid"]] = by_pod_name
        return by_driver

    async def _call(self, driver: str, refs: list[ClaimRef], prepare: bool) -> dict[str, Any]:
        plugin = self.plugins.plugins.get(driver)
        if plugin is None:
            raise NotPreparableYet(f"DRA driver {driver} is not registered")
        answered = await call_plugin(plugin, driver, refs, prepare=prepare)
        calls = self.prepare_calls if prepare else self.unprepare_calls
        calls.append((driver, plugin.service, [r.uid for r in refs]))
        check_answer(driver, refs, answered)
        return answered

    async def _prepare(self, driver: str, refs: list[ClaimRef]) -> list[str]:
        answered = await self._call(driver, refs, prepare=True)
        for ref in refs:
            self.claim_devices[ref.uid] = [
                PreparedDevice(driver, d.pool_name, d.device_name, tuple(d.cdi_device_ids))
                for d in answered[ref.uid].devices
            ]
        return [cdi for ref in refs for device in answered[ref.uid].devices for cdi in device.cdi_device_ids]

    async def _stop_containers(self, uid: str) -> None:
        """Stop the pod's containers, within its deletion's grace period if it is being deleted."""
        running = self.running.get(uid)
        if running is not None:
            code = await self.runtime.stop(with_deletion_grace(running.pod, self.store.peek_uid(uid)))
            if code is not None:
                self._exit_codes[uid] = code

    async def _teardown(self, uid: str, live: dict[str, dict[str, Any]]) -> None:
        """Stop a pod that is gone, ended or being deleted; unprepare its claims that no live pod uses; and,
        for a pod being deleted, write its final status and delete it (cdctl.sim.node.termination)."""
        await self._stop_containers(uid)
        still_used = {
            ref.uid
            for other_uid, by_driver in self.claim_refs.items()
            if other_uid != uid and other_uid in live
            for refs in by_driver.values()
            for ref in refs
        }
        try:
            for driver, refs in self.claim_refs.get(uid, {}).items():
                unused = [ref for ref in refs if ref.uid not in still_used]
                if unused:
                    await self._call(driver, unused, prepare=False)
        except PrepareFailed as reason:
            self.last_errors[uid] = str(reason)
            return
        self.running.pop(uid, None)
        self._reprepare.discard(uid)
        for refs in self.claim_refs.pop(uid, {}).values():
            for ref in refs:
                if ref.uid not in still_used:
                    self.claim_devices.pop(ref.uid, None)
        self.pod_claims.pop(uid, None)
        self._forget_failures(uid)
        finish_deletion(self.store, uid, self._exit_codes.pop(uid, None))

    # ---- pod status ----------------------------------------------------------------------------------------
    async def _refresh_readiness(self, running: RunningPod, pod: dict[str, Any], first: bool = False) -> None:
        container = (
            not_created(running.create_error) if running.create_error else await self.runtime.container(pod)
        )
        if running.devices_error:
            container = dataclasses.replace(container, ready=False)
        ready = container.ready
        if not first and container == running.container and _ready_condition(pod) in (None, ready):
            return
        running.ready, running.container = ready, container
        self._write_status(pod, container)

    def _write_status(self, pod: dict[str, Any], container: ContainerView) -> None:
        pods = self.store.type_of(*PODS)
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        try:
            latest = self.store.get(pods, namespace, name)
        except NotFound:
            return
        if (latest.get("status") or {}).get("phase") in TERMINAL_PHASES:
            return  # a pod that ended never runs again (its claims are being unprepared)
        status = pod_status(latest, container, now_rfc3339())
        self._add_resource_health(latest, status)
        if status == latest.get("status"):
            return
        self.store.update(pods, namespace, name, {**latest, "status": status}, subresource="status")

    def _add_resource_health(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        """Each container's allocatedResourcesStatus, from the health streams (left out when empty)."""
        claims = self.pod_claims.get(pod["metadata"]["uid"], {})
        containers = {c["name"]: c for c in (pod.get("spec") or {}).get("containers") or []}
        for entry in status.get("containerStatuses") or []:
            found = allocated_resources_status(
                containers.get(entry["name"], {}), claims, self.claim_devices, self.health.health
            )
            if found:
                entry["allocatedResourcesStatus"] = found
