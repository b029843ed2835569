"""Benchmark of the event store (not a test): appends against raw sqlite3, replay fold rate, snapshot open.

    python bench/store.py [--replay-events 1000000] [--appends 2000] [--rounds 5] [--dir DIR]

Prints the figures and writes bench/results/store.json. Raw sqlite3 runs with the store's pragmas
(WAL, synchronous=FULL) and schema on the same file system, inserting the same rows, one transaction per event
(single) or per 100 events (batched). The replay figures fold the lifecycle projections over a log of
--replay-events events (claims of a busy node plus ComputeDomain events); the open figure is the time to
open that log and resume the projections from their latest snapshot. The tail figure is the time a writer
takes to open that log once 50,000 events (the runner's snapshot interval: the longest tail a component's
log has after its latest snapshot) were appended after the snapshot: the chain check at open recomputes
their links.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from statistics import median
from typing import Any

from cdctl.domain import hashchain
from cdctl.domain.claims import (
    ChannelAllocated,
    ChannelReleased,
    ClaimPrepareCompleted,
    ClaimPrepareStarted,
    ClaimUnprepared,
    claim_stream,
)
from cdctl.domain.events import Actor, NewEvent
from cdctl.projections.lifecycle import lifecycle_projections
from cdctl.projections.replay import Rebuild
from cdctl.projections.runner import ProjectionRunner
from cdctl.store import SqliteEventStore, StreamAppend
from cdctl.store.schema import load_migrations, migration_script
from cdctl.store.sqlite import PRAGMAS

RESULTS = Path(__file__).parent / "results" / "store.json"
ACTOR = Actor("kubelet-plugin", "cdctl-kubelet-plugin-x", "gb200-r01-n01").to_json()


def event(i: int) -> NewEvent:
    return NewEvent(
        "ChannelAllocated",
        {"claim_uid": f"c{i}", "node": "gb200-r01-n01", "channel": i % 2048},
        metadata={"actor": ACTOR},
    )


def raw_rows(n: int) -> list[tuple[Any, ...]]:
    now = datetime.now(UTC).isoformat(timespec="microseconds")
    rows, previous = [], hashchain.GENESIS
    for i in range(n):
        e = event(i)
        data, meta = hashchain.dumps(e.data), hashchain.dumps(e.metadata)
        previous = hashchain.chain(
            previous, hashchain.canonical_bytes(i + 1, "s/1", i + 1, e.type, 1, data, meta, now)
        )
        rows.append((i + 1, "s/1", i + 1, e.type, 1, data, meta, now, previous))
    return rows


def raw_sqlite(path: Path, n: int, per_commit: int) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    for pragma in PRAGMAS:
        conn.execute(pragma)
    for migration in load_migrations():  # the very schema the store writes: same table, indexes, triggers
        conn.executescript(migration_script(migration))
    rows = raw_rows(n)
    started = time.perf_counter()
    for i in range(0, n, per_commit):
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows[i : i + per_commit])
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return n / elapsed


async def store_appends(path: Path, n: int, per_commit: int, concurrency: int = 1) -> float:
    async with await SqliteEventStore.open(path) as store:
        batches = [[event(i + j) for j in range(per_commit)] for i in range(0, n, per_commit)]
        started = time.perf_counter()
        if concurrency == 1:
            for version, batch in enumerate(batches):
                await store.append("s/1", batch, expected_version=version * per_commit)
        else:
            queue = iter(batches)

            async def worker(w: int) -> None:
                for batch in queue:
                    await store.append(f"s/{w}", batch)

            await asyncio.gather(*(worker(w) for w in range(concurrency)))
        elapsed = time.perf_counter() - started
        assert store.head() == n
    return n / elapsed


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
    """Half claim traffic (5 events a claim), half ComputeDomain events, appended in batches."""
    async with await SqliteEventStore.open(path) as store:
        written, batch_size = 0, 5_000
        while written < total:
            appends: list[StreamAppend] = []
            size = 0
            while size < batch_size and written + size < total:
                k = written + size
                if (k // 10) % 2 == 0:
                    uid = str(uuid.UUID(int=k))
                    events = claim_events(uid, f"gb200-r{k % 8:02d}-n{k % 18:02d}", f"d{k % 1000}", k % 4)
                else:
                    events = [
                        NewEvent(
                            "DomainObjectObserved",
                            {
                                "domain_uid": f"d{k % 1000}",
                                "kind": "Pod",
                                "name": f"daemon-{k}",
                                "change": "MODIFIED",
                            },
                        )
                    ] * 5
                events = events[: total - written - size]
                appends.append(
                    StreamAppend(
                        claim_stream(str(k)) if (k // 10) % 2 == 0 else f"domain/d{k % 1000}", events
                    )
                )
                size += len(events)
            await store.append_batch(appends)
            written += size


async def replay_figures(path: Path) -> dict[str, float]:
    async with await SqliteEventStore.open(path, read_only=True) as store:
        started = time.perf_counter()
        events = []
        after = 0
        while True:
            batch = await store.read_all(after=after, limit=20_000)
            if not batch:
                break
            events.extend(batch)
            after = batch[-1].position
        read_s = time.perf_counter() - started
    rebuild = Rebuild(lifecycle_projections())
    started = time.perf_counter()
    rebuild.feed(events)
    fold_s = time.perf_counter() - started
    return {
        "events": len(events),
        "read_decode_events_per_s": len(events) / read_s,
        "fold_events_per_s": len(events) / fold_s,
        "replay_end_to_end_events_per_s": len(events) / (read_s + fold_s),
    }


async def snapshot_open(path: Path, snapshot_every: int) -> dict[str, float]:
    async with await SqliteEventStore.open(path) as store:
        runner = ProjectionRunner(
            store, lifecycle_projections(), snapshot_every=snapshot_every, batch_size=20_000
        )
        started = time.perf_counter()
        await runner.start()
        await runner.catch_up()
        project_s = time.perf_counter() - started
    started = time.perf_counter()
    async with await SqliteEventStore.open(path) as store:
        resumed = ProjectionRunner(store, lifecycle_projections())
        await resumed.start()
        open_s = time.perf_counter() - started
        rows = len(resumed.view("claim_lifecycle"))
    return {"project_all_s": project_s, "open_with_snapshot_s": open_s, "claim_rows": rows}


TAIL_EVENTS = 50_000


async def tail_open(path: Path, tail: int = TAIL_EVENTS) -> dict[str, float]:
    """Append `tail` events after the latest snapshot, then time a writer's open (its chain check)."""
    async with await SqliteEventStore.open(path) as store:
        for start in range(0, tail, 1_000):
            events = [
                NewEvent(
                    "ClaimPrepareStarted", {"claimUID": f"tail-{n}", "namespace": "bench", "name": f"c{n}"}
                )
                for n in range(start, start + 1_000)
            ]
            await store.append("claim/tail", events)
    started = time.perf_counter()
    async with await SqliteEventStore.open(path) as store:
        checked = store.checked_at_open
    return {"open_with_tail_s": time.perf_counter() - started, "tail_events_checked": checked}


