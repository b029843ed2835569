"""The event log as Prometheus metrics, read at scrape time: head, size, append latency, projection lag.

- `cdctl_event_log_head_position`: the last committed position; `cdctl_event_log_head_info{position, hash}`
  (value 1) adds its hash. A head recorded outside the file (by a Prometheus server, or `cdctl collect`) lets
  `cdctl verify --expect-head POSITION:HASH` tell a log cut at its end, or rewritten with its chain, from the
  log as it was. The info series changes with every scrape that saw new events (one short-lived series each).
- `cdctl_event_log_size_bytes` (the file and its WAL) and `cdctl_event_log_events` (events in the file, from
  the first that compaction kept to the head): what retention bounds.
- `cdctl_event_log_append_duration_seconds`: a histogram of each append, from the call to the durable commit
  (queueing behind the single writer included: what a decision waits for).
- `cdctl_projection_lag_events{projection}` (`ProjectionLagCollector`): events committed that a projection
  runner has not folded yet.

Registered by the controller (cdctl.controller.app) and the kubelet plugin (cdctl.plugin.app) on their
component registry (cdctl.metrics).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cdctl.store.sqlite import SqliteEventStore

APPEND_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class EventLogCollector(Collector):
    def __init__(self, store: SqliteEventStore) -> None:
        self.store = store
        # Not registered by itself: collected through this collector, so it lives and goes with the log.
        self.appends = Histogram(
            "cdctl_event_log_append_duration_seconds",
            "Time from an append's call to its durable commit in this component's event log",
            buckets=APPEND_BUCKETS,
            registry=None,
        )
        store.append_observers.append(self.appends.observe)

    def collect(self) -> Iterator[Metric]:
        position, hash_ = self.store.chain_head()
        gauge = GaugeMetricFamily(
            "cdctl_event_log_head_position", "Position of the last committed event of this component's log"
        )
        gauge.add_metric([], position)
        yield gauge
        info = GaugeMetricFamily(
            "cdctl_event_log_head_info",
            "The log's head: position and chain hash (cdctl verify --expect-head POSITION:HASH)",
            labels=["position", "hash"],
        )
        info.add_metric([str(position), hash_], 1)
        yield info
        size = GaugeMetricFamily(
            "cdctl_event_log_size_bytes", "Bytes of this component's event log file and its write-ahead log"
        )
        size.add_metric([], self.store.size_bytes())
        yield size
        if not self.store.read_only:
            events = GaugeMetricFamily(
                "cdctl_event_log_events", "Events in this component's event log (those compaction kept)"
            )
            events.add_metric([], self.store.events_kept())
            yield events
        yield from self.appends.collect()


class ProjectionLagCollector(Collector):
    """`cdctl_projection_lag_events{projection}`: the log's head minus each projection's position."""

    def __init__(self, store: SqliteEventStore, positions: Callable[[], Mapping[str, int]]) -> None:
        self.store = store
        self.positions = positions

    def collect(self) -> Iterator[GaugeMetricFamily]:
        lag = GaugeMetricFamily(
            "cdctl_projection_lag_events",
            "Events committed to the log that a projection has not folded yet",
            labels=["projection"],
        )
        head = self.store.head()
        for name, position in sorted(self.positions().items()):
            lag.add_metric([name], max(0, head - position))
        yield lag
