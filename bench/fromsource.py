"""Run `cdctl ARGS...` from another source tree: `python -m bench.fromsource DIR ARGS...`.

The virtual environment's editable install of cdctl points at this worktree; this drops that finder and puts
DIR first on the path, so the same interpreter and dependencies run another commit's cdctl (a checkout made
with `git worktree add --detach DIR COMMIT`). Used by bench/controller.py (`--controller-source`) to measure
a controller before and after a change against the same simulated API server.
"""

from __future__ import annotations

import runpy
import sys


def main() -> None:
    source, args = sys.argv[1], sys.argv[2:]
    sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
    for name in [m for m in sys.modules if m == "cdctl" or m.startswith("cdctl.")]:
        del sys.modules[name]
    sys.path.insert(0, source)
    sys.argv = ["cdctl", *args]
    runpy.run_module("cdctl", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
