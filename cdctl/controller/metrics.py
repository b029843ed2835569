"""Prometheus metrics of the controller, on a registry of its own.

`nvidia_dra_compute_domain_info{status}` (the Go driver's name) counts ComputeDomains per global status and is
computed from the view at scrape time, so a deleted domain leaves it without bookkeeping; only the replica
that leads reports it (`cdctl_controller_leader` says which one does), as it does
`cdctl_imex_channels_free{clique}` under `channel` isolation (read from the channel view at scrape time).
Reconcile counts, durations and errors come from the work queue's outcomes; queue depth and recorded events
are read live. Served by cdctl.controller.http; fed by cdctl.controller.manager.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from cdctl.controller.queue import Outcome
from cdctl.controller.view import DomainView
from cdctl.domain.computedomains import STATUS_NOT_READY, STATUS_READY


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
            "cdctl_controller_leader", "1 while this replica reconciles (holds the Lease), 0 on a standby"
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
        self.registry = CollectorRegistry()
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
        # Set by the manager under `channel` isolation: (clique, free channels) of every clique seen.
        self.channels_free: Callable[[], Iterable[tuple[str, int]]] = lambda: ()
        self.registry.register(_LiveCollector(view, queue_depth, leading, lambda: self.channels_free()))

    def observe(self, outcome: Outcome) -> None:
        self.reconciles.labels(outcome.result).inc()
        self.duration.observe(outcome.duration_s)
        if outcome.error is not None:
            self.errors.labels(type(outcome.error).__name__).inc()
