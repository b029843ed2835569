"""Structured logs on stderr for the long-running commands (controller, kubelet plugin, IMEX daemon).

One configuration for all three, called once by each command's entry point (cdctl.cli.controller, .plugin,
.daemon): `--log-format json|console`, `-v/--verbosity` (env LOG_VERBOSITY, default
`cdctl.api.verbosity.DEFAULT_VERBOSITY` in every component; the ladder and its filter are there), ISO UTC
timestamps, and context variables merged in, so a line logged while reconciling or preparing for an object
carries that object's namespace, name and uid. Tracebacks: in JSON an `exception` field holds the formatted
stack; on the console the plain traceback, with the frames' local variables only when asked
(`CDCTL_LOG_LOCALS=true`), since locals can hold tokens and keys.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping

import structlog

from cdctl.api.verbosity import (
    DEFAULT_VERBOSITY,
    MAX_VERBOSITY,
    V_REQUEST,
    filter_by_verbosity,
    set_verbosity,
)

__all__ = ["DEFAULT_VERBOSITY", "LOCALS_ENV", "MAX_VERBOSITY", "configure_logging", "locals_requested"]

LOCALS_ENV = "CDCTL_LOG_LOCALS"


def locals_requested(environ: Mapping[str, str] | None = None) -> bool:
    value = (os.environ if environ is None else environ).get(LOCALS_ENV, "")
    return value.strip().lower() in ("1", "true", "yes")


def console_traceback_formatter(show_locals: bool) -> structlog.typing.ExceptionRenderer:
    """The plain traceback, or rich's with locals when asked for (structlog's default would show locals)."""
    if show_locals:
        try:
            return structlog.dev.RichTracebackFormatter(show_locals=True)
        except (ImportError, RuntimeError):  # rich is not installed: locals cannot be shown
            return structlog.dev.plain_traceback
    return structlog.dev.plain_traceback


def configure_logging(fmt: str, verbosity: int, *, show_locals: bool | None = None) -> None:
    """Configure structlog for this process: `fmt` json or console, lines up to `verbosity` (0..7)."""
    set_verbosity(verbosity)
    level = logging.DEBUG if verbosity >= V_REQUEST else logging.INFO
    locals_on = locals_requested() if show_locals is None else show_locals
    tail: list[structlog.typing.Processor]
    if fmt == "json":
        tail = [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    else:
        formatter = console_traceback_formatter(locals_on)
        tail = [structlog.dev.ConsoleRenderer(colors=False, exception_formatter=formatter)]
    structlog.configure(
        processors=[
            filter_by_verbosity,
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *tail,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
    )
