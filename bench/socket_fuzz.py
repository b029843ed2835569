"""100,000 arbitrary and mutated bodies to every gRPC method the kubelet plugin serves, over its real sockets.

The plugin's registration and DRA servers (DRA v1 and v1beta1, resource health v1 and v1alpha1) run in this
process over in-memory fakes (tests/plugin/socketfuzz.py); a seeded generator sends, one call at a time,
random bytes and valid requests damaged as a decoder meets them (flipped bits, truncation, a field's wire
type changed, lengths past the end, varints that never end). Reports per method: answers by gRPC status
(anything but OK and INVALID_ARGUMENT is a crash), latency p50/p99/max; and for the whole run: stacks
logged (grpclib's "Application error" or any log line with a traceback), log lines written by level,
descriptors, asyncio tasks and RSS every 10,000 calls, their growth over the last 30% of the calls, and CDI
specs left. The claim book is on a SQLite log on disk, as the plugin's is, compacted every second under a
1 MiB bound with the claims it removes dropped from memory (a damaged UUID is a new claim to unprepare:
without that, every one of them stayed in the book). The calls share one HTTP/2
connection per socket for `--reconnect-every` calls: h2 remembers up to 65,536 closed streams per connection
(its MAX_CLOSED_STREAMS; about 100 bytes each, client and server side both in this process), so over one
connection RSS grows until that bound, by design, and would hide a leak of ours; `--reconnect-every 0`
keeps one connection, as a kubelet that never restarts does.
Writes bench/results/socket-fuzz-<UTC time>.json.

    .venv/bin/python bench/socket_fuzz.py [--calls 100000] [--seed 3]
"""

from __future__ import annotations

import argparse
import array
import asyncio
import collections
import json
import logging
import platform
import random
import statistics
import sys
import time
from collections.abc import Mapping, MutableMapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.plugin.socketfuzz import (
    METHODS,
    UID,
    FuzzTarget,
    mutate,
    open_descriptors,
    watching_logs,
)

RESULTS = Path(__file__).resolve().parent / "results"
STEADY_FROM = 0.7  # the share of calls after which growth counts as a leak (see above)
SAMPLE_EVERY = 10_000


class LogCounter:
    """A structlog processor that counts what the plugin would log, by level, and each line with a stack,
    and drops it (100,000 calls would print a million lines)."""

    def __init__(self) -> None:
        self.by_level: collections.Counter[str] = collections.Counter()
        self.stacks: list[str] = []

    def __call__(self, logger: Any, method: str, event: MutableMapping[str, Any]) -> Mapping[str, Any]:
        self.by_level[method] += 1
        if "exc_info" in event or "exception" in event:
            stack = str(event.get("exc_info") or event.get("exception"))
            self.stacks.append(f"{event.get('event')}: {stack[:300]}")
        raise structlog.DropEvent


def rss_mib() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * 4096 / 2**20


