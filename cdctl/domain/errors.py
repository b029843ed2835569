"""Typed errors shared by every layer.

Each error is either retriable (try again after `delay` seconds) or permanent. Boundaries map them: the gRPC
server to a status or a per-claim error string, reconcilers to a requeue or a Kubernetes Event, the CLI to a
one-line message and an exit code (`exit_code`).
"""

from __future__ import annotations


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
    """Another process holds the write lock of the event log."""

    exit_code = 3

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

    Its own exit code (4), so a script tells "no longer kept" from a broken or missing log (3).
    """

    exit_code = 4
