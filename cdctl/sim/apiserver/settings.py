"""Tunables of the simulated API server (address, watch timing, history window, audit log size).

Built by tests and by `cdctl sim apiserver`; read by cdctl.sim.apiserver.server and the watch stream.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 0  # 0: pick a free port at start, kept across restarts
    history_window: int = 1000  # watch events retained; older resourceVersions get 410 Gone
    bookmark_interval_s: float = 1.0  # how often a watch with allowWatchBookmarks gets a BOOKMARK
    default_watch_timeout_s: float = 1800.0  # when the client sends no timeoutSeconds
    disconnect_check_s: float = 5.0  # how often an idle watch checks that its client is still connected
    audit_limit: int = 50_000  # requests the audit log keeps (the oldest are dropped)
    # DRA consumable capacity (alpha and off in the 1.34 this server reports; beta and on in 1.36): when off,
    # writes drop its fields (cdctl.sim.apiserver.features).
    dra_consumable_capacity: bool = False
