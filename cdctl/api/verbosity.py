"""The verbosity ladder every component shares: the rungs, the process's current level, and the filter.

Read by any module that logs at a rung above 0 (the k8s client for watch events and requests, the controller
and plugin for their decisions); set once per process by cdctl.cli.logs.configure_logging. A line says its
rung with the `v` key (`log.info("...", v=V_WATCH)`); `filter_by_verbosity`, the first structlog processor,
drops it above the configured level and removes the key. Code that would pay to build a line (bodies) asks
`enabled(level)` first. Stdlib only at import (cdctl.cli.daemon's probe command reads the default); structlog
is imported where a line is filtered. The rungs (docs/logging.md):

- 0 `V_STATE`: errors, warnings and state changes (a domain Ready, a claim prepared, a leader elected).
- 2 `V_DECISION`: each reconcile and each Prepare/Unprepare decision, with its outcome.
- 4 `V_WATCH`: each watch event received (type, kind, namespace/name, resourceVersion).
- 6 `V_REQUEST`: each Kubernetes API request (method, path, status, duration).
- 7 `V_BODY`: request and response bodies.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

V_STATE = 0
V_DECISION = 2
V_WATCH = 4
V_REQUEST = 6
V_BODY = 7
MAX_VERBOSITY = V_BODY
DEFAULT_VERBOSITY = V_DECISION  # the same in the controller, the plugin, the daemon, the CLI and the chart

_current = {"level": DEFAULT_VERBOSITY}


def set_verbosity(level: int) -> None:
    _current["level"] = max(0, int(level))


def verbosity() -> int:
    return _current["level"]


def enabled(level: int) -> bool:
    """Whether lines of rung `level` are kept (check before building a costly line)."""
    return level <= _current["level"]


def filter_by_verbosity(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Drop a line whose `v` is above the configured verbosity; keep it without the key otherwise."""
    level = event.pop("v", V_STATE)
    if isinstance(level, int) and level > _current["level"]:
        import structlog

        raise structlog.DropEvent
    return event


def install_default_filter() -> None:
    """Called at import by the modules that log above rung 0 (cdctl.k8s.rest, .informer): a process that
    never calls configure_logging (a short CLI command, a test) still drops lines above the default rung
    instead of printing every request."""
    import structlog

    if not structlog.is_configured():
        processors = [
            # structlog's default console renderer prints the frames' locals in tracebacks: not by default
            structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)
            if isinstance(p, structlog.dev.ConsoleRenderer)
            else p
            for p in structlog.get_config()["processors"]
        ]
        structlog.configure(processors=[filter_by_verbosity, *processors])
