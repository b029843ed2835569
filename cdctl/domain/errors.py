"""Typed errors shared by every layer.

Each error is either retriable (try again after `delay` seconds) or permanent. Boundaries map them: the gRPC
server to a status or a per-claim error string, reconcilers to a requeue or a Kubernetes Event, the CLI to a
one-line message and an exit code (`exit_code`). `echo` and `clip` bound what an error text repeats of its
input; `require_uuid` checks a uid from input before anything (a file path, a label) is built from it.
"""

from __future__ import annotations

import re
import uuid

ECHO_LIMIT = 200
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def echo(value: object, limit: int = ECHO_LIMIT) -> str:
    """`value` as it may appear in an error text: its repr, cut to about `limit` characters (input from
    claims and requests can be megabytes; an error repeats only enough of it to recognise)."""
    return clip(repr(value), limit)


def clip(text: str, limit: int = ECHO_LIMIT) -> str:
    """`text` (a name or message from input) cut to about `limit` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


def is_uuid(value: object) -> bool:
    """Whether `value` is a UUID in the canonical lowercase 8-4-4-4-12 form Kubernetes writes as uids."""
    if not isinstance(value, str) or not _UUID.fullmatch(value):
        return False
    return str(uuid.UUID(value)) == value


class CdctlError(Exception):
    """Base of every error cdctl raises on purpose."""

    exit_code: int = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class RetriableError(CdctlError):
    """The operation may succeed later; retry after `delay` seconds."""

    exit_code = 75  # EX_TEMPFAIL

    def __init__(self, message: str, delay: float = 1.0) -> None:
        super().__init__(message)
        self.delay = delay


class PermanentError(CdctlError):
    """Retrying the same input cannot succeed."""


class InvalidInput(PermanentError):
    """Bad input: names the object and the field at fault."""

    exit_code = 2

    def __init__(self, obj: str, field: str, problem: str) -> None:
        super().__init__(f"{obj}: {field}: {problem}")
        self.obj = obj
        self.field = field
        self.problem = problem


def require_uuid(value: object, obj: str, field: str) -> str:
    """`value` if it is a canonical UUID (a Kubernetes uid), else InvalidInput naming `obj` and `field`."""
    if not is_uuid(value):
        raise InvalidInput(obj, field, f"must be a UUID (a Kubernetes uid), got {echo(value)}")
    assert isinstance(value, str)
    return value


class ConcurrencyConflict(RetriableError):
    """An append expected a stream version that is no longer current: re-read and decide again."""

    def __init__(self, stream: str, expected: int, actual: int) -> None:
        super().__init__(f"stream {stream!r}: expected version {expected}, found {actual}", delay=0.0)
        self.stream = stream
        self.expected = expected
        self.actual = actual


class StoreError(PermanentError):
    """The event log file is missing, foreign, corrupt, locked or too new for this binary."""

    exit_code = 3


class StoreLocked(RetriableError):
    """Another process holds a lock on the event log: try again (exit 75, as every retriable error)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, delay=1.0)


class LogTampered(StoreError):
    """An event log fails its integrity check: a link of its chain, a snapshot's hash or a row's JSON.

    Permanent: the process refuses to serve the file. The message names the position and the command that
    keeps the file aside so the component can start anew with an empty log.
    """

    def __init__(self, path: str, position: int, reason: str, stamp: str) -> None:
        super().__init__(
            f"{path}: event log fails its integrity check at position {position}: {reason}; refusing to"
            f" serve it. To keep it for inspection and start anew, stop the component and run:"
            f" mv {path} {path}.tampered-{stamp}"
        )
        self.path = path
        self.position = position
        self.reason = reason


class CompactedAway(PermanentError):
    """A point of the log before its horizon was asked for: compaction removed the events it needs.

    Its own exit code (5), so a script tells "no longer kept" from a broken or missing log (3) and from a
    collection that skipped a source (4).
    """

    exit_code = 5