def append_round(base: Path, index: int, n: int, nb: int) -> dict[str, float]:
    """One paired round: raw and store back to back, so that both see the same load on the machine."""
    print(f"appends, round {index + 1} (events/s)")
    raw_single = timed("raw sqlite3, 1 event per commit", lambda: raw_sqlite(base / f"raw1-{index}.db", n, 1))
    store_single = timed(
        "store, 1 event per append", lambda: asyncio.run(store_appends(base / f"s1-{index}.db", n, 1))
    )
    raw_batch = timed(
        "raw sqlite3, 100 events per commit", lambda: raw_sqlite(base / f"raw100-{index}.db", nb, 100)
    )
    store_batch = timed(
        "store, 100-event batch appends",
        lambda: asyncio.run(store_appends(base / f"s100-{index}.db", nb, 100)),
    )
    return {
        "raw_single_per_s": raw_single,
        "store_single_per_s": store_single,
        "raw_batch100_events_per_s": raw_batch,
        "store_batch100_events_per_s": store_batch,
        "single_ratio": store_single / raw_single,
        "batch_ratio": store_batch / raw_batch,
    }


def spread(values: Iterable[float]) -> list[float]:
    ordered = sorted(values)
    return [ordered[0], ordered[-1]]


def timed(label: str, fn: Callable[[], float]) -> float:
    value = fn()
    print(f"  {label:<44} {value:>12,.0f}", flush=True)
    return value


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--replay-events", type=int, default=1_000_000)
    parser.add_argument("--appends", type=int, default=2_000, help="single-event appends per round")
    parser.add_argument(
        "--rounds", type=int, default=5, help="paired raw/store rounds; ratios are their medians"
    )
    parser.add_argument(
        "--dir", type=Path, default=None, help="directory for the files (default: a temp dir)"
    )
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="cdctl-bench-", dir=args.dir))
    n, nb = args.appends, args.appends * 10
    print(f"cdctl store benchmark in {base} (python {platform.python_version()}, {os.cpu_count()} cpus)")
    load_before = os.getloadavg()[0]
    rounds = [append_round(base, r, n, nb) for r in range(args.rounds)]
    store_group = timed(
        "store, 1 event per append, 32 concurrent",
        lambda: asyncio.run(store_appends(base / "s1c.db", n, 1, concurrency=32)),
    )
    print(f"replay over {args.replay_events:,} events")
    log = base / "replay.db"
    started = time.perf_counter()
    asyncio.run(build_log(log, args.replay_events))
    print(f"  {'built the log in (s)':<44} {time.perf_counter() - started:>12.1f}")
    replay = asyncio.run(replay_figures(log))
    for key in ("read_decode_events_per_s", "fold_events_per_s", "replay_end_to_end_events_per_s"):
        print(f"  {key:<44} {replay[key]:>12,.0f}")
    opened = asyncio.run(snapshot_open(log, snapshot_every=max(args.replay_events // 10, 1)))
    print(f"  {'project all events, with snapshots (s)':<44} {opened['project_all_s']:>12.2f}")
    print(f"  {'open + resume from snapshot (s)':<44} {opened['open_with_snapshot_s']:>12.3f}")
    opened |= asyncio.run(tail_open(log))
    print(f"  {'open, checking a 50,000-event tail (s)':<44} {opened['open_with_tail_s']:>12.3f}")
    results = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "appends": {
            "rounds": rounds,
            "raw_single_per_s": median(r["raw_single_per_s"] for r in rounds),
            "store_single_per_s": median(r["store_single_per_s"] for r in rounds),
            "store_single_32_concurrent_per_s": store_group,
            "raw_batch100_events_per_s": median(r["raw_batch100_events_per_s"] for r in rounds),
            "store_batch100_events_per_s": median(r["store_batch100_events_per_s"] for r in rounds),
            "single_ratio": median(r["single_ratio"] for r in rounds),
            "batch_ratio": median(r["batch_ratio"] for r in rounds),
            "single_ratio_range": [
                min(r["single_ratio"] for r in rounds),
                max(r["single_ratio"] for r in rounds),
            ],
            "batch_ratio_range": [
                min(r["batch_ratio"] for r in rounds),
                max(r["batch_ratio"] for r in rounds),
            ],
            "load_average_before": load_before,
        },
        "replay": replay,
        "snapshot": opened,
        "targets": {
            "append_ratio_min": 0.5,
            "fold_events_per_s_min": 200_000,
            "open_with_snapshot_s_max": 1.0,
        },
    }
    appends = results["appends"]
    print(
        f"median ratios over {len(rounds)} rounds: single {appends['single_ratio']:.2f}"
        f" (range {appends['single_ratio_range'][0]:.2f}-{appends['single_ratio_range'][1]:.2f}),"
        f" batch {appends['batch_ratio']:.2f}"
        f" (range {appends['batch_ratio_range'][0]:.2f}-{appends['batch_ratio_range'][1]:.2f});"
        " target >= 0.50"
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    sys.exit(0)


if __name__ == "__main__":
    main()
