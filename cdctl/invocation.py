"""How the user runs this cdctl from their shell, for every command cdctl prints for them to copy.

`cdctl demo` and `cdctl sim rack` end with commands to explore the logs they wrote; `make demo` runs cdctl
as `.venv/bin/cdctl`, which a fresh shell does not find as `cdctl`. So a printed command starts with
`cdctl` only when that name on PATH is this very installation (after `make install`, or in an activated
virtual environment); otherwise with the path of this installation's script, relative to the working
directory when it lies under it (`.venv/bin/cdctl`). No layer's code: any layer may import it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import sysconfig
from pathlib import Path

NAME = "cdctl"


def installed_script() -> Path | None:
    """This installation's `cdctl` console script (in the virtual environment's bin), if it has one."""
    script = Path(sysconfig.get_path("scripts")) / NAME
    return script if script.is_file() else None


def cdctl_command(cwd: Path | None = None) -> str:
    """The words that run this cdctl from a shell in `cwd` (default: the working directory)."""
    script = installed_script()
    if script is None:
        return f"{shlex.quote(sys.executable)} -m cdctl"
    found = shutil.which(NAME)
    if found is not None and Path(found).resolve() == script.resolve():
        return NAME
    here = (cwd or Path.cwd()).resolve()
    try:
        relative = script.resolve().relative_to(here)
    except ValueError:
        return shlex.quote(str(script.resolve()))
    return shlex.quote(f".{os.sep}{relative}" if len(relative.parts) == 1 else str(relative))


def on_path_hint() -> str | None:
    """A line saying how to get `cdctl` on PATH, when the printed commands cannot say `cdctl`."""
    if cdctl_command() == NAME:
        return None
    return "(`make install` in the cdctl checkout links cdctl into ~/.local/bin: then plain `cdctl` works)"
