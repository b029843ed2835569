"""The kubelet plugin's Prometheus metrics (the Go plugin's names) and its HTTP endpoint.

The registry is the plugin's component registry (cdctl.metrics: process, build info); cdctl.plugin.app adds
the event log's metrics (cdctl.store.metrics). Every metric is listed in docs/metrics.md.

Counted by cdctl.plugin.driver per claim and by the checkpoint after each change; served by the plugin
process on `--http-endpoint` at `--metrics-path` by `MetricsEndpoint` (cdctl.httpendpoint: plus `/healthz`,
and with a log server the read-only event log routes of cdctl.store.logserver). Every labelled series exists
from the start with value zero. Unlike the Go plugin, `nvidia_dra_requests_total` counts every request, not
only the successful ones; failures are also counted by error type.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from cdctl.domain.claims import ClaimRecord
from cdctl.httpendpoint import ComponentHttpEndpoint
from cdctl.metrics import component_registry
from cdctl.store.logserver import LogServer

DRIVER = "compute-domain.nvidia.com"
OPERATIONS = ("prepare", "unprepare")
BUCKETS = tuple(0.05 * 2**k for k in range(9))
DEVICE_TYPES = ("channel", "daemon", "unknown")


class PluginMetrics:
    def __init__(self, node: str, registry: CollectorRegistry | None = None) -> None:
        self.node = node
        self.registry = registry or component_registry("kubelet-plugin")
        r = self.registry
        self.requests = Counter(
            "nvidia_dra_requests", "DRA requests per operation.", ["driver", "operation"], registry=r
        )
        self.duration = Histogram(
            "nvidia_dra_request_duration_seconds", "DRA request duration.", ["driver", "operation"],
            buckets=BUCKETS, registry=r,
        )  # fmt: skip
        self.inflight = Gauge(
            "nvidia_dra_requests_inflight", "DRA requests in progress.", ["driver", "operation"], registry=r
        )
        self.prepared = Gauge(
            "nvidia_dra_prepared_devices",
            "Devices of prepared claims.",
            ["node", "driver", "device_type"],
            registry=r,
        )
        self.prepare_errors = Counter(
            "nvidia_dra_node_prepare_errors", "Failed prepares.", ["driver", "error_type"], registry=r
        )
        self.unprepare_errors = Counter(
            "nvidia_dra_node_unprepare_errors", "Failed unprepares.", ["driver", "error_type"], registry=r
        )
        for op in OPERATIONS:
            self.requests.labels(DRIVER, op)
            self.duration.labels(DRIVER, op)
            self.inflight.labels(DRIVER, op)
        for kind in DEVICE_TYPES:
            self.prepared.labels(node, DRIVER, kind)
        for err in ("lock_acquire", "prepare_devices"):
            self.prepare_errors.labels(DRIVER, err)
        for err in ("lock_acquire", "unprepare_devices"):
            self.unprepare_errors.labels(DRIVER, err)

    def failed(self, operation: str) -> None:
        if operation == "prepare":
            self.prepare_errors.labels(DRIVER, "prepare_devices").inc()
        else:
            self.unprepare_errors.labels(DRIVER, "unprepare_devices").inc()

    def observe_records(self, records: Iterable[ClaimRecord]) -> None:
        counts = dict.fromkeys(DEVICE_TYPES, 0)
        for rec in records:
            if rec.completed:
                kind = rec.kind if rec.kind in counts else "unknown"
                counts[kind] += len(rec.devices)
        for kind, n in counts.items():
            self.prepared.labels(self.node, DRIVER, kind).set(n)


class MetricsEndpoint(ComponentHttpEndpoint):
    """The plugin's HTTP endpoint: what every component serves (cdctl.httpendpoint), with its metrics."""

    def __init__(
        self, endpoint: str, path: str, metrics: PluginMetrics, log_server: LogServer | None = None
    ) -> None:
        super().__init__(endpoint, path, metrics.registry, log_server)
        self.metrics = metrics
