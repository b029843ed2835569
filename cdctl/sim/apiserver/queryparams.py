"""Query-parameter parsing shared by the HTTP handlers and the watch stream of the simulated API server."""

from __future__ import annotations

from cdctl.sim.apiserver.errors import BadRequest


def is_true(value: str | None) -> bool:
    """Boolean parameters, case-insensitively (kubernetes_asyncio sends `watch=True`)."""
    return value is not None and value.lower() in ("true", "1")


def non_negative_int(value: str | None, name: str) -> int:
    """A numeric parameter (absent: 0); anything else is a 400 like the API server's."""
    if not value:
        return 0
    if not value.isdigit():
        raise BadRequest(
            f"invalid value {value!r} for query parameter {name}: must be a non-negative integer"
        )
    return int(value)
