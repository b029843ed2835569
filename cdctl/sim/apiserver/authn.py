"""The authentication APIs of the simulated API server: TokenRequest and TokenReview.

- `POST /api/v1/namespaces/NS/serviceaccounts/NAME/token` (the `serviceaccounts/token` subresource, RBAC
  verb create): a signed token of that service account for the requested audiences (the API server's own
  when none), `expirationSeconds` at least 600 (the real server's floor; default 3600). 404 when the
  service account does not exist.
- `POST /apis/authentication.k8s.io/v1/tokenreviews` (RBAC: create tokenreviews, as a component that
  authenticates its own callers needs): `status.authenticated`, the user (username, groups, extra) and the
  audiences the token was accepted for, or `status.error`; nothing is stored.
Tokens are those of cdctl.sim.apiserver.identity (`issue_token`, `review_token`). Called by
cdctl.sim.apiserver.handlers.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from cdctl.sim.apiserver.errors import BadRequest
from cdctl.sim.apiserver.identity import TokenError, issue_token, review_token
from cdctl.sim.apiserver.store import ObjectStore

MIN_EXPIRATION_S = 600
DEFAULT_EXPIRATION_S = 3600
TOKEN_REVIEW_PATH = ("apis", "authentication.k8s.io", "v1", "tokenreviews")


def token_request(store: ObjectStore, namespace: str, name: str, body: Any) -> dict[str, Any]:
    """The TokenRequest answer for service account `namespace/name` (which must exist)."""
    store.get(store.type_of("", "serviceaccounts"), namespace, name)  # NotFound when it does not exist
    spec = (body.get("spec") or {}) if isinstance(body, dict) else {}
    audiences = spec.get("audiences") or []
    if not isinstance(audiences, list) or not all(isinstance(a, str) and a for a in audiences):
        raise BadRequest("TokenRequest: spec.audiences must be a list of non-empty strings")
    ttl = spec.get("expirationSeconds", DEFAULT_EXPIRATION_S)
    if not isinstance(ttl, int) or ttl < MIN_EXPIRATION_S:
        raise BadRequest(
            f"TokenRequest: spec.expirationSeconds: Invalid value: {ttl}: may not specify a duration less"
            f" than {MIN_EXPIRATION_S} seconds"
        )
    token, expires = issue_token(namespace, name, audiences, ttl)
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"audiences": audiences, "expirationSeconds": ttl},
        "status": {
            "token": token,
            "expirationTimestamp": datetime.fromtimestamp(expires, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    }


def token_review(body: Any) -> dict[str, Any]:
    """The TokenReview answer for `body` (spec.token, spec.audiences)."""
    spec = (body.get("spec") or {}) if isinstance(body, dict) else {}
    token = spec.get("token")
    if not isinstance(token, str) or not token:
        raise BadRequest("TokenReview: spec.token: Required value")
    audiences = spec.get("audiences") or []
    status: dict[str, Any]
    try:
        user, accepted = review_token(token, audiences)
    except TokenError as error:
        status = {"authenticated": False, "error": str(error)}
    else:
        status = {
            "authenticated": True,
            "user": {
                "username": user.username,
                "groups": list(user.groups),
                "extra": {key: list(values) for key, values in user.extra.items()},
            },
            "audiences": accepted,
        }
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "metadata": {"creationTimestamp": None},
        "spec": {"token": token, "audiences": audiences},
        "status": status,
    }
