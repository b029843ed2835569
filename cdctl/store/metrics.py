"""The event log's head as Prometheus metrics, read at scrape time: what `cdctl collect` records.

`cdctl_event_log_head_position` is the last committed position; `cdctl_event_log_head_info{position, hash}`
(value 1) adds its hash. A head recorded outside the file (by a Prometheus server, or `cdctl collect`) lets
`cdctl verify --expect-head POSITION:HASH` tell a log cut at its end, or rewritten with its chain, from the
log as it was. The info series changes with every scrape that saw new events (one short-lived series each).
With `--otlp-endpoint`, `OtlpExportCollector` adds the export's counts: cdctl_otlp_exported_events_total,
cdctl_otlp_dropped_events_total{reason} and cdctl_otlp_queued_events.
Registered by the controller (cdctl.controller.app) and the kubelet plugin (cdctl.plugin.app).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cdctl.store.base import EventStore
from cdctl.store.otlp import OtlpExport


class EventLogHeadCollector(Collector):
    def __init__(self, store: EventStore) -> None:
        self.store = store

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


class OtlpExportCollector(Collector):
    """What the OTLP export (cdctl.store.otlp) sent and dropped; the dropped by reason."""

    def __init__(self, export: OtlpExport) -> None:
        self.export = export

    def collect(self) -> Iterator[Metric]:
        exported = CounterMetricFamily(
            "cdctl_otlp_exported_events", "Committed events the OTLP endpoint accepted as log records"
        )
        exported.add_metric([], self.export.exported)
        yield exported
        dropped = CounterMetricFamily(
            "cdctl_otlp_dropped_events",
            "Committed events never exported: queue_full (the oldest, while the endpoint lagged),"
            " export_failed (after every retry), shutdown (queued at exit). The local log keeps them all.",
            labels=["reason"],
        )
        for reason, count in self.export.dropped.items():
            dropped.add_metric([reason], count)
        yield dropped
        queued = GaugeMetricFamily("cdctl_otlp_queued_events", "Committed events waiting to be exported")
        queued.add_metric([], self.export.queued())
        yield queued
