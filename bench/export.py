"""Benchmark of the OTLP export (cdctl.store.otlp; not a test): what `--otlp-endpoint` costs the append path,
with an endpoint that answers, one that hangs and one that is down.

    python bench/export.py [--events 20000] [--writers 64]

Each mode runs in a fresh child process (its peak memory is its own): `writers` tasks append `events`
single-event commits to a real event log (the controller's pattern: many streams, group commit), with
  none:  no export (the baseline);
  live:  export to an OTLP/HTTP receiver in another process (aiohttp, decoding every request);
  stuck: export to an endpoint that accepts connections and never answers (a hung collector);
  dead:  export to a port nothing listens on.
Prints and writes bench/results/export.json: append throughput and latency (p50, p99, max), the process's
peak resident memory, and what the export did (exported, dropped by reason, the queue's high-water mark).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS = Path(__file__).parent / "results" / "export.json"
MODES = ("none", "live", "stuck", "dead")


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def receive(port: int) -> None:
    """An OTLP/HTTP logs receiver counting the records it decodes; GET /count says how many."""
    from aiohttp import web
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
        ExportLogsServiceRequest,
        ExportLogsServiceResponse,
    )

    count = 0

    async def logs(request: web.Request) -> web.Response:
        nonlocal count
        body = ExportLogsServiceRequest.FromString(await request.read())
        count += sum(len(s.log_records) for r in body.resource_logs for s in r.scope_logs)
        return web.Response(body=ExportLogsServiceResponse().SerializeToString())

    async def counted(_: web.Request) -> web.Response:
        return web.json_response({"count": count})

    app = web.Application()
    app.router.add_post("/v1/logs", logs)
    app.router.add_get("/count", counted)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()


async def measure(mode: str, events: int, writers: int, work: Path, endpoint: str) -> dict[str, Any]:
    from cdctl.domain.events import NewEvent
    from cdctl.store import otlp
    from cdctl.store.otlp import ExportSource
    from cdctl.store.sqlite import SqliteEventStore

    hung: socket.socket | None = None
    if mode == "stuck":  # accepts (the backlog does) and never answers
        hung = socket.socket()
        hung.bind(("127.0.0.1", 0))
        hung.listen(64)
        endpoint = f"http://127.0.0.1:{hung.getsockname()[1]}"
    elif mode == "dead":
        endpoint = f"http://127.0.0.1:{free_port()}"
    figures: dict[str, Any] = {"mode": mode, "peak_rss_mib_before": round(peak_mib(), 1)}
    latencies: list[float] = []
    high_water = 0
    async with await SqliteEventStore.open(work / f"{mode}.db") as store:
        source = ExportSource("controller", "", "bench", "bench", "controller")
        export = otlp.attach(store, endpoint, source) if mode != "none" else None

        async def writer(index: int) -> None:
            nonlocal high_water
            for n in range(events // writers):
                began = time.perf_counter()
                await store.append(f"domain/{index}", [NewEvent("BenchEvent", {"writer": index, "n": n})])
                latencies.append(time.perf_counter() - began)
                if export is not None:
                    high_water = max(high_water, export.queued())

        started = time.perf_counter()
        await asyncio.gather(*(writer(i) for i in range(writers)))
        elapsed = time.perf_counter() - started
    figures["appends"] = len(latencies)
    figures["appends_per_s"] = round(len(latencies) / elapsed)
    latencies.sort()
    figures["append_ms_p50"] = round(statistics.median(latencies) * 1000, 2)
    figures["append_ms_p99"] = round(latencies[int(len(latencies) * 0.99)] * 1000, 2)
    figures["append_ms_max"] = round(latencies[-1] * 1000, 2)
    if export is not None:
        if mode == "live":  # let it drain (at most a minute) before closing
            for _ in range(1200):
                if not export.queued():
                    break
                await asyncio.sleep(0.05)
        started = time.perf_counter()
        await asyncio.to_thread(export.close)
        figures["close_s"] = round(time.perf_counter() - started, 2)
        figures["exported"] = export.exported
        figures["dropped"] = dict(export.dropped)
        figures["queue_high_water"] = high_water
        figures["queue_bound"] = export.max_queue
    figures["peak_rss_mib"] = round(peak_mib(), 1)
    if hung is not None:
        hung.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--writers", type=int, default=64)
    parser.add_argument("--measure", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--receive", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", default="", help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    if args.receive:
        asyncio.run(receive(args.receive))
        return
    work = Path(args.dir or tempfile.mkdtemp(prefix="cdctl-bench-export-"))
    if args.measure:
        figures = asyncio.run(measure(args.measure, args.events, args.writers, work, args.endpoint))
        print(json.dumps(figures))
        return
    port = free_port()
    receiver = subprocess.Popen([sys.executable, __file__, "--receive", str(port)])
    results: list[dict[str, Any]] = []
    try:
        time.sleep(1.5)  # the receiver's start
        for mode in MODES:
            command = [
                sys.executable, __file__, "--measure", mode, "--events", str(args.events),
                "--writers", str(args.writers), "--dir", str(work), "--endpoint", f"http://127.0.0.1:{port}",
            ]  # fmt: skip
            answer = subprocess.run(command, check=True, capture_output=True, text=True)
            results.append(json.loads(answer.stdout.strip().splitlines()[-1]))
            print(json.dumps(results[-1]))
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/count") as reply:
            received = json.loads(reply.read())["count"]
    finally:
        receiver.terminate()
        receiver.wait()
    figures = {
        "events": args.events,
        "writers": args.writers,
        "received_by_live_endpoint": received,
        "modes": results,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
