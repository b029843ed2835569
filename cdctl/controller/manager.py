"""Wires the controller together: informers -> journal (event log + view) -> keyed queue -> reconciler.

Informers follow ComputeDomains in every namespace, labelled Nodes and ResourceClaimTemplates cluster-wide,
and labelled DaemonSets, daemon pods and ComputeDomainCliques in each managed namespace (the chart grants
those per namespace); under HostManagedIMEX only ComputeDomains and ResourceClaimTemplates, what the chart
grants there. Every observation is recorded and folded by the journal, which enqueues the domain it
concerns after a short batch window, so that a burst of changes (144 daemons turning Ready) costs one
reconcile and one write per object. Workers start only when the log has been replayed and every informer
has listed once, so a domain is never judged on a partial view. A sweep enqueues every known domain at start
and every `cleanup_interval_s`, which tears down what domains that no longer exist left behind.
With `rack_domains`, cdctl.controller.rackdomains runs beside the workers (one ComputeDomain per rack).

`follow()` (replay, watch, record, fold) and `lead()` (reconcile) are separate: without leader election
`run()` does both; with it, `run_elected()` follows from the start as a warm standby that writes nothing to
the API, and leads once the Lease is won, after recording the takeover (LeadershipAcquired, stream
`lease/<namespace>/<name>`) and, if its watches had not all listed yet, waiting for them (logged).
cdctl.controller.app runs it inside API discovery, the event log, the HTTP endpoint and leader election.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

import structlog

from cdctl.api.isolation import CLIQUE_NODE_LABEL
from cdctl.api.shareddaemon import SHARED_DAEMON_SELECTOR
from cdctl.asynctasks import run_until_first_ends
from cdctl.controller.actions import Actions
from cdctl.controller.computedomain import ComputeDomainReconciler
from cdctl.controller.context import ReconcileContext
from cdctl.controller.http import HttpEndpoint
from cdctl.controller.journal import Journal
from cdctl.controller.leader import LeaderElector
from cdctl.controller.metrics import ControllerMetrics
from cdctl.controller.observations import kept_form
from cdctl.controller.queue import KeyedQueue, Outcome
from cdctl.controller.rackdomains import RackDomains
from cdctl.controller.settings import ControllerSettings
from cdctl.domain.computedomains import LABEL_COMPUTE_DOMAIN
from cdctl.domain.events import Actor, NewEvent
from cdctl.domain.leadership import LeadershipAcquired, lease_stream
from cdctl.k8s.informer import Informer, Observation
from cdctl.k8s.kube_events import EventRecorder
from cdctl.k8s.resources import (
    COMPUTE_DOMAIN_CLIQUES,
    COMPUTE_DOMAINS,
    DAEMON_SETS,
    NODES,
    PODS,
    ResourceType,
    resource_claim_templates,
    resource_claims,
)
from cdctl.k8s.rest import KubeApi
from cdctl.store.base import EventStore

log = structlog.get_logger(__name__)
COMPONENT = "cdctl-controller"


class ControllerManager:
    def __init__(
        self, settings: ControllerSettings, api: KubeApi, store: EventStore | None, resource_version: str
    ) -> None:
        self.settings = settings
        self.api = api
        self.queue = KeyedQueue(
            self._reconcile,
            workers=settings.workers,
            recheck_s=settings.recheck_failed_s,
            on_outcome=self._on_outcome,
            describe=self._describe,
        )
        self.journal = Journal(store, Actor(COMPONENT, pod=settings.pod_name), self._changed)
        self.view = self.journal.view
        self.metrics = ControllerMetrics(self.view, lambda: self.queue.depth, lambda: self.leading)
        self.recorder = EventRecorder(api, COMPONENT, settings.pod_name)
        self.ctx = ReconcileContext(
            settings=settings,
            api=api,
            view=self.view,
            journal=self.journal,
            actions=Actions(api, self.journal, self.recorder),
            recorder=self.recorder,
            resource_version=resource_version,
            formed=self.metrics.formation.observe,
        )
        self.reconciler = ComputeDomainReconciler(self.ctx)
        self.reconciler.channels.wake = self.queue.add
        self.metrics.channels_free = self.reconciler.channels.free_per_clique
        self.rack_domains = RackDomains(self.ctx) if settings.rack_domains else None
        self.informers = self._informers(resource_version)
        self.replayed = asyncio.Event()  # the log is folded into the view (before any watch)
        self.synced = asyncio.Event()  # and every informer has listed once
        self.leading = False  # reconciling: always without leader election, else while holding the Lease
        self.acquired_at: float | None = None  # the loop time the Lease was won
        self.first_reconcile_at: float | None = None
        self.outcome_hooks: list[Callable[[Outcome], None]] = []
        self._background: set[asyncio.Future[None]] = set()
        self.elector: LeaderElector | None = None  # set by run_controller when leader election is on
        self.http: HttpEndpoint | None = None  # set by run_controller when --http-endpoint is given

    def _informers(self, resource_version: str) -> list[Informer]:
        labelled = LABEL_COMPUTE_DOMAIN
        timeout = self.settings.watch_timeout_s

        def informer(
            resource: ResourceType, namespace: str | None = None, selector: str | None = None
        ) -> Informer:
            return Informer(
                self.api, resource, namespace=namespace, label_selector=selector, watch_timeout_s=timeout,
                transform=partial(kept_form, resource.kind),
            )  # fmt: skip

        informers = [
            informer(COMPUTE_DOMAINS),
            informer(resource_claim_templates(resource_version), selector=labelled),
        ]
        if self.settings.channel_isolation:
            # The domains' workload claims (where they are allocated), the nodes' cliques, the clique objects
            # that publish the channels and, driver-managed, the chart's shared IMEX daemon pods.
            informers.append(informer(resource_claims(resource_version), selector=labelled))
            informers.append(informer(NODES, selector=CLIQUE_NODE_LABEL))
            informers.append(informer(COMPUTE_DOMAIN_CLIQUES, self.settings.namespace, labelled))
            if self.settings.driver_managed_daemons:
                informers.append(informer(PODS, self.settings.namespace, SHARED_DAEMON_SELECTOR))
            return informers
        if not self.settings.driver_managed_daemons:
            return informers  # HostManagedIMEX: no daemons, cliques or node labels (nor RBAC to watch them)
        informers.append(informer(NODES, selector=labelled))
        for namespace in self.settings.managed_namespaces:
            informers.append(informer(PODS, namespace, labelled))
            informers.append(informer(COMPUTE_DOMAIN_CLIQUES, namespace, labelled))
            informers.append(informer(DAEMON_SETS, namespace, labelled))
        return informers

    def _changed(self, uid: str) -> None:
        """A domain's view changed: reconcile it once the batch window has gathered what comes with it.

        A standby only records and folds; the sweep that starts its leadership enqueues every domain."""
        if not self.leading:
            return
        if self.settings.batch_window_s > 0:
            self.queue.add_after(uid, self.settings.batch_window_s)
        else:
            self.queue.add(uid)

    def _node_changed(self, observation: Observation) -> None:
        """`channel` isolation: a node's clique label or its shared daemon changed (neither is labelled for a
        domain): reconcile the domains with claims on that node, once the object cache has the change."""
        if not self.leading:
            return
        obj = observation.obj
        node = (
            observation.name
            if observation.resource.kind == NODES.kind
            else (obj.get("spec") or {}).get("nodeName")
        )
        if node:
            for uid in self.reconciler.channels.domains_on(str(node)):
                self.queue.add_after(uid, max(self.settings.batch_window_s, 0.05))

    async def _reconcile(self, uid: str) -> None:
        if self.first_reconcile_at is None:
            self.first_reconcile_at = asyncio.get_running_loop().time()
            since = None if self.acquired_at is None else round(self.first_reconcile_at - self.acquired_at, 3)
            log.info("first reconcile", **self._describe(uid), since_lease_acquired_s=since)
        await self.reconciler.reconcile(uid)

    def _describe(self, uid: str) -> dict[str, Any]:
        """What every log line about a domain carries: its namespace, name and uid."""
        cd = self.view.domain(uid).cd
        return {"namespace": cd.namespace if cd else None, "name": cd.name if cd else None, "uid": uid}

    def _on_outcome(self, outcome: Outcome) -> None:
        self.metrics.observe(outcome)
        if outcome.result == "permanent" and outcome.error is not None:
            report = asyncio.ensure_future(self._report_permanent(outcome.key, outcome.error))
            self._background.add(report)
            report.add_done_callback(self._background.discard)
        for hook in self.outcome_hooks:
            hook(outcome)

    async def _report_permanent(self, uid: str, error: BaseException) -> None:
        """A failure retrying cannot fix is the user's to act on: say so on the ComputeDomain."""
        cd = self.view.domain(uid).cd
        obj = self.journal.cached(COMPUTE_DOMAINS, cd.namespace, cd.name) if cd else None
        if obj is not None:
            await self.ctx.actions.warn(uid, obj, "ReconcileFailed", str(error))

    async def _follow(self, informer: Informer, first_sync: asyncio.Event) -> None:
        async for item in informer.observe():
            if isinstance(item, Observation):
                self.journal.observe(item)
                if self.settings.channel_isolation and item.resource.kind in (NODES.kind, PODS.kind):
                    self._node_changed(item)
                continue
            present = [str(obj.get("metadata", {}).get("uid", "")) for obj in informer.known()]
            self.journal.forget_missing(informer.resource, informer.namespace, present, item.resource_version)
            if not first_sync.is_set():
                await self.journal.flush()
                first_sync.set()

    async def follow(self) -> None:
        """Replay the log, then record and fold what every informer observes, until cancelled.

        What a leader and a standby both do: neither writes to the API here."""
        replayed = await self.journal.replay()
        log.info("event log replayed", events=replayed, domains=len(self.view.uids()))
        self.replayed.set()
        async with asyncio.TaskGroup() as group:
            group.create_task(self.journal.run())
            first_syncs = []
            for informer in self.informers:
                first_sync = asyncio.Event()
                first_syncs.append(first_sync)
                group.create_task(self._follow(informer, first_sync))
            if self.rack_domains is not None:
                group.create_task(self.rack_domains.follow())
            for first_sync in first_syncs:
                await first_sync.wait()
            log.info("caches populated", informers=len(self.informers), domains=len(self.view.uids()))
            self.synced.set()

    async def lead(self) -> None:
        """Reconcile until cancelled: the workers, the sweep and rack domains, on a synced view only."""
        if not self.synced.is_set():
            log.info("waiting for every watch to list once before the first reconcile")
            await self.synced.wait()
            log.info("watches synced: reconciling", domains=len(self.view.uids()))
        if self.rack_domains is not None:
            await self.rack_domains.synced.wait()
        await self.journal.flush()  # what was observed so far is folded before the first decision
        self.leading = True
        async with asyncio.TaskGroup() as group:
            group.create_task(self.queue.run())
            group.create_task(self._sweep())
            if self.rack_domains is not None:
                group.create_task(self.rack_domains.act())

    async def run(self) -> None:
        """Run as the only controller (no leader election) until cancelled."""
        await run_until_first_ends(self.follow(), self.lead())

    async def run_elected(self, elector: LeaderElector) -> None:
        """Follow as a warm standby until `elector` wins the Lease, then lead while it holds it.

        Renewing starts the moment the Lease is won; the takeover is recorded (LeadershipAcquired) before
        the first reconcile, which waits for the view to be synced if it was not yet."""
        await run_until_first_ends(self.follow(), self._elected(elector))

    async def _elected(self, elector: LeaderElector) -> None:
        await elector.acquire()
        await run_until_first_ends(self._take_over(elector), elector.hold())

    async def _take_over(self, elector: LeaderElector) -> None:
        acquisition = elector.acquisition
        await self.replayed.wait()
        if acquisition is not None:
            self.acquired_at = acquisition.at
            election = self.settings.leader_election
            event = LeadershipAcquired(
                identity=elector.identity,
                lease_namespace=election.lease_lock_namespace,
                lease_name=election.lease_lock_name,
                how=acquisition.how,
                previous_holder=acquisition.previous_holder,
                lease_transitions=acquisition.lease_transitions,
                acquire_time=acquisition.acquire_time,
                lease_duration_s=election.lease_duration_s,
                silent_s=acquisition.silent_s,
                view_synced=self.synced.is_set(),
            )
            stream = lease_stream(election.lease_lock_namespace, election.lease_lock_name)
            await self.journal.store.append(stream, [NewEvent.of(event, actor=self.journal.actor)])
        await self.lead()

    async def _sweep(self) -> None:
        while True:
            for uid in self.view.uids():
                self.queue.add(uid)
            for uid in sorted(self.reconciler.channels.book.domains()):  # a domain gone, its channel held
                self.queue.add(uid)
            await asyncio.sleep(self.settings.cleanup_interval_s)
