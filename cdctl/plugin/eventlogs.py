"""The event logs the kubelet plugin serves on its HTTP port (cdctl.store.logserver): its own and its node's
IMEX daemons'.

Under channel isolation the node's shared IMEX daemon writes its log at `<plugin dir>/shared-imex/events.db`,
served as `daemon/shared-imex` with no domain uid: it serves every domain of the clique.

A live daemon writes its log at `/imexd/events.db`, which is `<plugin dir>/domains/<domain uid>/events.db` on
the node; when the domain is gone the plugin keeps it as `<plugin dir>/imex-history/<domain uid>.db`
(cdctl.plugin.prepare). Both are served, named `daemon/<domain uid>`, as `live` and `kept`. The domain
directory is writable by the daemon's container, so a file there is served only when it is a regular file
(not a symlink to another log, or anything else the plugin, as root, could read) under a directory named
like a uid; the log's own check (a cdctl event log) comes when it is read. Called by cdctl.plugin.app at
each request, so daemons that come and go are seen without a restart.
"""

from __future__ import annotations

import re
import stat
from pathlib import Path

from cdctl.api.shareddaemon import SHARED_DIR
from cdctl.plugin.prepare import DAEMON_LOG, IMEX_HISTORY
from cdctl.store.export import LogRef

PLUGIN_LOG = "plugin"
COMPONENT = "kubelet-plugin"
DAEMON_COMPONENT = "daemon"
_UID = re.compile(r"^[0-9a-zA-Z][0-9a-zA-Z.-]{0,62}$")


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def served_logs(plugin_dir: Path, own: Path) -> list[LogRef]:
    """The plugin's log, then its node's daemon logs: the live ones, the shared daemon's, the kept ones (a
    domain's live log wins over its kept copy)."""
    logs = [LogRef(PLUGIN_LOG, COMPONENT, own)]
    seen: set[str] = set()
    domains = plugin_dir / "domains"
    if domains.is_dir():
        for entry in sorted(domains.iterdir()):
            path = entry / DAEMON_LOG
            if _UID.match(entry.name) and not entry.is_symlink() and _regular(path):
                logs.append(LogRef(f"daemon/{entry.name}", DAEMON_COMPONENT, path, entry.name, "live"))
                seen.add(entry.name)
    shared = plugin_dir / SHARED_DIR / DAEMON_LOG
    if not (plugin_dir / SHARED_DIR).is_symlink() and _regular(shared):
        logs.append(LogRef(f"daemon/{SHARED_DIR}", DAEMON_COMPONENT, shared, "", "live"))
    history = plugin_dir / IMEX_HISTORY
    if history.is_dir():
        for path in sorted(history.glob("*.db")):
            uid = path.name.removesuffix(".db")
            if _UID.match(uid) and uid not in seen and _regular(path):
                logs.append(LogRef(f"daemon/{uid}", DAEMON_COMPONENT, path, uid, "kept"))
    return logs
