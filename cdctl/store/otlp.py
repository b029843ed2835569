"""Continuous export of a log's committed events as OpenTelemetry log records over OTLP/HTTP.

`OtlpExport(endpoint, source)` is attached to a writable event log (`SqliteEventStore.add_commit_listener`):
after each commit the log's writer calls `offer(events)` on the event loop. `offer` only appends the events to
a bounded in-memory queue and returns: the network is never on the append path. A worker thread takes batches
off the queue, turns each event into a log record (body: the event's data as stored; attributes: the source
and the event's position, hash, stream, version and type) and sends them with the OpenTelemetry SDK's OTLP
exporter (`opentelemetry-exporter-otlp-proto-http`, which itself retries transient failures with backoff).

The SDK's own batch processor is not used: it reports its drops only to an OpenTelemetry meter and drops a
batch whose export failed without a trace. Here a failed batch stays at the head of the queue and is tried
again (with a growing pause) up to `attempts` times; when the queue is full the oldest events go first. Every
event is either exported or counted as dropped, with the reason (`queue_full`, `export_failed`, `shutdown`):
cdctl_otlp_exported_events_total and cdctl_otlp_dropped_events_total (cdctl.store.metrics). The local log is
the record; the export is a copy for fleets that keep history centrally, so a node that dies keeps its last
minutes outside itself. Used by the controller (cdctl.controller.app) and the kubelet plugin
(cdctl.plugin.app).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson
import structlog
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from cdctl.domain.errors import PermanentError
from cdctl.domain.events import RecordedEvent
from cdctl.store.sqlite import SqliteEventStore

log = structlog.get_logger(__name__)
SCOPE = InstrumentationScope("cdctl.eventlog", "1")
DROP_REASONS = ("queue_full", "export_failed", "shutdown")
LOGS_PATH = "/v1/logs"


@dataclass(frozen=True, slots=True)
class ExportSource:
    """Who wrote the log: said on every record (and in the resource), so a fleet's records tell apart."""

    component: str  # controller | kubelet-plugin
    node: str = ""
    pod: str = ""
    namespace: str = ""
    log: str = ""  # the log's name on the component's endpoint (cdctl.store.logserver): controller, plugin

    def resource(self) -> Resource:
        attributes = {
            "service.name": f"cdctl-{self.component}",
            "k8s.node.name": self.node,
            "k8s.pod.name": self.pod,
            "k8s.namespace.name": self.namespace,
        }
        return Resource.create({k: v for k, v in attributes.items() if v})

    def attributes(self) -> dict[str, str]:
        return {
            "cdctl.component": self.component,
            "cdctl.node": self.node,
            "cdctl.pod": self.pod,
            "cdctl.log": self.log or self.component,
        }


