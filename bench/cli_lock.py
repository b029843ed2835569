"""How long a reading command takes to say a log is locked: each of them, run as the operator runs it.

Copies a demo log, holds an exclusive lock on it (what another process's EXCLUSIVE locking mode or a
recovery in progress does), and runs `cdctl events | sql | replay | verify | history | streams` against it
as subprocesses, `--runs` times each. Prints the median and worst wall time per command (Python's start-up
included) and the exit code, and writes bench/results/cli-lock-<UTC time>.json. The README promises exit
75, promptly; the identity probe once waited out sqlite3's default 5 s timeout and exited 3 (about 6 s).
Also times one command on the unlocked log, for the start-up cost alone.

    .venv/bin/python bench/cli_lock.py [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from cdctl.cli.demo import write_scenario
from cdctl.store.schema import READ_LOCK_WAIT_S

RESULTS = Path(__file__).resolve().parent / "results"
COMMANDS = {
    "events": [],
    "sql": ["SELECT 1"],
    "replay": [],
    "verify": [],
    "history": ["computedomain/team-a/nvl72-job"],
    "streams": [],
}


def _time(command: str, extra: list[str], db: Path) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "cdctl", command, "--db", str(db), *extra],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return time.perf_counter() - started, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cdctl-lock-"))
    try:
        log = work / "events.db"
        asyncio.run(write_scenario(log, 18))
        locked = work / "locked.db"
        shutil.copyfile(log, locked)
        unlocked = [_time("events", [], log)[0] for _ in range(args.runs)]
        holder = sqlite3.connect(locked)
        holder.execute("PRAGMA locking_mode = EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        results: dict[str, dict[str, object]] = {}
        try:
            for command, extra in COMMANDS.items():
                runs = [_time(command, extra, locked) for _ in range(args.runs)]
                seconds, codes = [s for s, _ in runs], [code for _, code in runs]
                results[command] = {
                    "median_s": round(statistics.median(seconds), 3), "max_s": round(max(seconds), 3),
                    "exit_codes": sorted(set(codes)),
                }  # fmt: skip
                median, worst = statistics.median(seconds), max(seconds)
                exits = sorted(set(codes))
                print(f"{command:8} locked: median {median:.2f} s, max {worst:.2f} s, exit {exits}")
        finally:
            holder.rollback()
            holder.close()
        print(f"events on the unlocked log: median {statistics.median(unlocked):.2f} s (start-up and read)")
        print(f"lock wait: {READ_LOCK_WAIT_S} s (cdctl.store.schema.READ_LOCK_WAIT_S)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"cli-lock-{stamp}.json"
    out.write_text(json.dumps({
        "when": stamp, "runs": args.runs, "lock_wait_s": READ_LOCK_WAIT_S, "locked": results,
        "unlocked_events_median_s": round(statistics.median(unlocked), 3),
        "load_average": os.getloadavg(), "python": platform.python_version(), "cpus": os.cpu_count(),
    }, indent=2) + "\n")  # fmt: skip
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
