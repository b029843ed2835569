"""The files `nvidia-imex` reads, written atomically: the rendered config, the node list, the hosts file.

Called by cdctl.daemon.app (config, node list) and cdctl.daemon.peers (hosts file, IP-mode node list). Each
write goes to a temporary file beside the target and is renamed over it, so a reader sees the old or the new
content, never a mix. They are not fsynced: every one is derived (from the plugin's template, the pod IP and
the clique) and written again by the next daemon start, so a crash loses nothing that matters, while a sync
per peer change (a hosts rewrite each time a peer joins) stalled the daemon's event loop on a busy node.
A container's /etc/hosts is a bind mount that cannot be renamed over (EBUSY); there the new content is
written into the file in one write call instead. The hosts file is changed only inside its managed block
(cdctl.domain.imex.render_hosts) and only when that block changes.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import structlog

from cdctl.domain.errors import PermanentError
from cdctl.domain.imex import hosts_mapping, render_config, render_hosts

log = structlog.get_logger(__name__)
_NOT_RENAMEABLE = {errno.EBUSY, errno.EXDEV, errno.EPERM}


def _write_in_place(path: Path, text: str) -> None:
    data = text.encode()
    descriptor = os.open(path, os.O_WRONLY)
    try:
        written = os.write(descriptor, data)
        if written != len(data):
            raise OSError(errno.EIO, f"short write ({written} of {len(data)} bytes)")
        os.ftruncate(descriptor, len(data))
    finally:
        os.close(descriptor)


def write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """Replace `path` with `text` (temporary file + rename; in place where rename is refused)."""
    descriptor, temporary_name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    temporary = Path(temporary_name)
    try:
        with os.fdopen(descriptor, "w") as stream:
            stream.write(text)
        temporary.chmod(mode)
        try:
            temporary.replace(path)
            return
        except OSError as exc:
            if exc.errno not in _NOT_RENAMEABLE or not path.exists():
                raise
        log.debug("target cannot be renamed over; writing in place", path=str(path))
        _write_in_place(path, text)
    finally:
        temporary.unlink(missing_ok=True)


def write_config(template_path: Path, config_path: Path, values: Mapping[str, str]) -> None:
    """Render the plugin's template into the IMEX config (0644)."""
    try:
        template = template_path.read_text()
    except OSError as exc:
        raise PermanentError(f"cannot read IMEX config template {template_path}: {exc.strerror}") from exc
    write_atomically(config_path, render_config(template, values))


def write_node_list(path: Path, nodes: list[str]) -> None:
    write_atomically(path, "".join(f"{node}\n" for node in nodes))


def read_text_or_empty(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def update_hosts(path: Path, mapping: Mapping[str, str]) -> bool:
    """Bring the managed block of the hosts file to `mapping`; False when it already was (nothing written)."""
    current = read_text_or_empty(path)
    wanted = render_hosts(current, mapping)
    if wanted == current:
        return False
    write_atomically(path, wanted)
    return True


def current_hosts_mapping(path: Path) -> dict[str, str]:
    return hosts_mapping(read_text_or_empty(path))
