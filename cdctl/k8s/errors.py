"""Typed Kubernetes API errors, mapped from HTTP status codes at the transport boundary (cdctl.k8s.rest).

Callers above cdctl.k8s catch these instead of the client library's ApiException, so no other layer needs to
know the library exists. `retriable` says whether repeating the same request later can succeed.
"""

from __future__ import annotations


class KubeApiError(Exception):
    """A non-2xx answer from the API server (or a transport failure, status 0)."""

    retriable = True

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.message = message


class NotFoundError(KubeApiError):
    retriable = False


class ConflictError(KubeApiError):
    """409 on a stale resourceVersion (or a delete/update race): re-read and retry."""


class AlreadyExistsError(KubeApiError):
    """409 AlreadyExists on create."""

    retriable = False


class GoneError(KubeApiError):
    """410: a watch or list asked for a resourceVersion that has been compacted away; re-list."""


class InvalidError(KubeApiError):
    """422 or 400: the request itself is wrong; repeating it will not help."""

    retriable = False


class ForbiddenError(KubeApiError):
    retriable = False


class TransportError(KubeApiError):
    """The connection failed or was dropped before an answer arrived."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "Transport", message)


def error_for(status: int, reason: str, message: str) -> KubeApiError:
    """The typed error for an HTTP status and the Status object's `reason` field."""
    if status == 404:
        return NotFoundError(status, reason, message)
    if status == 409:
        if reason == "AlreadyExists":
            return AlreadyExistsError(status, reason, message)
        return ConflictError(status, reason, message)
    if status == 410:
        return GoneError(status, reason, message)
    if status in (400, 422):
        return InvalidError(status, reason, message)
    if status in (401, 403):
        return ForbiddenError(status, reason, message)
    return KubeApiError(status, reason, message)