def otlp_logs_url(endpoint: str) -> str:
    """The OTLP/HTTP logs URL of `endpoint` (`http://collector:4318` or a full `.../v1/logs` URL).

    ValueError for anything that is not an http(s) URL with a host.
    """
    parts = urlsplit(endpoint.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{endpoint!r} is not an http(s) URL (e.g. http://collector:4318)")
    path = parts.path.rstrip("/")
    if not path.endswith(LOGS_PATH):
        path += LOGS_PATH
    return parts._replace(path=path, query="", fragment="").geturl()


def event_record(event: RecordedEvent, source: ExportSource, resource: Resource) -> ReadableLogRecord:
    """One committed event as an OpenTelemetry log record."""
    at = event.recorded_at
    nanos = (int(at.timestamp()) * 1_000_000 + at.microsecond) * 1000
    body = event.data_json or orjson.dumps(event.data).decode()
    attributes: dict[str, Any] = {
        **source.attributes(),
        "cdctl.event.position": event.position,
        "cdctl.event.hash": event.hash,
        "cdctl.event.stream": event.stream,
        "cdctl.event.version": event.version,
        "cdctl.event.type": event.type,
        "cdctl.event.schema_version": event.schema_version,
        "cdctl.event.metadata": orjson.dumps(event.metadata).decode(),
    }
    record = LogRecord(
        timestamp=nanos, observed_timestamp=nanos, body=body, attributes=attributes, event_name=event.type
    )
    return ReadableLogRecord(log_record=record, resource=resource, instrumentation_scope=SCOPE)


class OtlpExport:
    """A bounded queue of committed events and the thread that exports them. `start()`, then `close()`."""

    def __init__(
        self,
        endpoint: str,
        source: ExportSource,
        *,
        max_queue: int = 10_000,
        batch: int = 512,
        delay_s: float = 1.0,
        timeout_s: float = 10.0,
        attempts: int = 5,
        max_pause_s: float = 30.0,
    ) -> None:
        if max_queue < 1 or batch < 1 or attempts < 1:
            raise PermanentError("OTLP export: max_queue, batch and attempts must be at least 1")
        try:
            self.url = otlp_logs_url(endpoint)
        except ValueError as exc:
            raise PermanentError(f"--otlp-endpoint: {exc}") from None
        self.source = source
        self.max_queue = max_queue
        self.batch = min(batch, max_queue)
        self.delay_s = delay_s
        self.attempts = attempts
        self.max_pause_s = max_pause_s
        self._exporter: LogRecordExporter = OTLPLogExporter(endpoint=self.url, timeout=timeout_s)
        self._resource = source.resource()
        self._queue: collections.deque[RecordedEvent] = collections.deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.exported = 0
        self.dropped = dict.fromkeys(DROP_REASONS, 0)
        self.failed_attempts = 0

    # ---- the event loop's side: never waits --------------------------------------------------------------
    def offer(self, events: Sequence[RecordedEvent]) -> None:
        """Queue committed events; when the queue is full the oldest are dropped (and counted)."""
        with self._lock:
            if self._stopping.is_set():
                self.dropped["shutdown"] += len(events)
                return
            overflow = len(self._queue) + len(events) - self.max_queue
            if overflow > 0:
                from_queue = min(overflow, len(self._queue))
                for _ in range(from_queue):
                    self._queue.popleft()
                events = events[overflow - from_queue :]
                self.dropped["queue_full"] += overflow
            self._queue.extend(events)
            full = len(self._queue) >= self.batch
        if full:
            self._wake.set()

    def queued(self) -> int:
        with self._lock:
            return len(self._queue)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"otlp-export:{self.url}", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop: the queue is flushed for at most `timeout_s` (one attempt per batch); what is left is counted
        as dropped. Blocking: an async caller runs it in a thread (`asyncio.to_thread`)."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._exporter.shutdown()  # type: ignore[no-untyped-call]  # aborts a retry in progress
        with self._lock:
            left = len(self._queue)
            self._queue.clear()
            self.dropped["shutdown"] += left
        if any(self.dropped.values()):
            log.warning("OTLP export dropped events", url=self.url, exported=self.exported, **self.dropped)

    # ---- the worker thread -------------------------------------------------------------------------------
    def _run(self) -> None:
        failures = 0
        while True:
            if failures:
                pause = min(self.max_pause_s, self.delay_s * 2 ** (failures - 1))
                self._stopping.wait(pause)
            elif not self._stopping.is_set():
                self._wake.wait(self.delay_s)
                self._wake.clear()
            with self._lock:
                batch = [self._queue[i] for i in range(min(self.batch, len(self._queue)))]
            if not batch:
                if self._stopping.is_set():
                    return
                continue
            if self._send(batch):
                failures = 0
                self._settle(batch, exported=True)
            else:
                failures += 1
                self.failed_attempts += 1
                if failures >= self.attempts or self._stopping.is_set():
                    self._settle(batch, exported=False)
                    failures = 0
                    if self._stopping.is_set():
                        return

    def _send(self, batch: list[RecordedEvent]) -> bool:
        try:
            records = [event_record(event, self.source, self._resource) for event in batch]
            return self._exporter.export(records) is LogRecordExportResult.SUCCESS
        except Exception as exc:  # the exporter's own errors are logged by it; never kill the thread
            log.warning("OTLP export failed", url=self.url, error=repr(exc))
            return False

    def _settle(self, batch: list[RecordedEvent], *, exported: bool) -> None:
        """Take the batch off the queue: those of its events the queue still holds (overflow may have
        dropped some of them, already counted)."""
        with self._lock:
            gone = {id(event) for event in batch}
            settled = 0
            while self._queue and id(self._queue[0]) in gone:
                self._queue.popleft()
                settled += 1
            if exported:
                self.exported += settled
            else:
                self.dropped["export_failed"] += settled


def attach(store: SqliteEventStore, endpoint: str, source: ExportSource, **options: Any) -> OtlpExport:
    """Start exporting `store`'s commits to `endpoint` (the caller `close()`s it after the store's last
    append)."""
    export = OtlpExport(endpoint, source, **options)
    export.start()
    store.add_commit_listener(export.offer)
    log.info("exporting committed events over OTLP", url=export.url, **source.attributes())
    return export
