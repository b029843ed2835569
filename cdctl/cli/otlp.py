"""`--otlp-endpoint` (env CDCTL_OTLP_ENDPOINT) of `cdctl controller` and `cdctl kubelet-plugin`: where to send
every committed event as an OpenTelemetry log record (cdctl.store.otlp). Empty: no export. A value that is not
an http(s) URL ends the command with exit 2, naming the flag.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from cdctl.store.otlp import otlp_logs_url

FC = TypeVar("FC", bound=Callable[..., Any] | click.Command)
ENV = "CDCTL_OTLP_ENDPOINT"
HELP = (
    "OTLP/HTTP endpoint (http://collector:4318, or its full /v1/logs URL) that receives every committed event"
    " as a log record; empty: none. An unreachable endpoint never slows or loses the local log."
)


def validate_endpoint(value: str) -> str:
    value = value.strip()
    if value:
        try:
            otlp_logs_url(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--otlp-endpoint'") from None
    return value


def otlp_option(command: FC) -> FC:
    return click.option(
        "--otlp-endpoint", envvar=ENV, default="", show_envvar=True, help=HELP,
        callback=lambda _ctx, _param, value: validate_endpoint(str(value or "")),
    )(command)  # fmt: skip
