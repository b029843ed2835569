"""The DRA server's message codec: a request body that does not decode is refused without a traceback.

grpclib decodes a request inside the method's stream, so a malformed body (anything on the DRA socket can
send one) surfaced as an exception grpclib logged with its full stack ("Application error"), once per
request (and a truncated claim entry decoded as None failed later in the handler, the same way).
`RequestCodec` answers both with INVALID_ARGUMENT, naming the message type and cutting the decoder's
complaint to about 200 characters, and logs it at most once per `window_s` without a stack, with how many
were not logged since. Used by cdctl.plugin.server for the DRA server.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog
from grpclib.const import Status
from grpclib.encoding.proto import ProtoCodec
from grpclib.exceptions import GRPCError

from cdctl.domain.errors import clip

log = structlog.get_logger("cdctl.plugin.wire")

MALFORMED_LOG_WINDOW_S = 60.0


class RequestCodec(ProtoCodec):
    """grpclib's protobuf codec, with malformed requests answered INVALID_ARGUMENT and logged rate-limited."""

    def __init__(
        self, window_s: float = MALFORMED_LOG_WINDOW_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.window_s = window_s
        self.clock = clock
        self.suppressed = 0
        self._logged_at: float | None = None

    def decode(self, data: bytes, message_type: Any) -> Any:
        try:
            message = super().decode(data, message_type)
            _check_claims(message)
            return message
        except Exception as exc:  # the decoder's own errors vary by message and input
            name = getattr(message_type, "__name__", "request")
            problem = clip(f"{type(exc).__name__}: {exc}")
            self._note(name, problem, len(data))
            raise GRPCError(Status.INVALID_ARGUMENT, f"malformed {name}: {problem}") from None

    def _note(self, name: str, problem: str, size: int) -> None:
        now = self.clock()
        if self._logged_at is not None and now - self._logged_at < self.window_s:
            self.suppressed += 1
            return
        log.warning(
            "refused a malformed request", message=name, error=problem, bytes=size,
            not_logged_since_last=self.suppressed,
        )  # fmt: skip
        self._logged_at = now
        self.suppressed = 0


def _check_claims(message: Any) -> None:
    """The decoder lets a truncated entry of a repeated message field through as None (a `claims` list of
    [None]); a request's claims must each be a message."""
    for i, claim in enumerate(getattr(message, "claims", None) or ()):
        if claim is None:
            raise ValueError(f"claims[{i}] is not a Claim message")
