"""The retention flags of every component: `--retention-age`, `--retention-size` and `--retention-interval`,
with their env twins.

`cdctl controller` and `cdctl kubelet-plugin` take them through `retention_options`; `cdctl daemon run`
declares the same names itself (its module imports nothing of cdctl at the top, for its probe) and parses
them with `policy`. Bad values end the command with exit 2 naming the flag (cdctl.domain.retention).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from cdctl.domain.retention import (
    DEFAULT_AGE,
    DEFAULT_INTERVAL,
    DEFAULT_SIZE,
    RetentionPolicy,
    parse_age,
    parse_interval,
    parse_size,
)

FC = TypeVar("FC", bound=Callable[..., Any] | click.Command)
AGE_ENV = "CDCTL_RETENTION_AGE"
SIZE_ENV = "CDCTL_RETENTION_SIZE"
INTERVAL_ENV = "CDCTL_RETENTION_INTERVAL"
AGE_HELP = "Events older than this are compacted away (s, m, h, d, w; 0: no age bound)."
SIZE_HELP = "The event log is compacted, oldest first, to stay under this (e.g. 512MiB, 1GiB; 0: no bound)."
INTERVAL_HELP = "How often the log is checked against the age and size bounds (s, m, h; at least 1s)."


def retention_options(command: FC) -> FC:
    command = click.option(
        "--retention-age", envvar=AGE_ENV, default=DEFAULT_AGE, show_default=True, show_envvar=True,
        help=AGE_HELP,
    )(command)  # fmt: skip
    command = click.option(
        "--retention-size", envvar=SIZE_ENV, default=DEFAULT_SIZE, show_default=True, show_envvar=True,
        help=SIZE_HELP,
    )(command)  # fmt: skip
    return click.option(
        "--retention-interval", envvar=INTERVAL_ENV, default=DEFAULT_INTERVAL, show_default=True,
        show_envvar=True, help=INTERVAL_HELP,
    )(command)  # fmt: skip


def policy(age: str, size: str) -> RetentionPolicy:
    return RetentionPolicy(parse_age(age), parse_size(size))


def interval(text: str) -> float:
    return parse_interval(text)
