"""Run `cdctl ARGS...` under cProfile with the main thread's CPU time as its clock: `python -m bench.profiled
OUT ARGS...` writes the statistics to OUT when the command exits (SIGTERM included, as the controller returns
cleanly on it). A CPU clock, not wall time, so waiting on the event loop, the GIL or the event log's thread
does not count as time spent. Used by bench/process.py for `bench.controller --profile`.
"""

from __future__ import annotations

import cProfile
import runpy
import sys
import time


def main() -> None:
    out, args = sys.argv[1], sys.argv[2:]
    sys.argv = ["cdctl", *args]
    profile = cProfile.Profile(time.thread_time)
    profile.enable()
    try:
        runpy.run_module("cdctl", run_name="__main__", alter_sys=True)
    finally:
        profile.disable()
        profile.dump_stats(out)


if __name__ == "__main__":
    main()
