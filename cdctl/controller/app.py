"""The controller process: API client and discovery, event log, HTTP endpoint, leader election, manager.

`run_controller(settings)` returns when cancelled (SIGTERM) after releasing the lease, and raises
`LeadershipLost` when the lease is lost so the command exits non-zero and Kubernetes restarts a clean pod.
With leader election, a replica follows the cluster into its own log from the start (a warm standby) and
reconciles once it holds the Lease (cdctl.controller.manager). With a log file of its own it runs the
retention loop over it (cdctl.projections.retention), keeping the domain view, the channel view and
domain_history at each compaction's horizon, and with `otlp_endpoint` it exports every committed event
(cdctl.store.otlp).
Called by cdctl.cli.controller; integration tests call it with a kubeconfig for the simulated cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from pathlib import Path

import structlog

from cdctl.controller.channelview import ChannelProjection
from cdctl.controller.http import HttpEndpoint
from cdctl.controller.leader import LeaderElector, check_durations, identity_for
from cdctl.controller.manager import ControllerManager
from cdctl.controller.settings import ControllerSettings
from cdctl.controller.view import DomainProjection
from cdctl.domain.events import Actor
from cdctl.k8s.client import api_client
from cdctl.k8s.discovery import discover_resource_version
from cdctl.k8s.rest import KubeApi
from cdctl.k8s.tokens import TokenReviewer
from cdctl.projections.lifecycle import DomainHistory
from cdctl.projections.retention import FIRST_DELAY_S, Retention
from cdctl.store import otlp
from cdctl.store.base import EventStore
from cdctl.store.export import LogRef
from cdctl.store.integrity import read_key_file
from cdctl.store.logserver import LogServer
from cdctl.store.metrics import EventLogCollector, OtlpExportCollector, ProjectionLagCollector
from cdctl.store.otlp import ExportSource
from cdctl.store.sqlite import SqliteEventStore

log = structlog.get_logger(__name__)


def settings_for_log(settings: ControllerSettings) -> dict[str, object]:
    shown = dataclasses.asdict(settings)
    shown["feature_gates"] = dict(settings.feature_gates.values)
    return shown


def log_server(settings: ControllerSettings, api: KubeApi, store: EventStore | None) -> LogServer | None:
    """The read-only event-log routes (`cdctl collect`): with a reader, a pod name and a log file."""
    if not settings.event_log_reader or not isinstance(store, SqliteEventStore):
        return None
    if not settings.pod_name:
        log.warning("not serving the event log: the controller's pod name is unknown (--pod-name)")
        return None
    reviewer = TokenReviewer(api, settings.namespace, settings.pod_name, settings.event_log_reader)
    ref = LogRef("controller", "controller", store.path)
    identity = {"component": "controller", "node": "", "pod": settings.pod_name}
    return LogServer(identity, lambda: [ref], reviewer)


async def run_controller(
    settings: ControllerSettings,
    *,
    started: list[ControllerManager] | None = None,
    store: EventStore | None = None,
) -> None:
    """Run the controller until cancelled. `started` receives the manager once built (tests, benchmarks).

    The event log is `settings.db_path` (opened and closed here), or `store` when given (left open).
    """
    for note in (*settings.feature_gates.overrides, *settings.feature_gates.ignored):
        log.info(note)
    log.info("controller manager config", **settings_for_log(settings))
    client = await api_client(settings.kubeconfig)
    own_store: EventStore | None = None
    retention: asyncio.Task[None] | None = None
    export: otlp.OtlpExport | None = None
    try:
        api = KubeApi(client, qps=settings.kube_api_qps, burst=settings.kube_api_burst)
        resource_version = await discover_resource_version(api, settings.resource_api_version)
        log.info("resource API", version=f"resource.k8s.io/{resource_version}")
        if store is None and settings.db_path:
            key = read_key_file(Path(settings.log_key_file)) if settings.log_key_file else None
            store = own_store = await SqliteEventStore.open(Path(settings.db_path), key=key)
            log.info("event log opened", path=settings.db_path, chain=own_store.scheme.name,
                     head=own_store.chain_head()[0], checked=own_store.checked_at_open)  # fmt: skip
            loop = Retention(
                own_store, settings.retention, [DomainHistory(), DomainProjection(), ChannelProjection()],
                actor=Actor("controller", pod=settings.pod_name), interval_s=settings.retention_interval_s,
                first_delay_s=min(FIRST_DELAY_S, settings.retention_interval_s),
            )  # fmt: skip
            retention = asyncio.create_task(loop.run(), name="retention")
            if settings.otlp_endpoint:
                source = ExportSource("controller", "", settings.pod_name, settings.namespace, "controller")
                export = otlp.attach(own_store, settings.otlp_endpoint, source)
        manager = ControllerManager(settings, api, store, resource_version)
        if isinstance(store, SqliteEventStore):
            manager.metrics.registry.register(EventLogCollector(store))
            history = manager.journal.history
            if history is not None:
                manager.metrics.registry.register(ProjectionLagCollector(store, lambda: history.positions))
        if export is not None:
            manager.metrics.registry.register(OtlpExportCollector(export))
        elector = None
        if settings.leader_election.enabled:
            election = settings.leader_election
            check_durations(election)
            # Lease requests never queue behind the controller's own rate limit (a burst of writes must not
            # starve renewals), and each is cut off at the renew deadline, as client-go's are.
            lease_api = KubeApi(client, request_timeout_s=election.renew_deadline_s)
            elector = LeaderElector(lease_api, election, identity_for(settings.pod_name))

        manager.elector = elector

        def ready() -> bool:
            return manager.synced.is_set() or (elector is not None and not elector.is_leader)

        http = (
            HttpEndpoint(
                settings.http_endpoint,
                settings.metrics_path,
                manager.metrics.registry,
                ready,
                settings.pprof_path,
                log_server(settings, api, store),
            )
            if settings.http_endpoint
            else None
        )
        manager.http = http
        if http is not None:
            await http.start()
            log.info("serving metrics", endpoint=f"{http.host}:{http.port}", path=http.metrics_path)
        if started is not None:
            started.append(manager)
        try:
            if elector is None:
                await manager.run()
            else:
                await manager.run_elected(elector)
        finally:
            if elector is not None:
                await elector.release()
            if http is not None:
                await http.stop()
    finally:
        if retention is not None:
            retention.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await retention
        if own_store is not None:
            await own_store.close()
        if export is not None:
            await asyncio.to_thread(export.close)
        await client.close()
