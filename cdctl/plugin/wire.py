"""The DRA server's message codec: a request body that does not decode is refused without a traceback.

grpclib decodes a request inside the method's stream, so a malformed body (anything that can reach the
plugin's sockets can send one) surfaced as an exception grpclib logged with its full stack ("Application
error"), once per request; and a body that decodes but holds the wrong types (a varint where a message is
declared, a truncated entry decoded as None) failed later in the handler, the same way. `RequestCodec`
checks every decoded field against its declaration (`check_types`) and answers both kinds with
INVALID_ARGUMENT, naming the message type and cutting the complaint to about 200 characters, and logs it at
most once per `window_s` without a stack, with how many were not logged since. Used by cdctl.plugin.server
for the DRA and the registration servers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import betterproto2
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
            check_types(message)
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


_INTEGERS = ("int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64", "sfixed32",
             "sfixed64")  # fmt: skip
_SCALARS: dict[str, tuple[type, ...]] = {
    betterproto2.TYPE_STRING: (str,),
    betterproto2.TYPE_BYTES: (bytes,),
    betterproto2.TYPE_BOOL: (bool,),
    betterproto2.TYPE_FLOAT: (float,),
    betterproto2.TYPE_DOUBLE: (float,),
    betterproto2.TYPE_ENUM: (int,),
    **{t: (int,) for t in _INTEGERS},
}


def check_types(message: Any, where: str = "") -> None:
    """Raise ValueError when a decoded field holds another type than its declaration.

    The decoder does not check a field's wire type against its declaration: a varint sent where a message
    (or a string) is declared decodes into an int, and a truncated entry of a repeated message into None,
    which a handler then trips over. Every field of `message`, nested messages and map values included, is
    checked against the generated class's metadata (betterproto2 0.10 keeps it in `_betterproto`).
    """
    meta = message._betterproto
    for name, field in meta.meta_by_field_name.items():
        value = getattr(message, name)
        path = f"{where}{name}"
        if field.proto_type == betterproto2.TYPE_MAP:
            if not isinstance(value, dict):
                raise ValueError(f"{path} is not a map")
            key_meta, value_meta = field.map_meta
            for key, item in value.items():
                _check_value(key, key_meta.proto_type, None, f"{path} key")
                _check_value(
                    item, value_meta.proto_type, meta.cls_by_field.get(f"{name}.value"), f"{path}[{key!r}]"
                )
        elif field.repeated:
            if not isinstance(value, list):
                raise ValueError(f"{path} is not a list")
            for i, item in enumerate(value):
                _check_value(item, field.proto_type, meta.cls_by_field.get(name), f"{path}[{i}]")
        elif value is not None or not field.optional:
            _check_value(value, field.proto_type, meta.cls_by_field.get(name), path)


def _check_value(value: Any, proto_type: str, cls: type | None, path: str) -> None:
    if proto_type == betterproto2.TYPE_MESSAGE:
        if cls is None or not isinstance(value, cls):
            raise ValueError(f"{path} is not a {getattr(cls, '__name__', 'message')} message")
        check_types(value, f"{path}.")
        return
    allowed = _SCALARS.get(proto_type, ())
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        raise ValueError(f"{path} is not a {proto_type}")
