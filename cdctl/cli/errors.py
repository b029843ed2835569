"""The CLI's error boundary: typed errors become one line on stderr and an exit code, never a traceback.

Every command's callback is wrapped in `guarded` and runs its coroutine through `run`. Retriable errors
exit 75 (EX_TEMPFAIL), bad input 2, event-log problems 3, a point before a compacted log's horizon 5
(`cdctl replay`), everything else cdctl raises on purpose 1.
"""

from __future__ import annotations

import asyncio
import functools
import re
import sys
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, ParamSpec, TypeVar

import click

from cdctl.domain.errors import CdctlError, InvalidInput

T = TypeVar("T")
P = ParamSpec("P")
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"cdctl: error: {message}", err=True)
    sys.exit(code)


def guarded(command: Callable[P, T]) -> Callable[P, T]:
    """Wrap a click callback so typed errors raised anywhere in it end as one line and an exit code."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return command(*args, **kwargs)
        except CdctlError as exc:
            fail(exc.message, exc.exit_code)

    return wrapper


def run(coro: Coroutine[Any, Any, T]) -> T:
    try:
        return asyncio.run(coro)
    except CdctlError as exc:
        fail(exc.message, exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)


def parse_time(value: str, option: str) -> datetime:
    """An instant: ISO 8601 (no offset means UTC), `now`, or a duration ago such as 90s, 15m, 2h, 1d."""
    text = value.strip()
    if text == "now":
        return datetime.now(UTC)
    relative = _RELATIVE.match(text)
    if relative:
        return datetime.now(UTC) - timedelta(**{_UNITS[relative.group(2)]: float(relative.group(1))})
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(
            "command line", option, f"{value!r} is not a time (ISO 8601, 'now', or an age like 15m, 2h, 1d)"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
