"""Typed errors of the simulated API server, each mapping to a Kubernetes `Status` body.

Raised by the object store, the selector parsers, the patch engine and the CRD validator; the HTTP handlers
(cdctl.sim.apiserver.handlers) turn them into responses, and the in-process stand-ins catch them by type.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error the API server answers with a `Status` object of the given HTTP code and reason."""

    code = 500
    reason = "InternalError"

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}

    def status_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


class BadRequest(ApiError):
    code = 400
    reason = "BadRequest"


class Unauthorized(ApiError):
    code = 401
    reason = "Unauthorized"


class Forbidden(ApiError):
    code = 403
    reason = "Forbidden"


class NotFound(ApiError):
    code = 404
    reason = "NotFound"


class MethodNotAllowed(ApiError):
    code = 405
    reason = "MethodNotAllowed"


class AlreadyExists(ApiError):
    code = 409
    reason = "AlreadyExists"


class Conflict(ApiError):
    code = 409
    reason = "Conflict"


class Gone(ApiError):
    code = 410
    reason = "Expired"


class UnsupportedMediaType(ApiError):
    code = 415
    reason = "UnsupportedMediaType"


class Invalid(ApiError):
    code = 422
    reason = "Invalid"


class TooManyRequests(ApiError):
    code = 429
    reason = "TooManyRequests"


class InternalError(ApiError):
    code = 500
    reason = "InternalError"


class ServiceUnavailable(ApiError):
    code = 503
    reason = "ServiceUnavailable"


def not_found(resource: str, name: str, group: str = "") -> NotFound:
    """The API server's 404 for a named object, e.g. `pods "p1" not found`."""
    qualified = f"{resource}.{group}" if group else resource
    return NotFound(
        f'{qualified} "{name}" not found',
        details={"name": name, "group": group, "kind": resource},
    )


def error_for_code(code: int, message: str) -> ApiError:
    """An ApiError of the class that matches an HTTP code (used by fault injection)."""
    for cls in (TooManyRequests, InternalError, ServiceUnavailable, Gone, Conflict, NotFound, BadRequest):
        if cls.code == code:
            return cls(message)
    error = ApiError(message)
    error.code = code
    return error
