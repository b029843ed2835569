"""Benchmark of event log compaction (not a test): a 1M-event log compacted, and the appends it stalls.

    python bench/compaction.py [--events 1000000] [--keep 100000] [--tick-ms 2] [--dir DIR]

Builds a node's log of --events events (claims of a busy node: five events a claim, half the traffic, and
ComputeDomain events), projects it with the lifecycle views as the kubelet plugin does, then compacts it as
the plugin does (keeping the lifecycle views and its claim book at the horizon) with the age bound placed so
that all but the last --keep events are removed, while a ticker appends one event
every --tick-ms milliseconds through the same store (a component's own appends). Prints and writes
bench/results/compaction.json: the compaction's duration and its phases (folding the snapshot at the
horizon, removing events and rows in bounded batches, giving pages back), the longest writer transaction,
the append latency during compaction against the same ticker without it (the longest stall an append saw),
the file's size before and after, and the time to reopen and resume the views and to verify the result.
The longest stall is reported per phase; on a shared machine it follows the load (recorded beside it): the
fold is CPU-bound, and a process descheduled mid-chunk, or mid garbage collection, stalls its event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cdctl.domain.claims import (
    ChannelAllocated,
    ChannelReleased,
    ClaimPrepareCompleted,
    ClaimPrepareStarted,
    ClaimUnprepared,
    claim_stream,
)
from cdctl.domain.events import NewEvent
from cdctl.domain.retention import RetentionPolicy
from cdctl.plugin.checkpoint import ClaimBookProjection
from cdctl.projections.compaction import compact
from cdctl.projections.lifecycle import lifecycle_projections
from cdctl.projections.replay import VerifyReport, verify_chain, verify_projections
from cdctl.projections.runner import ProjectionRunner
from cdctl.projections.sinks import SqliteSink
from cdctl.store import SqliteEventStore, StreamAppend
from cdctl.store import compaction as mechanics

RESULTS = Path(__file__).parent / "results" / "compaction.json"
NODE = "gb200-r01-n01"
AGE = RetentionPolicy(age_s=3600, size_bytes=0)


def claim_events(uid: str, node: str, domain: str, channel: int) -> list[NewEvent]:
    return [
        NewEvent.of(e)
        for e in (
            ClaimPrepareStarted(uid, "team-a", f"w-{uid[:8]}", node, "channel", domain, "1", ["channel-0"]),
            ChannelAllocated(uid, node, channel, domain),
            ClaimPrepareCompleted(uid, [f"k8s.compute-domain.nvidia.com/claim={uid}-channel-0"]),
            ChannelReleased(uid, node, channel),
            ClaimUnprepared(uid, "pod deleted"),
        )
    ]


async def build_log(path: Path, total: int) -> None:
    """Half claim traffic (5 events a claim), half ComputeDomain events, in batches of 5,000 events."""
    async with await SqliteEventStore.open(path) as store:
        written = 0
        while written < total:
            appends: list[StreamAppend] = []
            size = 0
            while size < 5_000 and written + size < total:
                k = written + size
                if (k // 10) % 2 == 0:
                    uid = str(uuid.UUID(int=k))
                    events = claim_events(uid, NODE, f"d{k % 1000}", k % 4)
                    stream = claim_stream(uid)
                else:
                    data = {
                        "domain_uid": f"d{k % 1000}",
                        "kind": "Pod",
                        "name": f"daemon-{k}",
                        "change": "MODIFIED",
                    }
                    events, stream = [NewEvent("DomainObjectObserved", data)] * 5, f"domain/d{k % 1000}"
                events = events[: total - written - size]
                appends.append(StreamAppend(stream, events))
                size += len(events)
            await store.append_batch(appends)
            written += size
        runner = ProjectionRunner(store, lifecycle_projections(), batch_size=20_000)
        await runner.start()
        await runner.catch_up()


class Ticker:
    """Appends one event every `period` seconds and records each append's latency (submit to durable)."""

    def __init__(self, store: SqliteEventStore, period: float) -> None:
        self.store, self.period = store, period
        self.latencies: list[float] = []
        self.started: list[float] = []  # when each append was made (perf_counter)

    async def run(self, stop: asyncio.Event) -> None:
        n = 0
        while not stop.is_set():
            started = time.perf_counter()
            await self.store.append("node/ticker", [NewEvent("Tick", {"n": n})])
            self.started.append(started)
            self.latencies.append(time.perf_counter() - started)
            n += 1
            await asyncio.sleep(self.period)


def latency_figures(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "appends": len(ordered),
        "median_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[int(len(ordered) * 0.99) - 1] * 1000 if len(ordered) >= 100 else ordered[-1] * 1000,
        "max_ms": ordered[-1] * 1000,
    }


def file_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal")) if p.exists())


async def ticked(store: SqliteEventStore, period: float, seconds: float) -> list[float]:
    stop = asyncio.Event()
    ticker = Ticker(store, period)
    task = asyncio.ensure_future(ticker.run(stop))
    await asyncio.sleep(seconds)
    stop.set()
    await task
    return ticker.latencies


