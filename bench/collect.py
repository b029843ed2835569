"""Benchmark of `cdctl collect` (not a test): a million-event log through the pod proxy, in bounded memory.

    python bench/collect.py [--events 1000000] [--dir DIR]

Builds a log of --events events (bench/store.py's mix: claims of a busy node and ComputeDomain events) in a
child process, then, in a fresh child process so its memory figures are its own: serves it with the real log
server (cdctl.store.logserver, token reviewed by the simulated API server) behind the simulated API server's
pod proxy, collects it with the real collector (cdctl.collect) into a collected file, collects again (nothing
new), and verifies the file. Prints and writes bench/results/collect.json: the rate through the proxy, the
time of each step, the sizes, and the process's peak resident memory before and after the collection (the
streaming is paged on both sides, so it grows with the read models, not with the log).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS = Path(__file__).parent / "results" / "collect.json"


def fresh(out: Path) -> Path:
    """`out` gone, with its side files: a fresh collection each run."""
    for leftover in out.parent.glob(f"{out.name}*"):
        leftover.unlink()
    return out


def mib(path: Path) -> float:
    return round(path.stat().st_size / 2**20, 1)


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


async def measure(log: Path, work: Path) -> dict[str, Any]:
    from cdctl.projections.collected import verify
    from cdctl.store.collected import CollectedFile
    from cdctl.store.export import LogRef
    from tests.collect.harness import cluster, run_collect

    figures: dict[str, Any] = {"peak_rss_mib_before": round(peak_mib(), 1)}
    out = fresh(work / "collected.db")
    async with cluster(work) as c:
        await c.add("kubelet-plugin", "n0", [LogRef("plugin", "kubelet-plugin", log)])
        started = time.perf_counter()
        first = await run_collect(c, out)
        figures["collect_s"] = round(time.perf_counter() - started, 2)
        figures["peak_rss_mib_after_collect"] = round(peak_mib(), 1)
        started = time.perf_counter()
        again = await run_collect(c, out)
        figures["collect_again_s"] = round(time.perf_counter() - started, 2)
    assert [o.status for o in first.outcomes] == ["ok"] and again.events == 0
    figures["events"] = first.events
    figures["events_per_s"] = round(first.events / figures["collect_s"])
    started = time.perf_counter()
    with CollectedFile.open(out, read_only=True) as file:
        report = verify(file, [])
    figures["verify_s"] = round(time.perf_counter() - started, 2)
    assert report.ok
    figures["log_mib"], figures["collected_mib"] = mib(log), mib(out)
    figures["peak_rss_mib_after_verify"] = round(peak_mib(), 1)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--build", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build:
        from store import build_log  # bench/store.py

        asyncio.run(build_log(args.build, args.events))
        return
    if args.measure:
        print(json.dumps(asyncio.run(measure(args.measure, args.measure.parent))))
        return
    work = Path(args.dir or tempfile.mkdtemp(prefix="cdctl-bench-collect-"))
    work.mkdir(parents=True, exist_ok=True)
    log = work / "events.db"
    built_s: float | None = None
    if not log.exists():
        started = time.perf_counter()
        build = [sys.executable, __file__, "--build", str(log), "--events", str(args.events)]
        subprocess.run(build, check=True)
        built_s = round(time.perf_counter() - started, 1)
    answer = subprocess.run(
        [sys.executable, __file__, "--measure", str(log)], check=True, capture_output=True, text=True
    )
    figures = json.loads(answer.stdout.strip().splitlines()[-1])
    figures |= {"build_s": built_s, "python": platform.python_version()}  # None: the log was there
    figures |= {"machine": platform.machine(), "cpus": os.cpu_count()}
    for name, value in figures.items():
        print(f"{name:>28}: {value}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
