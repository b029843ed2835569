"""The body of `cdctl daemon run`: label the pod, render the IMEX files, supervise IMEX until SIGTERM.

Called by cdctl.cli.daemon with DaemonSettings and an event that SIGTERM/SIGINT set. In order (reference
section 3.2, without its quirks): refuse to start without the plugin's CDI edits; open the daemon's event log;
merge-patch the pod's clique label; with an empty clique ID idle until stopped; otherwise render `imexd.cfg`
from the plugin's template (bind IP = pod IP, node list path), write the DNS-names node list, then follow the
clique (or the domain's status without the ComputeDomainCliques gate) into cdctl.daemon.peers while the
readiness monitor runs and keeps the handover gate (cdctl.daemon.gate) the kubelet plugin checks before it
hands out a channel. A fatal error in either ends the run with that error (non-zero exit), after IMEX was
stopped (SIGTERM, wait) and the stop recorded. While the log is open the retention loop compacts it under
the settings' policy (cdctl.projections.retention; the daemon resumes from no projection).

The shared daemon of channel isolation (`settings.shared`) first waits for the clique ID the node's kubelet
plugin writes into its directory (when no --cliqueid is given), then runs as above in IP mode, its peers
the pods of its clique's shared daemons (cdctl.k8s.daemonpods.follow_shared_peers).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator

import structlog

from cdctl.asynctasks import run_until_first_ends, wait_at_most
from cdctl.daemon.check import CheckSettings, shared_clique
from cdctl.daemon.files import write_config, write_node_list
from cdctl.daemon.gate import DaemonGate
from cdctl.daemon.journal import Journal
from cdctl.daemon.peers import PeerUpdater
from cdctl.daemon.readiness import ReadinessMonitor
from cdctl.daemon.settings import DaemonSettings
from cdctl.daemon.supervisor import ImexSupervisor
from cdctl.domain.errors import CdctlError, PermanentError, RetriableError
from cdctl.domain.imex import ImexDaemonStarted, ImexDaemonStopped, PeerListing, dns_node_list
from cdctl.k8s.daemonpods import (
    daemon_api,
    follow_clique,
    follow_domain_status,
    follow_shared_peers,
    label_own_pod,
)
from cdctl.k8s.errors import KubeApiError
from cdctl.k8s.rest import KubeApi
from cdctl.projections.retention import Retention

log = structlog.get_logger(__name__)
LABEL_RETRY_MAX_S = 10.0
CLIQUE_FILE_POLL_S = 0.5


async def _wait_for_clique(s: DaemonSettings, stop: asyncio.Event) -> DaemonSettings | None:
    """The shared daemon's settings with the clique the plugin wrote; None when stopped first."""
    if s.clique_id or not s.shared:
        return s
    logged = False
    while not stop.is_set():
        found = await asyncio.to_thread(shared_clique, s.imexd_dir)
        if found is not None:
            log.info("clique ID from the kubelet plugin", clique_id=found or "(none)")
            return dataclasses.replace(s, clique_id=found)
        if not logged:
            log.info("waiting for the kubelet plugin to write this node's clique ID", dir=str(s.imexd_dir))
            logged = True
        with contextlib.suppress(TimeoutError):
            await wait_at_most(stop.wait(), CLIQUE_FILE_POLL_S)
    return None


async def _label_pod(api: KubeApi, s: DaemonSettings, stop: asyncio.Event) -> bool:
    """Patch the clique label, retrying transient failures; False when stopped before it succeeded."""
    delay = 0.2
    while not stop.is_set():
        try:
            await label_own_pod(api, s.pod_namespace, s.pod_name, s.clique_id)
            log.info("pod labelled", pod=s.pod_name, clique_id=s.clique_id)
            return True
        except KubeApiError as exc:
            if not exc.retriable:
                raise PermanentError(f"cannot label pod {s.pod_namespace}/{s.pod_name}: {exc}") from exc
            log.warning("labelling the pod failed; retrying", error=str(exc), retry_in_s=delay)
        with contextlib.suppress(TimeoutError):
            await wait_at_most(stop.wait(), delay)
        delay = min(delay * 2, LABEL_RETRY_MAX_S)
    return False