async def compaction_round(path: Path, events: int, keep: int, period: float) -> dict[str, Any]:
    async with await SqliteEventStore.open(path) as store:
        horizon_wanted = events - keep
        [(recorded_at,)] = await store.query(
            "SELECT recorded_at FROM events WHERE position = ?", (horizon_wanted + 1,)
        )
        now = datetime.fromisoformat(recorded_at) + timedelta(seconds=AGE.age_s)
        before = {"file_bytes": file_bytes(path), "live_bytes": await store.on_reader(mechanics.live_bytes)}
        baseline = await ticked(store, period, 5.0)
        stop = asyncio.Event()
        ticker = Ticker(store, period)
        tick_task = asyncio.ensure_future(ticker.run(stop))
        started = time.perf_counter()
        report = await compact(store, AGE, [*lifecycle_projections(), ClaimBookProjection(NODE)], now=now)
        elapsed = time.perf_counter() - started
        stop.set()
        await tick_task
        assert report is not None
        phases = {"plan": (0.0, report.plan_s), "remove": (report.plan_s, report.removed_s),
                  "reclaim": (report.removed_s, elapsed)}  # fmt: skip
        by_phase = {
            name: max(
                (lat * 1000 for at, lat in zip(ticker.started, ticker.latencies, strict=True)
                 if low <= at - started < high),
                default=0.0,
            )
            for name, (low, high) in phases.items()
        }  # fmt: skip
    started = time.perf_counter()
    async with await SqliteEventStore.open(path) as store:
        runner = ProjectionRunner(store, lifecycle_projections())
        await runner.start()
        reopen_s = time.perf_counter() - started
    verified = VerifyReport()
    started = time.perf_counter()
    async with await SqliteEventStore.open(path, read_only=True) as store:
        await verify_chain(store, verified)
        await verify_projections(store, lifecycle_projections(), SqliteSink(store), verified)
    verify_s = time.perf_counter() - started
    return {
        "events": events,
        "horizon": report.horizon,
        "events_removed": report.events_removed,
        "rows_removed": report.rows_removed,
        "duration_s": elapsed,
        "plan_s": report.plan_s,
        "remove_s": report.removed_s - report.plan_s,
        "reclaim_s": elapsed - report.removed_s,
        "longest_append_ms_by_phase": by_phase,
        "batches": report.batches,
        "longest_batch_ms": report.longest_batch_s * 1000,
        "longest_reclaim_step_ms": report.longest_reclaim_s * 1000,
        "pages_reclaimed": report.pages_reclaimed,
        "before": before,
        "after": {"file_bytes": report.file_bytes_after, "live_bytes": report.live_bytes_after},
        "appends_without_compaction": latency_figures(baseline),
        "appends_during_compaction": latency_figures(ticker.latencies),
        "reopen_and_resume_s": reopen_s,
        "verify_s": verify_s,
        "verified": verified.ok,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keep", type=int, default=100_000, help="events after the horizon")
    parser.add_argument("--tick-ms", type=float, default=2.0, help="the ticker's pause between appends")
    parser.add_argument(
        "--dir", type=Path, default=None, help="directory for the files (default: a temp dir)"
    )
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="cdctl-bench-compaction-", dir=args.dir))
    path = base / "events.db"
    print(f"cdctl compaction benchmark in {base} (python {platform.python_version()}, {os.cpu_count()} cpus)")
    started = time.perf_counter()
    asyncio.run(build_log(path, args.events))
    print(f"  {'built and projected the log (s)':<48} {time.perf_counter() - started:>12.1f}")
    load_before = os.getloadavg()
    figures = asyncio.run(compaction_round(path, args.events, args.keep, args.tick_ms / 1000))
    figures["load_average"] = {"before": load_before[0], "after": os.getloadavg()[0]}
    shutil.rmtree(base, ignore_errors=True)
    without, during = figures["appends_without_compaction"], figures["appends_during_compaction"]
    rows = [
        ("events removed", f"{figures['events_removed']:,}"),
        ("compaction, total (s)", f"{figures['duration_s']:.1f}"),
        ("  folding the snapshot at the horizon (s)", f"{figures['plan_s']:.1f}"),
        ("  removing events and rows (s)", f"{figures['remove_s']:.1f}"),
        ("  giving pages back (s)", f"{figures['reclaim_s']:.1f}"),
        ("  writer transactions (batches)", f"{figures['batches']:,}"),
        ("  longest batch (ms)", f"{figures['longest_batch_ms']:.1f}"),
        ("  longest incremental-vacuum step (ms)", f"{figures['longest_reclaim_step_ms']:.1f}"),
        ("append latency without compaction: median/p99/max (ms)",
         f"{without['median_ms']:.1f}/{without['p99_ms']:.1f}/{without['max_ms']:.1f}"),
        ("append latency during compaction: median/p99/max (ms)",
         f"{during['median_ms']:.1f}/{during['p99_ms']:.1f}/{during['max_ms']:.1f}"),
        ("longest append while folding/removing/giving back (ms)",
         "/".join(f"{figures['longest_append_ms_by_phase'][k]:.0f}" for k in ("plan", "remove", "reclaim"))),
        ("file before -> after (MB)",
         f"{figures['before']['file_bytes'] / 1e6:.0f} -> {figures['after']['file_bytes'] / 1e6:.0f}"),
        ("reopen and resume the views (s)", f"{figures['reopen_and_resume_s']:.2f}"),
        ("cdctl verify after compaction (s)", f"{figures['verify_s']:.2f}"),
        ("load average before/after", "{before:.1f}/{after:.1f}".format(**figures["load_average"])),
    ]  # fmt: skip
    for label, value in rows:
        print(f"  {label:<56} {value:>14}")
    results = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "compaction": figures,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
