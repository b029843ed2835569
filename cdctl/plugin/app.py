"""The kubelet plugin process: start-up order, background loops and shutdown.

Called by `cdctl kubelet-plugin` (cdctl.cli.plugin) with a `PluginConfig`. Start-up: directories, clique
discovery (a fabric that is not COMPLETED under CrashOnNVLinkFabricErrors does not stop the plugin: it serves
without `channel-0`, says why in the log and in an Event on the Node, and re-probes), the driver-version rule
of IMEXDaemonsWithDNSNames, the event log (rebuild, boot id), the base CDI spec, the cluster adapter, the gRPC
servers (DRA first, then registration, then health), then the loops: ResourceSlice publishing (after each
registration, when the slice changes or vanishes, and periodically), the fabric loop (an NVML probe every
`fabric_reprobe_s` and whenever `recheck` is set: it waits for a fabric that is not COMPLETED yet and
publishes device health, cdctl.plugin.nodecheck), the stale-claim and domain-directory sweeps, and the
projection runner that keeps this log's read models (claim_lifecycle, channel_allocations,
checkpoint_transitions) current, the clique refresh (cdctl.plugin.cliquerefresh: every `clique_refresh_s`, and
the `nvidia.com/gpu.clique` label with `gpu_clique_label`), and the retention loop
(cdctl.projections.retention: it compacts the log under `cfg.retention`, keeping the lifecycle views and the
claim book at the horizon, and prunes `imex-history/` by the same policy, cdctl.plugin.imexhistory). With
`otlp_endpoint` every committed event is also exported (cdctl.store.otlp). Stops cleanly when `stop` is set.

A node without a usable GPU driver (NVML cannot be loaded) does not crash-loop: the plugin says why once (a
log line and a Node Event), publishes no ResourceSlice (it deletes any of this driver's slices on the node),
and keeps serving registration and an empty device-health list. The fabric loop keeps probing; once NVML
loads, the plugin records that and returns from `run` (`restart_requested`) so that its container restarts and
starts up with the driver, instead of re-doing start-up steps in place.

Under channel isolation (`cfg.isolation`) the slice carries the node's shared channel capacity instead of
`channel-0` and `daemon-0` (cdctl.plugin.channels): with `channel_capacity` auto, the multi-allocatable
device first; when the API server stores it without `allowMultipleAllocations` (DRA consumable capacity off:
the server drops a disabled feature's fields on write) the plugin says so (log, Node Event
ConsumableCapacityUnavailable) and publishes slot devices from then on. The clique objects are followed in
both IMEX modes (the channel is on them), and under driver-managed IMEX so is the shared daemon's pod here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog

from cdctl.api import gates as fg
from cdctl.api.isolation import ImexIsolation
from cdctl.api.shareddaemon import SHARED_DIR
from cdctl.domain import claims as c
from cdctl.domain.errors import CdctlError, PermanentError, RetriableError
from cdctl.domain.events import Actor
from cdctl.k8s import nodes, plugincluster
from cdctl.k8s.discovery import NoResourceApiError, discover_resource_version
from cdctl.k8s.errors import KubeApiError
from cdctl.k8s.informer import Informer
from cdctl.k8s.resourceslices import (
    SlicePublisher,
    allows_multiple_allocations,
    resource_slices,
)
from cdctl.k8s.rest import KubeApi
from cdctl.k8s.tokens import TokenReviewer
from cdctl.plugin import cdi, imexhistory, nvml
from cdctl.plugin import channels as ch
from cdctl.plugin.checkpoint import ClaimBook, ClaimBookProjection, read_boot_id
from cdctl.plugin.cliquerefresh import CliqueRefresher
from cdctl.plugin.devices import DRIVER_NAME
from cdctl.plugin.driver import Driver
from cdctl.plugin.edits import write_shared_dir
from cdctl.plugin.eventlogs import COMPONENT, served_logs
from cdctl.plugin.health import HealthBoard
from cdctl.plugin.hostimex import CTL, HostImexCheck, find_ctl
from cdctl.plugin.metrics import MetricsEndpoint, PluginMetrics
from cdctl.plugin.nodecheck import NodeCheck
from cdctl.plugin.nodecheck import probe as probe_lib
from cdctl.plugin.pluginconfig import (
    PluginConfig,
    base_edits,
    device_lib,
    make_private_dirs,
    published_devices,
)
from cdctl.plugin.prepare import DeviceState
from cdctl.plugin.preparesettings import FabricStatus, PrepareSettings
from cdctl.plugin.server import PluginServers, ServerPaths
from cdctl.projections.lifecycle import lifecycle_projections
from cdctl.projections.retention import Retention
from cdctl.projections.runner import ProjectionRunner
from cdctl.store import SqliteEventStore, otlp
from cdctl.store.integrity import read_key_file
from cdctl.store.logserver import LogServer
from cdctl.store.metrics import EventLogCollector, OtlpExportCollector, ProjectionLagCollector
from cdctl.store.otlp import ExportSource

log = structlog.get_logger("cdctl.plugin.app")

T = TypeVar("T")


async def with_retries(what: str, call: Callable[[], Awaitable[T]], budget_s: float = 60.0) -> T:
    """Start-up steps that may fail transiently (API server busy, event log locked): retry with backoff."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + budget_s
    delay = 0.1
    while True:
        try:
            return await call()
        except (RetriableError, KubeApiError) as exc:
            if isinstance(exc, KubeApiError) and not exc.retriable:
                raise
            if loop.time() + delay > deadline:
                raise
            log.warning(f"{what} failed; retrying", error=str(exc), delay=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


def probe_fabric(lib: nvml.DeviceLib, strict: bool, single_node: bool = False) -> nvml.CliqueDiscovery:
    found = nvml.discover_clique(lib.probe(), strict=strict, single_node=single_node)
    for note in found.notes:
        log.info(note)
    return found


class PluginProcess:
    """Everything the running plugin owns; `run` until `stop` is set."""

    def __init__(self, cfg: PluginConfig, device_lib: nvml.DeviceLib | None = None) -> None:
        """`device_lib` replaces the one `cfg` selects (the simulator passes its live fake fabric)."""
        self.cfg = cfg
        self._device_lib = device_lib
        self.fabric = FabricStatus()
        self.republish = asyncio.Event()
        self.bump_generation = False  # the next publish raises the pool generation (the clique changed)
        self.cliques: CliqueRefresher | None = None
        self.recheck = asyncio.Event()  # set: probe NVML and re-check device health now
        self.board = HealthBoard(resend_s=cfg.fabric_reprobe_s, timeout_s=int(4 * cfg.fabric_reprobe_s) + 1)
        self.check: NodeCheck | None = None
        self.driver_missing: str | None = None
        self.restart_requested = asyncio.Event()
        self.host_managed = cfg.gates.enabled(fg.HOST_MANAGED_IMEX)
        self.channel_isolation = cfg.isolation is ImexIsolation.CHANNEL
        self.shared: ch.SharedChannels | None = None  # channel isolation: what the node publishes
        self.store: SqliteEventStore | None = None
        self.api: KubeApi | None = None
        self.cluster: plugincluster.KubeClusterPort | None = None
        self.servers: PluginServers | None = None
        self.state: DeviceState | None = None
        self.driver: Driver | None = None
        self.runner: ProjectionRunner | None = None
        self.retention: Retention | None = None
        self.metrics = PluginMetrics(cfg.node_name)
        self.http: MetricsEndpoint | None = None
        self.export: otlp.OtlpExport | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await self._start()
            waits = [asyncio.ensure_future(e.wait()) for e in (stop, self.restart_requested)]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()
        finally:
            await self._stop()

    async def _start(self) -> None:
        cfg = self.cfg
        for note in (*cfg.gates.overrides, *cfg.gates.ignored):
            log.info(note)
        log.info(
            "starting kubelet plugin", node=cfg.node_name, gates=cfg.gates.explicit(), db=str(cfg.db_path)
        )
        make_private_dirs(cfg.plugin_dir)
        cfg.cdi_root.mkdir(mode=0o755, parents=True, exist_ok=True)  # the container runtime reads the specs
        lib = self._device_lib or device_lib(cfg)
        strict = cfg.gates.enabled(fg.CRASH_ON_NVLINK_FABRIC_ERRORS)
        try:
            self.fabric.single_node = await asyncio.to_thread(lib.single_node_fabric)
            found = await asyncio.to_thread(probe_fabric, lib, strict, self.fabric.single_node)
        except nvml.NvmlUnavailable as exc:
            self.driver_missing = str(exc)
            found = nvml.CliqueDiscovery("")
            log.warning(
                "no usable GPU driver on this node: serving registration and health, publishing no devices",
                reason=self.driver_missing,
            )
        self.fabric.clique_id, self.fabric.pending = found.clique_id, found.pending
        if self.driver_missing:
            pass
        elif found.pending:
            log.warning(
                "NVLink fabric not ready: serving without channel-0 until it completes", reason=found.pending
            )
        else:
            log.info("identified fabric clique", clique_id=found.clique_id or "(none)")
        if self.channel_isolation:
            gpus = 0 if self.driver_missing else len(await asyncio.to_thread(lib.probe))
            self.shared = ch.SharedChannels(cfg.channel_capacity, ch.slot_count(cfg.channel_slots, gpus))
            log.info("channel isolation", capacity=cfg.channel_capacity.value, slots=self.shared.slots)
            await self._write_shared_dir()
        if cfg.gates.enabled(fg.IMEX_DAEMONS_WITH_DNS_NAMES) and not self.driver_missing:
            version = await asyncio.to_thread(lib.driver_version)
            if not nvml.driver_version_at_least(version):
                raise PermanentError(
                    f"minimum version not satisfied for IMEXDaemonsWithDNSNames feature (driver {version} < "
                    "570.158.01); set featureGates.IMEXDaemonsWithDNSNames=false"
                )
            log.info("driver version validation passed", version=version)
        host_imex = self._host_imex()  # a config without the tool to ask with is refused before anything runs
        key = read_key_file(cfg.log_key_file) if cfg.log_key_file is not None else None
        self.store = await with_retries(
            "opening the event log", lambda: SqliteEventStore.open(cfg.db_path, key=key)
        )
        log.info("event log opened", path=str(cfg.db_path), chain=self.store.scheme.name,
                 head=self.store.chain_head()[0], checked=self.store.checked_at_open)  # fmt: skip
        if cfg.otlp_endpoint:
            source = ExportSource("kubelet-plugin", cfg.node_name, cfg.pod_name, cfg.namespace, "plugin")
            self.export = otlp.attach(self.store, cfg.otlp_endpoint, source)
            self.metrics.registry.register(OtlpExportCollector(self.export))
        self.runner = ProjectionRunner(self.store, lifecycle_projections())
        runner = self.runner
        self.metrics.registry.register(EventLogCollector(self.store))
        self.metrics.registry.register(ProjectionLagCollector(self.store, lambda: runner.positions))
        await self.runner.start()
        book = await ClaimBook.load(self.store, cfg.node_name, Actor("kubelet-plugin", node=cfg.node_name))
        invalidated = await book.observe_boot(read_boot_id(cfg.boot_id_path), self.fabric.clique_id)
        if self.fabric.pending:  # when the fabric's wait began, for `cdctl explain` (fabric-degraded)
            await book.record_node(c.FabricStateChanged(cfg.node_name, False, self.fabric.pending))
        cdi.write_spec(cdi.base_spec_path(cfg.cdi_root), cdi.build_base_spec(base_edits(cfg)))
        self.api = await plugincluster.connect(cfg.kubeconfig, cfg.kube_api_qps, cfg.kube_api_burst)
        api = self.api
        node_obj = await with_retries("reading the Node", lambda: nodes.get_node(api, cfg.node_name))
        node_uid = str(node_obj["metadata"]["uid"])
        try:
            version = await with_retries(
                "discovering resource.k8s.io",
                lambda: discover_resource_version(api, cfg.resource_api_version),
            )
        except NoResourceApiError as exc:
            raise PermanentError(str(exc)) from exc
        self.cluster = plugincluster.KubeClusterPort(
            self.api, resource_version=version, driver_namespace=cfg.namespace, node_uid=node_uid,
            use_cliques=self.channel_isolation or (
                cfg.gates.enabled(fg.COMPUTE_DOMAIN_CLIQUES) and not self.host_managed
            ),
            watch_claims=cfg.watch_claims, channel_count=cfg.channel_count,
        )  # fmt: skip
        # The Node (label decisions) and cliques (daemon readiness) are followed only where there are daemons:
        # under HostManagedIMEX the chart grants neither watch. Under channel isolation no label is written,
        # the cliques carry the channels, and driver-managed, the shared daemon's pod here says it is Ready.
        labels = not (self.host_managed or self.channel_isolation)
        shared_daemon = self.channel_isolation and not self.host_managed
        self.cluster.start(
            cfg.node_name if labels else None, self.fabric.clique_id or None,
            shared_daemon_node=cfg.node_name if shared_daemon else None,
        )  # fmt: skip
        settings = PrepareSettings(
            node=cfg.node_name,
            plugin_dir=cfg.plugin_dir,
            cdi_root=cfg.cdi_root,
            driver_namespace=cfg.namespace,
            additional_namespaces=cfg.additional_namespaces,
            proc_devices=cfg.proc_devices,
            fabric_imex_mgmt_cap=cfg.fabric_imex_mgmt_cap,
            host_managed=self.host_managed,
            isolation=cfg.isolation,
            channel_slots=self.shared.slots if self.shared else 0,
            channel_count=cfg.channel_count,
            handover_hold_s=cfg.handover_hold_s,
        )
        self.state = DeviceState(settings, book, self.cluster, self.fabric, host_imex=host_imex)
        removed = self.state.remove_orphan_specs()
        if invalidated or removed:
            log.info(
                "cleaned up after reboot/crash", invalidated=len(invalidated), specs_removed=len(removed)
            )
        if found.pending:
            await self.cluster.node_event(cfg.node_name, "NVLinkFabricNotReady", found.pending)
        if self.driver_missing:
            await self.cluster.node_event(
                cfg.node_name, "GPUDriverNotFound",
                f"{self.driver_missing}: no GPU driver on this node; compute-domain.nvidia.com publishes no "
                "devices here (the plugin restarts itself once the driver loads)",
            )  # fmt: skip
        self.check = NodeCheck(
            node=cfg.node_name, host_managed=self.host_managed, proc_devices=cfg.proc_devices,
            fabric=self.fabric, board=self.board, book=book, cluster=self.cluster,
        )  # fmt: skip
        self.check.driver_missing = self.driver_missing
        self.check.shared = self.shared
        publisher = SlicePublisher(
            self.api, node=cfg.node_name, node_uid=node_uid, driver=DRIVER_NAME, version=version
        )
        self.metrics.observe_records(book.records())
        if cfg.http_endpoint:
            self.http = MetricsEndpoint(cfg.http_endpoint, cfg.metrics_path, self.metrics, self._log_server())
            await self.http.start()
        self.driver = Driver(self.state, self.cluster, metrics=self.metrics)
        self.servers = PluginServers(
            ServerPaths(cfg.registrar_dir, cfg.plugin_dir), self.driver, self.republish.set,
            cfg.healthcheck_port, self.board,
        )  # fmt: skip
        self.cliques = CliqueRefresher(
            lib=lib, strict=strict, fabric=self.fabric, republish=self._republish_new_pool,
            node_event=lambda reason, message, warning: self._node_event(reason, message, warning),
            set_label=self._set_clique_label if cfg.gpu_clique_label else None,
            on_change=self._clique_changed, interval_s=cfg.clique_refresh_s,
        )  # fmt: skip
        if not self.driver_missing:
            await with_retries("setting the node's clique label", self.cliques.apply_label)
        await self.servers.start()
        self.republish.set()
        self._tasks = [
            asyncio.create_task(self._publish_loop(publisher), name="slice-publisher"),
            asyncio.create_task(self._watch_slices(version), name="slice-watch"),
            asyncio.create_task(self._sweep_loop(), name="claim-sweep"),
            asyncio.create_task(self._project_loop(), name="projections"),
        ]
        actor = Actor("kubelet-plugin", node=cfg.node_name)
        self.retention = Retention(
            self.store, cfg.retention, [*lifecycle_projections(), ClaimBookProjection(cfg.node_name)],
            actor=actor, interval_s=cfg.retention_interval_s, first_delay_s=cfg.retention_first_delay_s,
            after_round=lambda: self._after_retention_round(actor),
        )  # fmt: skip
        self._tasks.append(asyncio.create_task(self.retention.run(), name="retention"))
        self._tasks.append(asyncio.create_task(self._fabric_loop(lib, strict), name="fabric-loop"))
        if not self.driver_missing:
            self._tasks.append(asyncio.create_task(self.cliques.run(), name="clique-refresh"))

    def _republish_new_pool(self) -> None:
        self.bump_generation = True
        self.republish.set()

    async def _node_event(self, reason: str, message: str, warning: bool) -> None:
        assert self.cluster is not None
        await self.cluster.node_event(self.cfg.node_name, reason, message, warning=warning)

    async def _set_clique_label(self, clique_id: str) -> None:
        assert self.api is not None
        await nodes.set_gpu_clique_label(self.api, self.cfg.node_name, clique_id)

    def _clique_changed(self) -> None:
        """The clique watch of driver-managed mode is keyed by the old clique: restart to follow the new one
        (after the slice is republished, which the restart repeats anyway)."""
        assert self.cluster is not None
        if self.cluster.use_cliques:
            log.warning("restarting to follow the new clique's ComputeDomainCliques")
            self.restart_requested.set()

    def _host_imex(self) -> HostImexCheck | None:
        """HostManagedIMEX with the host's IMEX config given: how to ask that IMEX whether it is ready."""
        config = self.cfg.host_imex_config
        if config is None:
            return None
        if not self.host_managed:
            log.warning("--host-imex-config is ignored: IMEX is driver-managed here", config=str(config))
            return None
        ctl = find_ctl(self.cfg.container_driver_root)
        if ctl is None:
            raise PermanentError(
                f"--host-imex-config {config}: {CTL} is neither in the driver root "
                f"({self.cfg.container_driver_root}) nor on PATH; it is needed to ask the host's IMEX"
            )
        log.info(
            "a channel is handed out only while the host's IMEX answers READY",
            ctl=str(ctl),
            config=str(config),
        )
        return HostImexCheck(ctl, config)

    async def _write_shared_dir(self) -> None:
        """Channel isolation, driver-managed: the shared IMEX daemon's directory, once the fabric has a
        clique (a daemon waits for the clique ID; a node outside any fabric gets an empty one)."""
        if self.channel_isolation and not self.host_managed and self.fabric.pending is None:
            root = self.cfg.plugin_dir / SHARED_DIR
            await asyncio.to_thread(write_shared_dir, root, self.fabric.clique_id)

    def _log_server(self) -> LogServer | None:
        """The read-only event-log routes (`cdctl collect`), when a reader is configured."""
        cfg = self.cfg
        if not cfg.event_log_reader:
            return None
        if not cfg.pod_name:
            log.warning("not serving the event logs: the plugin's pod name is unknown (--pod-name, POD_NAME)")
            return None
        assert self.api is not None
        reviewer = TokenReviewer(self.api, cfg.namespace, cfg.pod_name, cfg.event_log_reader)
        identity = {"component": COMPONENT, "node": cfg.node_name, "pod": cfg.pod_name}
        return LogServer(identity, lambda: served_logs(cfg.plugin_dir, cfg.db_path), reviewer)

    async def _publish_loop(self, publisher: SlicePublisher) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.cfg.resync_s):
                    await self.republish.wait()
            self.republish.clear()
            bump, self.bump_generation = self.bump_generation, False
            try:
                if self.driver_missing:
                    await publisher.withdraw()
                else:
                    await publisher.sync(
                        published_devices(self.fabric, self.host_managed, self.shared), bump=bump
                    )
                    await self._check_consumable(publisher)
            except KubeApiError as exc:
                self.bump_generation = self.bump_generation or bump
                log.warning("publishing the ResourceSlice failed; retrying", error=str(exc))
                await asyncio.sleep(1.0)
                self.republish.set()

    async def _check_consumable(self, publisher: SlicePublisher) -> None:
        """Channel isolation, capacity auto: a shared device the API server stored without
        `allowMultipleAllocations` means DRA consumable capacity is off; publish slots from now on."""
        shared = self.shared
        if shared is None or not shared.consumable or shared.refused:
            return
        stored = [d for d in publisher.stored if d.get("name") == ch.SHARED_DEVICE]
        if not stored or allows_multiple_allocations(stored[0]):
            return
        message = shared.consumable_refused()
        log.warning(message)
        assert self.cluster is not None
        await self.cluster.node_event(self.cfg.node_name, "ConsumableCapacityUnavailable", message)
        self.republish.set()

    async def _watch_slices(self, version: str) -> None:
        assert self.api is not None
        informer = Informer(
            self.api, resource_slices(version),
            field_selector=f"spec.driver={DRIVER_NAME},spec.nodeName={self.cfg.node_name}",
        )  # fmt: skip
        async for _ in informer.observe():
            self.republish.set()  # a change or deletion by anyone: compare and repair

    async def _fabric_loop(self, lib: nvml.DeviceLib, strict: bool) -> None:
        """Probe NVML every `fabric_reprobe_s` (or when `recheck` is set) and publish device health."""
        assert self.check is not None
        while True:
            found = await asyncio.to_thread(probe_lib, lib)
            if self.driver_missing is not None:
                if not found.unavailable:
                    await self._driver_appeared()
                    return
            elif found.error is None and self.fabric.pending is not None:
                await self._fabric_progress(found.gpus, strict)
            elif found.error is not None:
                log.error("fabric probe failed", error=found.error)
            await self.check.publish(found)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.cfg.fabric_reprobe_s):
                    await self.recheck.wait()
            self.recheck.clear()

    async def _driver_appeared(self) -> None:
        assert self.cluster is not None
        message = "GPU driver now loadable; restarting the plugin to serve this node's devices"
        log.warning(message)
        await self.cluster.node_event(self.cfg.node_name, "GPUDriverFound", message, warning=False)
        self.restart_requested.set()

    async def _fabric_progress(self, gpus: tuple[nvml.GpuFabric, ...], strict: bool) -> None:
        """A fabric that was not COMPLETED at start-up: publish channel-0 once it is."""
        assert self.cluster is not None
        try:
            found = nvml.discover_clique(gpus, strict=strict, single_node=self.fabric.single_node)
        except CdctlError as exc:
            log.error("fabric re-probe failed", error=str(exc))
            return
        if found.pending is None:
            self.fabric.clique_id, self.fabric.pending = found.clique_id, None
            if self.cliques is not None:
                await self.cliques.label_or_retry()
            message = f"NVLink fabric completed; clique {found.clique_id or '(none)'}; publishing channel-0"
            log.info(message)
            await self._record_fabric(c.FabricStateChanged(self.cfg.node_name, True, "", found.clique_id))
            await self.cluster.node_event(self.cfg.node_name, "NVLinkFabricReady", message, warning=False)
            await self._write_shared_dir()
            self.republish.set()
        elif found.pending != self.fabric.pending:
            self.fabric.pending = found.pending
            log.warning("NVLink fabric still not ready", reason=found.pending)
            await self._record_fabric(c.FabricStateChanged(self.cfg.node_name, False, found.pending))

    async def _record_fabric(self, event: c.FabricStateChanged) -> None:
        if self.state is not None:
            await self.state.book.record_node(event)

    async def _project_loop(self) -> None:
        """Keep claim_lifecycle and the other read models of this log current, a batch at a time (the
        short pause lets a burst of prepares share one view transaction instead of one each)."""
        assert self.runner is not None
        await self.runner.run(batch_pause=self.cfg.projection_batch_s)

    async def _after_retention_round(self, actor: Actor) -> None:
        """Prune the kept IMEX daemon logs; and once a compaction cut the log, drop the claims it removed
        from the claim book in memory, as a restart would (the claims of calls in flight stay)."""
        assert self.store is not None and self.retention is not None
        await imexhistory.prune(self.cfg.plugin_dir, self.cfg.retention, self.store, actor)
        report = self.retention.last_report
        if report is not None and self.state is not None and self.driver is not None:
            dropped = self.state.book.forget_ended(report.horizon, busy=self.driver.busy())
            if dropped:
                log.info("claims that ended before the log's horizon dropped from memory", claims=dropped,
                         horizon=report.horizon)  # fmt: skip

    async def _sweep_loop(self) -> None:
        assert self.state is not None
        while True:
            try:
                await self.state.sweep_stale()
                await self.state.cleanup_domain_dirs()
            except CdctlError as exc:
                log.warning("cleanup round failed", error=str(exc))
            await asyncio.sleep(self.cfg.sweep_s)

    async def _stop(self) -> None:
        if self.servers is not None:
            await self.servers.close()
        if self.http is not None:
            await self.http.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.cluster is not None:
            await self.cluster.close()
        if self.api is not None:
            await plugincluster.disconnect(self.api)
        if self.store is not None:
            if self.runner is not None:
                with contextlib.suppress(CdctlError):
                    await self.runner.catch_up()  # leave the read models current for `cdctl sql`
            await self.store.close()
        if self.export is not None:
            await asyncio.to_thread(self.export.close)
        log.info("kubelet plugin stopped")