class DaemonApp:
    def __init__(self, settings: DaemonSettings) -> None:
        self.settings = settings

    def _listings(self, api: KubeApi) -> AsyncIterator[PeerListing]:
        s = self.settings
        if s.shared:
            return follow_shared_peers(api, s.pod_namespace, s.clique_id)
        if s.uses_cliques:
            return follow_clique(api, s.pod_namespace, s.domain_uid, s.clique_id)
        return follow_domain_status(api, s.domain_namespace, s.domain_name, s.domain_uid)

    async def run(self, stop: asyncio.Event) -> None:
        s = self.settings
        s.validate()
        shown = {f.name: str(getattr(s, f.name)) for f in dataclasses.fields(s) if f.name != "gates"}
        log.info("daemon settings", **shown)
        log.info("feature gates", **{k: str(v) for k, v in s.gates.values.items()})
        # what HostManagedIMEX forced and what has no effect here, said as controller and plugin say it
        for note in (*s.gates.overrides, *s.gates.ignored):
            log.info(note)
        if not s.imexd_dir.is_dir():
            raise PermanentError(f"{s.imexd_dir} does not exist (is the daemon claim's CDI mount missing?)")
        journal = await Journal.open(s.events_path, s.node_name, s.pod_name, s.log_key_file)
        retention = Retention(
            journal.store, s.retention, [], actor=journal.actor, interval_s=s.retention_interval_s,
            first_delay_s=s.retention_first_delay_s,
        )  # fmt: skip
        compacting = asyncio.create_task(retention.run(), name="retention")
        reason, failed = "stopped by signal", False
        try:
            waited = await _wait_for_clique(s, stop)
            if waited is None:
                return
            self.settings = s = waited
            await journal.record(
                ImexDaemonStarted(
                    s.node_name, s.domain_uid, s.clique_id, s.pod_name, s.pod_ip, s.mode, s.max_nodes
                )
            )
            async with daemon_api(s.kubeconfig) as api:
                if not await _label_pod(api, s, stop):
                    return
                if not s.clique_id:
                    log.info("no cliqueID: skipping controller and IMEX daemon management")
                    await stop.wait()
                    return
                await self._supervise(api, journal, stop)
        except (CdctlError, OSError) as exc:
            reason, failed = str(exc), True
            raise
        finally:
            compacting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await compacting
            await journal.record(ImexDaemonStopped(s.node_name, reason, failed))
            await journal.close()

    def _write_files(self) -> None:
        s = self.settings
        values = {"IMEXCmdBindInterfaceIP": s.pod_ip, "IMEXDaemonNodesConfigPath": str(s.nodes_path)}
        write_config(s.template_path, s.config_path, values)
        if s.dns_names:
            write_node_list(s.nodes_path, dns_node_list(s.max_nodes))

    async def _supervise(self, api: KubeApi, journal: Journal, stop: asyncio.Event) -> None:
        s = self.settings
        gate = DaemonGate(s.imexd_dir)
        gate.close()  # a gate a killed predecessor left behind says nothing about this daemon's IMEX
        await asyncio.to_thread(self._write_files)
        supervisor = ImexSupervisor(
            [s.imex_binary, "-c", str(s.config_path)],
            s.node_name,
            journal.record,
            backoff_s=s.restart_backoff_s,
            backoff_max_s=s.restart_backoff_max_s,
            gate=gate,
        )
        updater = PeerUpdater(s, supervisor, journal)
        monitor = ReadinessMonitor(
            CheckSettings(s.clique_id, s.imexd_dir, s.ctl_binary),
            s.node_name,
            journal,
            s.readiness_period_s,
            gate,
        )

        async def follow() -> None:
            async for listing in self._listings(api):
                await updater.apply(listing)

        async def monitor_readiness() -> None:
            # Until IMEX first starts (the daemon waits to be listed in its clique) the answer can only be
            # "not ready", where every daemon starts: asking would cost a process per poll for nothing.
            await supervisor.first_started.wait()
            await monitor.run()

        async def supervision_failed() -> None:
            await supervisor.failed.wait()
            assert supervisor.error is not None
            raise supervisor.error

        try:
            await run_until_first_ends(
                asyncio.create_task(follow(), name="peers"),
                asyncio.create_task(monitor_readiness(), name="readiness"),
                asyncio.create_task(supervision_failed(), name="supervision"),
                asyncio.create_task(stop.wait(), name="stop"),
            )
        finally:
            await supervisor.stop()  # closes the gate
        if not stop.is_set():
            raise RetriableError("the peer watch ended unexpectedly")
