"""The channel-isolation flags of `cdctl controller` and `cdctl kubelet-plugin`, declared once:
`--imex-isolation` (env IMEX_ISOLATION) and `--imex-channel-count` (env IMEX_CHANNEL_COUNT);
docs/channel-isolation.md.

Both commands take them through `isolation_options` and receive them parsed (an ImexIsolation, an int). A bad
value, from the flag or its environment twin, is refused before the command starts: a usage error (exit 2)
whose one error line names the flag and the value. `checked` makes that click callback from any parser of the
`parse(value, *, field=...)` shape; the kubelet plugin uses it for its own channel flags too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from cdctl.api.isolation import (
    DEFAULT_CHANNEL_COUNT,
    MAX_CHANNEL_COUNT,
    MIN_CHANNEL_COUNT,
    ImexIsolation,
    parse_channel_count,
    parse_isolation,
)
from cdctl.domain.errors import CdctlError, InvalidInput

FC = TypeVar("FC", bound=Callable[..., Any] | click.Command)
T = TypeVar("T")
ISOLATION_ENV = "IMEX_ISOLATION"
CHANNEL_COUNT_ENV = "IMEX_CHANNEL_COUNT"
ISOLATION_HELP = (
    "domain: one IMEX domain per ComputeDomain; channel: ComputeDomains share the clique's IMEX domain, each"
    " with its own channel (docs/channel-isolation.md)."
)
CHANNEL_COUNT_HELP = (
    f"Channels per IMEX domain under channel isolation, {MIN_CHANNEL_COUNT}..{MAX_CHANNEL_COUNT} (channel 0"
    " is never handed out)."
)


def checked(parse: Callable[..., T]) -> Callable[[click.Context, click.Parameter, Any], T]:
    """A click callback running `parse(value, field=<the flag>)`; its error becomes a usage error (exit 2)
    naming the flag (and, by click, its environment twin) once."""

    def callback(_ctx: click.Context, param: click.Parameter, value: Any) -> T:
        try:
            return parse(value, field=f"--{(param.name or '').replace('_', '-')}")
        except InvalidInput as exc:  # click names the flag: the message keeps the object and the problem
            raise click.BadParameter(f"{exc.obj}: {exc.problem}") from None
        except CdctlError as exc:
            raise click.BadParameter(exc.message) from None

    return callback


def isolation_options(command: FC) -> FC:
    """Add `--imex-isolation` and `--imex-channel-count` (in that order in --help) to a click command."""
    # A text default, so that parse_channel_count (not click's INT type) judges every value.
    command = click.option(
        "--imex-channel-count", envvar=CHANNEL_COUNT_ENV, default=str(DEFAULT_CHANNEL_COUNT),
        show_default=True, show_envvar=True, metavar="INTEGER", callback=checked(parse_channel_count),
        help=CHANNEL_COUNT_HELP,
    )(command)  # fmt: skip
    return click.option(
        "--imex-isolation", envvar=ISOLATION_ENV, default=ImexIsolation.DOMAIN.value, show_default=True,
        show_envvar=True, metavar="[domain|channel]", callback=checked(parse_isolation), help=ISOLATION_HELP,
    )(command)  # fmt: skip
