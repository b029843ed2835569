"""The event log's head as Prometheus metrics, read at scrape time: what `cdctl collect` records.

`cdctl_event_log_head_position` is the last committed position; `cdctl_event_log_head_info{position, hash}`
(value 1) adds its hash. A head recorded outside the file (by a Prometheus server, or `cdctl collect`) lets
`cdctl verify --expect-head POSITION:HASH` tell a log cut at its end, or rewritten with its chain, from the
log as it was. The info series changes with every scrape that saw new events (one short-lived series each).
Registered by the controller (cdctl.controller.app) and the kubelet plugin (cdctl.plugin.app).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from cdctl.store.base import EventStore


class EventLogHeadCollector(Collector):
    def __init__(self, store: EventStore) -> None:
        self.store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
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
