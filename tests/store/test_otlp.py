"""The OTLP export of committed events (cdctl.store.otlp) against a real OTLP/HTTP receiver started here: what
arrives (decoded with opentelemetry-proto), and that a stuck or dead endpoint never holds up an append, keeps
the queue bounded and counts every event it could not send."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry, generate_latest

from cdctl.cli.main import cli
from cdctl.domain.errors import PermanentError
from cdctl.domain.events import NewEvent
from cdctl.store import otlp
from cdctl.store.metrics import OtlpExportCollector
from cdctl.store.otlp import ExportSource, OtlpExport, otlp_logs_url
from cdctl.store.sqlite import SqliteEventStore
from tests.store.otlpreceiver import Receiver, receiver

__all__ = ["receiver"]
SOURCE = ExportSource("kubelet-plugin", "gb200-n03", "cdctl-kubelet-plugin-x7k2p", "cdctl-system", "plugin")


async def until(check: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting for {what}")
        await asyncio.sleep(0.02)


def metrics(export: OtlpExport) -> str:
    registry = CollectorRegistry()
    registry.register(OtlpExportCollector(export))
    return generate_latest(registry).decode()


def dead_url() -> str:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


async def test_every_committed_event_arrives_with_its_source_and_its_place_in_the_chain(
    tmp_path: Path, receiver: Receiver
) -> None:
    async with await SqliteEventStore.open(tmp_path / "e.db") as store:
        export = otlp.attach(store, receiver.url, SOURCE, delay_s=0.02, batch=4)
        try:
            recorded = await store.append(
                "claim/u-1", [NewEvent("ClaimPrepareStarted", {"n": i}) for i in range(3)]
            )
            recorded += await store.append("node/gb200-n03", [NewEvent("NodeObserved", {"boot": "b1"})])
            await until(lambda: len(receiver.records) == 4, "4 records")
        finally:
            await asyncio.to_thread(export.close)
    assert len(receiver.records) == 4
    for event, (resource, attributes, body) in zip(recorded, receiver.records, strict=True):
        assert resource["service.name"] == "cdctl-kubelet-plugin"
        assert resource["k8s.node.name"] == "gb200-n03"
        assert attributes["cdctl.component"] == "kubelet-plugin"
        assert attributes["cdctl.node"] == "gb200-n03"
        assert attributes["cdctl.pod"] == "cdctl-kubelet-plugin-x7k2p"
        assert attributes["cdctl.event.position"] == event.position
        assert attributes["cdctl.event.hash"] == event.hash
        assert attributes["cdctl.event.stream"] == event.stream
        assert attributes["cdctl.event.type"] == event.type
        assert orjson.loads(body) == event.data
    assert [a["cdctl.event.position"] for _, a, _ in receiver.records] == [1, 2, 3, 4]
    text = metrics(export)
    assert "cdctl_otlp_exported_events_total 4.0" in text
    assert 'cdctl_otlp_dropped_events_total{reason="queue_full"} 0.0' in text


async def test_a_stuck_endpoint_holds_up_no_append_and_the_queue_stays_bounded(
    tmp_path: Path, receiver: Receiver
) -> None:
    receiver.stuck = True
    async with await SqliteEventStore.open(tmp_path / "e.db") as store:
        export = otlp.attach(store, receiver.url, SOURCE, delay_s=0.01, batch=10, max_queue=50, timeout_s=60)
        try:
            await store.append("s/0", [NewEvent("Thing", {"n": 0})])
            await until(lambda: receiver.held == 1, "the exporter to be stuck in its first request")
            for n in range(1, 200):  # every append commits while that request hangs
                await store.append("s/0", [NewEvent("Thing", {"n": n})])
            assert receiver.held == 1 and store.head() == 200
            assert export.queued() == 50  # bounded: the newest 50
            assert export.dropped["queue_full"] == 150
            assert export.exported == 0
            assert 'cdctl_otlp_dropped_events_total{reason="queue_full"} 150.0' in metrics(export)
        finally:
            receiver.release.set()
            await asyncio.to_thread(export.close, 0.5)
    assert export.exported + sum(export.dropped.values()) == 200  # each event sent or counted


async def test_a_dead_endpoint_drops_after_its_retries_and_counts_them(tmp_path: Path) -> None:
    async with await SqliteEventStore.open(tmp_path / "e.db") as store:
        export = otlp.attach(
            store, dead_url(), SOURCE, delay_s=0.01, batch=5, attempts=2, max_pause_s=0.01, timeout_s=0.2
        )
        try:
            for n in range(12):
                await store.append("s/0", [NewEvent("Thing", {"n": n})])
            assert store.head() == 12  # the local log has them all
            await until(lambda: export.dropped["export_failed"] == 12, "every batch to fail its retries")
            assert export.failed_attempts >= 6  # 3 batches, 2 attempts each
        finally:
            await asyncio.to_thread(export.close, 0.5)
    assert export.exported == 0
    assert 'cdctl_otlp_dropped_events_total{reason="export_failed"} 12.0' in metrics(export)


async def test_events_still_queued_at_close_are_counted_as_dropped_at_shutdown(
    tmp_path: Path, receiver: Receiver
) -> None:
    receiver.stuck = True
    async with await SqliteEventStore.open(tmp_path / "e.db") as store:
        export = otlp.attach(store, receiver.url, SOURCE, delay_s=0.01, batch=2, timeout_s=60)
        for n in range(5):
            await store.append("s/0", [NewEvent("Thing", {"n": n})])
        await until(lambda: receiver.held == 1, "the exporter to be stuck")
    receiver.release.set()
    await asyncio.to_thread(export.close, 0.2)
    assert export.dropped["shutdown"] + export.dropped["export_failed"] == 5
    export.offer([])  # after close: nothing queued, nothing raised
    assert export.queued() == 0


@pytest.mark.parametrize("endpoint", ["collector:4318", "ftp://collector", "http://", ""])
def test_an_endpoint_that_is_not_an_http_url_is_refused(endpoint: str) -> None:
    with pytest.raises(ValueError, match="not an http"):
        otlp_logs_url(endpoint)
    with pytest.raises(PermanentError, match="--otlp-endpoint"):
        OtlpExport(endpoint, SOURCE)


def test_the_logs_path_is_added_once() -> None:
    assert otlp_logs_url("http://c:4318") == "http://c:4318/v1/logs"
    assert otlp_logs_url("https://c:4318/v1/logs/") == "https://c:4318/v1/logs"
    assert otlp_logs_url("http://c/otel") == "http://c/otel/v1/logs"


@pytest.mark.parametrize("command", ["controller", "kubelet-plugin"])
def test_the_components_refuse_a_bad_endpoint_naming_the_flag(command: str) -> None:
    result = CliRunner().invoke(cli, [command, "--otlp-endpoint", "collector:4318"])
    assert result.exit_code == 2
    assert "--otlp-endpoint" in result.output and "not an http(s) URL" in result.output
    assert "Traceback" not in result.output
