"""ComputeDomain formation and teardown time on the simulated rack, for 1, 2, 4 and 8 racks (18 to 144 nodes).

Each size runs the `cdctl sim rack` scenario (cdctl.sim.rack.launch + cdctl.sim.rack.scenario): the real
controller, one real kubelet-plugin process per node and, in driver-managed mode, a real `cdctl daemon`
process per node, against the simulated cluster. One ComputeDomain spans every rack; one job per rack (18
workers, 4 GPUs each, pod affinity on the rack's clique) claims its channel. Formation is "domain created ->
every worker Running with channel0 in its CDI edits"; teardown is "jobs deleted -> nothing left" (claims
unprepared, CDI files, labels, DaemonSet, templates, finalizers). Start-up (processes up, plugins registered)
is reported apart. Writes bench/results/formation.json (with the load average: other work on the same cores
skews the figures) and draws bench/results/formation.png (seconds vs nodes) with the small PNG writer below
(no plotting dependency). Targets: 18 nodes < 3 s, 144 nodes < 15 s.

    .venv/bin/python bench/formation.py [--racks 1,2,4,8] [--repeat N] [--quiet-load L] [--merge]
                                        [--mode driver-managed|host-managed]

`--repeat N` measures each size N times and reports the run with the median formation time (all N
formation times are kept under `formation_runs_s`): hundreds of processes share two cores, and when each
gets the CPU varies from run to run (a daemon's readiness probe that catches IMEX between two peers' starts
waits for its next tick), so single runs of a size vary. `--quiet-load L` waits
(up to 5 minutes) before each run until the 1-minute load average is below L, so that one run's processes
do not weigh on the next. `--merge` keeps the results already in formation.json for sizes this run does
not measure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import struct
import sys
import tempfile
import time
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cdctl.sim.node.topology import NODES_PER_RACK
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.scenario import DomainPlan, run_scenario
from cdctl.sim.rack.settings import RackSettings

RESULTS = Path(__file__).parent / "results"
TARGETS_S = {18: 3.0, 144: 15.0}


async def measure(racks: int, mode: str) -> dict[str, Any]:
    work_dir = Path(tempfile.mkdtemp(prefix="cdbench-", dir="/tmp"))
    load_before = os.getloadavg()[0]
    try:
        settings = RackSettings(work_dir, racks=racks, mode=mode, start_timeout_s=600.0)
        async with Rack(settings) as rack:
            plan = DomainPlan("bench", "bench", workers=NODES_PER_RACK, jobs=racks)
            report = await run_scenario(rack, [plan], timeout_s=600.0)
            return {
                "racks": racks,
                "nodes": racks * NODES_PER_RACK,
                "mode": mode,
                "start_s": round(rack.timings.cluster_s + rack.timings.components_s, 3),
                "formation_s": round(report.formation_s, 3) if report.formation_s is not None else None,
                "teardown_s": round(report.teardown_s, 3) if report.teardown_s is not None else None,
                "steps": {name: round(seconds, 3) for name, seconds in report.steps},
                "ok": report.ok,
                "problems": report.problems[:10],
                "load_average_before": round(load_before, 2),
                "load_average_after": round(os.getloadavg()[0], 2),
            }
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


# ---- a tiny PNG line chart (pure Python + zlib) ------------------------------------------------------------
_DIGITS = {  # 3x5 bitmaps
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001001001001",
    "8": "111101111101111", "9": "111101111001111", ".": "000000000000010", "s": "000011110011110",
    "n": "000110101101101",
}  # fmt: skip


class Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(b"\xff" * (width * height * 3))

    def dot(self, x: int, y: int, color: tuple[int, int, int], size: int = 1) -> None:
        for dx in range(size):
            for dy in range(size):
                px, py = x + dx, y + dy
                if 0 <= px < self.width and 0 <= py < self.height:
                    offset = (py * self.width + px) * 3
                    self.pixels[offset : offset + 3] = bytes(color)

    def line(
        self, a: tuple[int, int], b: tuple[int, int], color: tuple[int, int, int], width: int = 2
    ) -> None:
        steps = max(abs(b[0] - a[0]), abs(b[1] - a[1]), 1)
        for i in range(steps + 1):
            self.dot(
                round(a[0] + (b[0] - a[0]) * i / steps), round(a[1] + (b[1] - a[1]) * i / steps), color, width
            )

    def text(
        self, x: int, y: int, text: str, color: tuple[int, int, int] = (0, 0, 0), scale: int = 2
    ) -> None:
        for index, char in enumerate(text):
            bitmap = _DIGITS.get(char)
            if bitmap is None:
                continue
            for bit, value in enumerate(bitmap):
                if value == "1":
                    self.dot(x + index * 4 * scale + (bit % 3) * scale, y + (bit // 3) * scale, color, scale)

    def png(self) -> bytes:
        rows = b"".join(
            b"\x00" + bytes(self.pixels[y * self.width * 3 : (y + 1) * self.width * 3])
            for y in range(self.height)
        )

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(rows, 9))
            + chunk(b"IEND", b"")
        )


def draw(results: list[dict[str, Any]], path: Path) -> None:
    """Seconds (y) vs nodes (x): formation blue, teardown orange, start-up grey, targets red dots."""
    canvas = Canvas(640, 400)
    left, right, top, bottom = 70, 610, 20, 350
    series = {
        "formation_s": (31, 119, 180),
        "teardown_s": (255, 127, 14),
        "start_s": (150, 150, 150),
    }
    points = [r for r in results if r.get("formation_s") is not None]
    max_nodes = max([r["nodes"] for r in points] + [18])
    max_s = max([float(r[k] or 0) for r in points for k in series] + list(TARGETS_S.values()) + [1.0])
    max_s = float(int(max_s * 1.1) + 1)

    def at(nodes: float, seconds: float) -> tuple[int, int]:
        return (
            left + round((right - left) * nodes / max_nodes),
            bottom - round((bottom - top) * seconds / max_s),
        )

    canvas.line((left, bottom), (right, bottom), (0, 0, 0), 1)
    canvas.line((left, bottom), (left, top), (0, 0, 0), 1)
    for tick in range(5):
        seconds = max_s * tick / 4
        x, y = at(0, seconds)
        canvas.line((x - 4, y), (x, y), (0, 0, 0), 1)
        canvas.text(8, y - 5, f"{seconds:.0f}s")
    for r in points:
        x, _ = at(r["nodes"], 0)
        canvas.line((x, bottom), (x, bottom + 4), (0, 0, 0), 1)
        canvas.text(x - 12, bottom + 12, f"{r['nodes']}n")
    for key, color in series.items():
        previous = None
        for r in points:
            if r.get(key) is None:
                continue
            here = at(r["nodes"], float(r[key]))
            canvas.dot(here[0] - 3, here[1] - 3, color, 7)
            if previous:
                canvas.line(previous, here, color)
            previous = here
    for nodes, seconds in TARGETS_S.items():
        x, y = at(nodes, seconds)
        canvas.dot(x - 4, y - 4, (214, 39, 40), 9)
    path.write_bytes(canvas.png())


def write(results: list[dict[str, Any]]) -> None:
    RESULTS.mkdir(exist_ok=True)
    document = {
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
        },
        "targets_s": {str(k): v for k, v in TARGETS_S.items()},
        "results": results,
    }
    (RESULTS / "formation.json").write_text(json.dumps(document, indent=2) + "\n")
    draw(results, RESULTS / "formation.png")
    print(f"wrote {RESULTS / 'formation.json'} and {RESULTS / 'formation.png'}", flush=True)


def wait_for_quiet(load: float, limit_s: float = 300.0) -> None:
    deadline = time.monotonic() + limit_s
    while load > 0 and os.getloadavg()[0] >= load and time.monotonic() < deadline:
        time.sleep(5)


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median formation time (a run that did not form counts as the slowest)."""
    ordered = sorted(runs, key=lambda r: float("inf") if r["formation_s"] is None else r["formation_s"])
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    if len(runs) > 1:
        chosen["formation_runs_s"] = [r["formation_s"] for r in runs]
        chosen["ok_runs"] = sum(1 for r in runs if r["ok"])
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--racks", default="1,2,4,8", help="Comma list of rack counts (18 nodes each).")
    parser.add_argument("--mode", default="driver-managed", choices=["driver-managed", "host-managed"])
    parser.add_argument("--merge", action="store_true", help="Keep earlier results of other sizes.")
    parser.add_argument("--repeat", type=int, default=1, help="Runs per size; the median run is reported.")
    parser.add_argument("--quiet-load", type=float, default=0.0, help="Wait for a load average below this.")
    args = parser.parse_args()
    sizes = [int(r) for r in args.racks.split(",")]
    results: list[dict[str, Any]] = []
    if args.merge and (RESULTS / "formation.json").exists():
        earlier = json.loads((RESULTS / "formation.json").read_text())["results"]
        results = [r for r in earlier if r["racks"] not in sizes]
    for racks in sizes:
        started = time.perf_counter()
        runs = []
        for _ in range(max(1, args.repeat)):
            wait_for_quiet(args.quiet_load)
            runs.append(asyncio.run(measure(racks, args.mode)))
        result = median_run(runs)
        results = sorted([*results, result], key=lambda r: int(r["nodes"]))
        print(
            f"{result['nodes']:4d} nodes: start {result['start_s']:7.2f} s  "
            f"formation {result['formation_s']} s  "
            f"teardown {result['teardown_s']} s  ok={result['ok']}  (load {result['load_average_before']}, "
            f"{time.perf_counter() - started:.0f} s in all)",
            flush=True,
        )
        write(results)  # after every size, so a long run that is stopped keeps what it measured


if __name__ == "__main__":
    main()
