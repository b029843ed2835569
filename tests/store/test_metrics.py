"""The event log's metrics (cdctl.store.metrics) read what the file holds: events counted from the first one
compaction kept (across a reopen too), the file's bytes, one append-latency observation per append, and each
projection's lag behind the head."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from cdctl.projections.lifecycle import lifecycle_projections
from cdctl.projections.runner import ProjectionRunner
from cdctl.store import SqliteEventStore
from cdctl.store.metrics import EventLogCollector, ProjectionLagCollector
from tests.store.compacting import claims, compact_through


def sample(collector: Collector, name: str, **labels: str) -> float:
    registry = CollectorRegistry()
    registry.register(collector)
    got = registry.get_sample_value(name, labels)
    assert got is not None, name
    return got


def on_disk(*paths: Path) -> int:
    return sum(path.stat().st_size for path in paths)


async def test_events_size_and_appends_follow_the_file_through_compaction_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "node.db"
    async with await SqliteEventStore.open(path) as store:
        collector = EventLogCollector(store)
        assert sample(collector, "cdctl_event_log_events") == 0
        runner = ProjectionRunner(store, lifecycle_projections(), snapshot_every=7)
        await runner.start()
        await claims(store, 0, 12)
        await runner.catch_up()
        head = store.head()
        assert sample(collector, "cdctl_event_log_events") == head
        appends = sample(collector, "cdctl_event_log_append_duration_seconds_count")
        await claims(store, 100, 1)
        assert sample(collector, "cdctl_event_log_append_duration_seconds_count") > appends
        await runner.catch_up()
        assert await compact_through(store, 10) is not None
        [(first,)] = await store.query("SELECT MIN(position) FROM events")
        assert first == 11
        kept = store.head() - 10
        assert sample(collector, "cdctl_event_log_events") == kept
        size = sample(collector, "cdctl_event_log_size_bytes")
        assert size == on_disk(path, Path(f"{path}-wal"))
    async with await SqliteEventStore.open(path) as reopened:
        assert sample(EventLogCollector(reopened), "cdctl_event_log_events") == kept


async def test_projection_lag_is_the_head_minus_each_position(tmp_path: Path) -> None:
    async with await SqliteEventStore.open(tmp_path / "e.db") as store:
        await claims(store, 0, 3)
        positions = {"claim_lifecycle": 2, "domain_history": store.head()}
        lag = ProjectionLagCollector(store, lambda: positions)
        assert sample(lag, "cdctl_projection_lag_events", projection="claim_lifecycle") == store.head() - 2
        assert sample(lag, "cdctl_projection_lag_events", projection="domain_history") == 0
