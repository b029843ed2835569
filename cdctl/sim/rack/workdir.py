"""The directory `cdctl sim rack` runs a rack in (`--keep DIR`): checked, and cleared of a previous rack.

`work_dir_problem(directory)` says why a directory cannot hold a rack (a path too long for the plugins' unix
sockets, or a non-empty directory that is not a rack's: nothing of the user's is ever removed).
`reuse(directory)` clears what a previous rack left there, so that a second run does not add its domain to
the first one's logs (every name in them would then name two domains); a rack's directory carries MARKER,
and one an older cdctl made is known by its kubeconfig and controller log. Used by
cdctl.sim.rack.rackcommand.
"""

from __future__ import annotations

import shutil
from pathlib import Path

MARKER = ".cdctl-sim-rack"
# The longest unix socket path under the work directory (the plugin's DRA socket) must fit sun_path (108).
_SOCKET_SUFFIX = len("/gb200-r00-n00/plugins/compute-domain.nvidia.com/dra.sock")
_SUN_PATH_MAX = 107


def is_rack_dir(directory: Path) -> bool:
    return (directory / MARKER).exists() or (
        (directory / "kubeconfig").is_file() and (directory / "controller").is_dir()
    )


def work_dir_problem(directory: Path) -> str | None:
    if len(str(directory)) + _SOCKET_SUFFIX > _SUN_PATH_MAX:
        most = _SUN_PATH_MAX - _SOCKET_SUFFIX
        return f"{directory} is too long for the plugins' unix socket paths (at most {most} characters)"
    if directory.exists() and not directory.is_dir():
        return f"--keep {directory}: not a directory"
    if directory.is_dir() and any(directory.iterdir()) and not is_rack_dir(directory):
        return f"--keep {directory}: not empty, and no earlier rack's: give an empty or a new directory"
    return None


def reuse(directory: Path) -> bool:
    """Clear what a previous rack left in `directory` and mark it as this rack's; whether there was one."""
    previous = directory.is_dir() and any(directory.iterdir())
    if previous:
        for entry in directory.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MARKER).write_text(
        "a cdctl sim rack's files: the next run in this directory replaces them\n"
    )
    return previous