def _tasks() -> int:
    return len(asyncio.all_tasks()) - 1


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(calls: int, seed: int, reconnect_every: int) -> dict[str, Any]:
    counter = LogCounter()
    structlog.configure(processors=[counter], cache_logger_on_first_use=False)
    target = FuzzTarget(on_disk=True)
    await target.start()
    rng = random.Random(seed)
    statuses: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    # Preallocated: the bench's own samples must not grow the process whose RSS it watches.
    seconds = array.array("d", bytes(8 * calls))
    method_of = array.array("B", bytes(calls))
    crashes: list[dict[str, Any]] = []
    at_warm: dict[str, float] = {}
    rss_over_time: list[tuple[int, float]] = []
    started = time.perf_counter()
    with watching_logs() as watch:
        for i in range(calls):
            if i == int(calls * STEADY_FROM):
                await asyncio.sleep(0.1)
                at_warm = {"descriptors": open_descriptors(), "tasks": _tasks(), "rss_mib": rss_mib()}
            if reconnect_every and i and i % reconnect_every == 0:
                target.reconnect()
            if i % SAMPLE_EVERY == 0:
                rss_over_time.append((i, round(rss_mib(), 1)))
            method = rng.choice(METHODS)
            body = (
                mutate(rng, rng.choice(method.seeds))
                if rng.random() < 0.8
                else rng.randbytes(rng.randrange(200))
            )
            t0 = time.perf_counter()
            answer = await target.send(method, body)
            seconds[i] = time.perf_counter() - t0
            method_of[i] = METHODS.index(method)
            statuses[method.path][answer.status.name] += 1
            if answer.status.name not in ("OK", "INVALID_ARGUMENT") and len(crashes) < 20:
                crashes.append({"method": method.path, "body": body.hex(), "status": answer.status.name,
                                "message": answer.message[:300]})  # fmt: skip
        await asyncio.sleep(0.1)
        at_end = {"descriptors": open_descriptors(), "tasks": _tasks(), "rss_mib": rss_mib()}
    wall = time.perf_counter() - started
    specs = [p.name for p in target.cdi_specs()]
    events = target.store.head()
    records = len(list(target.book.records())) if target.book else 0
    compactions = target.retention.rounds if target.retention else 0
    await target.close()
    every = list(seconds)
    latency: dict[str, list[float]] = collections.defaultdict(list)
    for taken, index in zip(seconds, method_of, strict=True):
        latency[METHODS[index].path].append(taken)
    unexpected = sum(
        n for c in statuses.values() for s, n in c.items() if s not in ("OK", "INVALID_ARGUMENT")
    )
    return {
        "calls": calls,
        "seed": seed,
        "wall_s": round(wall, 1),
        "crashes": unexpected,
        "crash_examples": crashes,
        "tracebacks": len(watch.tracebacks) + len(counter.stacks),
        "traceback_examples": (watch.tracebacks + counter.stacks)[:10],
        "log_lines": dict(counter.by_level),
        "latency_ms": {
            "p50": round(statistics.median(every) * 1e3, 3),
            "p99": round(percentile(every, 0.99) * 1e3, 3),
            "max": round(max(every) * 1e3, 3),
        },
        "per_method": {
            path: {
                "statuses": dict(statuses[path]),
                "p99_ms": round(percentile(latency[path], 0.99) * 1e3, 3),
            }
            for path in sorted(statuses)
        },
        "rss_mib_by_calls": rss_over_time,
        "events_in_log": events,
        "claim_records_in_memory_at_end": records,
        "retention_rounds": compactions,
        "steady_from_call": int(calls * STEADY_FROM),
        "at_steady_start": at_warm,
        "at_end": at_end,
        "leaks": {
            "descriptors": at_end["descriptors"] - at_warm["descriptors"],
            "tasks": at_end["tasks"] - at_warm["tasks"],
            "rss_growth_mib": round(at_end["rss_mib"] - at_warm["rss_mib"], 1),
            "cdi_specs_other_than_the_real_claim": [s for s in specs if UID not in s],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--reconnect-every", type=int, default=10_000, help="0: one connection throughout")
    args = parser.parse_args()
    logging.getLogger("grpclib").setLevel(logging.INFO)
    report = asyncio.run(run(args.calls, args.seed, args.reconnect_every))
    report["reconnect_every"] = args.reconnect_every
    report["machine"] = {
        "python": platform.python_version(),
        "cpus": len(__import__("os").sched_getaffinity(0)),
    }
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"socket-fuzz-{stamp}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    lat = report["latency_ms"]
    leaks = report["leaks"]
    print(
        f"{report['calls']} calls in {report['wall_s']} s: {report['crashes']} crashes, "
        f"{report['tracebacks']} tracebacks, latency p50 {lat['p50']} ms p99 {lat['p99']} ms "
        f"max {lat['max']} ms"
    )
    print(
        f"growth over the last {100 - STEADY_FROM * 100:.0f}% of the calls: "
        f"descriptors {leaks['descriptors']:+d}, tasks {leaks['tasks']:+d}, "
        f"RSS {leaks['rss_growth_mib']:+.1f} MiB, "
        f"stray CDI specs {len(leaks['cdi_specs_other_than_the_real_claim'])}"
    )
    print(f"log lines: {report['log_lines']}")
    for path, row in report["per_method"].items():
        print(f"  {path}: {row['statuses']} p99 {row['p99_ms']} ms")
    print(f"wrote {out}")  # fmt: skip


if __name__ == "__main__":
    main()
