"""Structured logs on stderr for the long-running commands (controller, kubelet plugin, IMEX daemon).

One configuration for all three: `--log-format json|console`, verbosity 6 or more for debug, ISO UTC
timestamps, and context variables merged in, so a line logged while reconciling or preparing for an object
carries that object's namespace, name and uid.
"""

from __future__ import annotations

import logging
import sys

import structlog

DEBUG_VERBOSITY = 6


def configure_logging(fmt: str, verbosity: int) -> None:
    level = logging.DEBUG if verbosity >= DEBUG_VERBOSITY else logging.INFO
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
    )
