"""Prometheus metrics of the controller, on its component registry (cdctl.metrics: process, build info).

`nvidia_dra_compute_domain_info{status}` (the Go driver's name) counts ComputeDomains per global status and is
computed from the view at scrape time, so a deleted domain leaves it without bookkeeping; only the replica
that leads reports it (`cdctl_leader`, 1 or 0, says which one does). `cdctl_controller_reconcile_total
{result}`, `cdctl_controller_reconcile_errors_total{error}` and `cdctl_controller_reconcile_duration_seconds`
come from the work queue's outcomes; `cdctl_controller_queue_depth` is read live.
`cdctl_domain_not_ready{namespace, name}` (leader only) is 1 for each domain NotReady now, so an alert can
name it; under `channel` isolation `cdctl_imex_channels_free{clique}` (leader only, read from the channel
view at scrape time); `cdctl_controller_domain_formation_seconds` is observed by cdctl.controller.status
when a domain turns Ready. The event log's metrics (cdctl.store.metrics) are added by cdctl.controller.app
when the controller has a log file. Every metric is listed in docs/metrics.md. Served by
cdctl.controller.http; fed by cdctl.controller.manager.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from cdctl.controller.queue import Outcome
from cdctl.controller.view import DomainView
from cdctl.domain.computedomains import STATUS_NOT_READY, STATUS_READY
from cdctl.metrics import component_registry


class _LiveCollector(Collector):
    def __init__(
        self,
        view: DomainView,
        queue_depth: Callable[[], int],
        leading: Callable[[], bool],
        channels_free: Callable[[], Iterable[tuple[str, int]]],
    ) -> None:
        self.view = view
        self.queue_depth = queue_depth
        self.leading = leading
        self.channels_free = channels_free

    def collect(self) -> Iterator[GaugeMetricFamily]:
        leading = self.leading()
        leader = GaugeMetricFamily(
            "cdctl_leader", "1 while this controller replica reconciles (holds the Lease), 0 on a standby"
        )
        leader.add_metric([], 1 if leading else 0)
        yield leader
        info = GaugeMetricFamily(
            "nvidia_dra_compute_domain_info", "Number of ComputeDomains per global status", labels=["status"]
        )
        if leading:  # a standby's view is as current, but only one replica reports, so sums stay right
            counts = {STATUS_READY: 0, STATUS_NOT_READY: 0}
            for state in self.view:
                if state.cd is not None:
                    status = str(state.cd.status.get("status") or STATUS_NOT_READY)
                    counts[status] = counts.get(status, 0) + 1
            for status, count in sorted(counts.items()):
                info.add_metric([status], count)
        yield info
        not_ready = GaugeMetricFamily(
            "cdctl_domain_not_ready",
            "1 for each ComputeDomain NotReady now (absent once Ready): what the NotReady alert reads",
            labels=["domain_namespace", "domain_name"],
        )
        if leading:
            for state in self.view:
                cd = state.cd
                if cd is not None and str(cd.status.get("status") or STATUS_NOT_READY) != STATUS_READY:
                    not_ready.add_metric([cd.namespace, cd.name], 1)
        yield not_ready
        depth = GaugeMetricFamily("cdctl_controller_queue_depth", "ComputeDomains waiting to be reconciled")
        depth.add_metric([], self.queue_depth())
        yield depth
        free = GaugeMetricFamily(
            "cdctl_imex_channels_free",
            "IMEX channels no ComputeDomain holds, per clique (channel isolation; channel 0 not counted)",
            labels=["clique"],
        )
        if leading:
            for clique, count in self.channels_free():
                free.add_metric([clique], count)
        yield free


class ControllerMetrics:
    def __init__(
        self, view: DomainView, queue_depth: Callable[[], int], leading: Callable[[], bool] = lambda: True
    ) -> None:
        self.registry = component_registry("controller")
        self.reconciles = Counter(
            "cdctl_controller_reconcile_total",
            "ComputeDomain reconciles by result (success, retry, permanent)",
            ["result"],
            registry=self.registry,
        )
        self.errors = Counter(
            "cdctl_controller_reconcile_errors_total",
            "ComputeDomain reconciles that failed, by kind of error",
            ["error"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "cdctl_controller_reconcile_duration_seconds",
            "Time one ComputeDomain reconcile took",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.formation = Histogram(
            "cdctl_controller_domain_formation_seconds",
            "Time a ComputeDomain took to turn Ready: from creation, or from when it last turned NotReady",
            buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 3600),
            registry=self.registry,
        )
        # Set by the manager under `channel` isolation: (clique, free channels) of every clique seen.
        self.channels_free: Callable[[], Iterable[tuple[str, int]]] = lambda: ()
        self.registry.register(_LiveCollector(view, queue_depth, leading, lambda: self.channels_free()))

    def observe(self, outcome: Outcome) -> None:
        self.reconciles.labels(outcome.result).inc()
        self.duration.observe(outcome.duration_s)
        if outcome.error is not None:
            self.errors.labels(type(outcome.error).__name__).inc()
