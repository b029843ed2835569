"""Who a request to the simulated API server comes from: the bearer token's user, groups and extra claims.

A token `system:serviceaccount:<namespace>:<name>` is that service account. A service-account token may be
bound to a pod, as the real server's projected tokens are, by the suffix
`;pod=<name>;pod-uid=<uid>;node=<node>` (`service_account_token(..., pod=, pod_uid=, node=)`): the claims
then appear in the user's `extra` under `authentication.kubernetes.io/pod-name`, `/pod-uid` and
`/node-name` (ServiceAccountTokenPodNodeInfo), which admission policies key on. A token
`sim-user:<name>[;group=<group>...]` (`user_token`) is a user, as an operator's kubeconfig would name one.
Tokens the TokenRequest API issues (`issue_token`, `review_token`) are signed like the real server's JWTs, so
they cannot be forged, and carry their audiences and expiry: such a token authenticates to this server only
when its audiences include the server's own (`API_AUDIENCE`). Every other token is the
cluster admin. Used by cdctl.sim.apiserver.rbac (grants are per service account, whatever pod a token is
bound to), the HTTP handlers (the user of each write, for cdctl.sim.apiserver.policies) and the tests and
rack that hand components their identities.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
USER_PREFIX = "sim-user:"
BOUND_PREFIX = "sim-bound."
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"  # the API server's own (--api-audiences)
_SIGNING_KEY = secrets.token_bytes(32)  # the service-account signing key of this simulated control plane
ADMIN_USER = "kubernetes-admin"
POD_NAME_CLAIM = "authentication.kubernetes.io/pod-name"
POD_UID_CLAIM = "authentication.kubernetes.io/pod-uid"
NODE_NAME_CLAIM = "authentication.kubernetes.io/node-name"
# Token suffix key -> the extra claim it carries.
_BOUND_CLAIMS = {"pod": POD_NAME_CLAIM, "pod-uid": POD_UID_CLAIM, "node": NODE_NAME_CLAIM}


class TokenError(ValueError):
    """A service-account token whose bound-pod suffix is not `;key=value` pairs of known keys."""


@dataclass(frozen=True)
class UserInfo:
    """The authenticated user of a request, as admission sees it (`request.userInfo`)."""

    username: str
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def is_service_account(self) -> bool:
        return self.username.startswith(SERVICE_ACCOUNT_PREFIX)

    def as_cel(self) -> dict[str, Any]:
        return {
            "username": self.username,
            "uid": "",
            "groups": list(self.groups),
            "extra": {key: list(values) for key, values in self.extra.items()},
        }


ADMIN = UserInfo(ADMIN_USER, ("system:masters", "system:authenticated"))


def service_account_token(
    namespace: str, name: str, *, pod: str = "", pod_uid: str = "", node: str = ""
) -> str:
    """The token by which a simulated client is the service account `namespace/name`, bound to a pod and its
    node when they are given."""
    token = f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"
    for key, value in (("pod", pod), ("pod-uid", pod_uid), ("node", node)):
        if value:
            token += f";{key}={value}"
    return token


def user_token(name: str, groups: Sequence[str] = ()) -> str:
    """The token by which a simulated client is the user `name` (an operator), in `groups`."""
    return USER_PREFIX + name + "".join(f";group={group}" for group in groups)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def issue_token(namespace: str, name: str, audiences: Sequence[str], ttl_s: int) -> tuple[str, int]:
    """A signed token of service account `namespace/name` for `audiences` (the API server's own when none),
    valid `ttl_s` seconds; returns it and its expiry (epoch seconds)."""
    expires = int(time.time()) + ttl_s
    claims: dict[str, Any] = {
        "sub": f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}",
        "aud": list(audiences or [API_AUDIENCE]),
        "exp": expires,
        "jti": secrets.token_hex(8),
    }
    payload = _b64(json.dumps(claims, sort_keys=True).encode())
    signature = _b64(hmac.digest(_SIGNING_KEY, payload.encode(), hashlib.sha256))
    return f"{BOUND_PREFIX}{payload}.{signature}", expires


def review_token(token: str, audiences: Sequence[str]) -> tuple[UserInfo, list[str]]:
    """The user of an issued token and the audiences it was accepted for (those of `audiences` it names, or
    the API server's when `audiences` is empty); TokenError when it is forged, expired or for others."""
    payload, _, signature = token.removeprefix(BOUND_PREFIX).partition(".")
    expected = _b64(hmac.digest(_SIGNING_KEY, payload.encode(), hashlib.sha256))
    if not token.startswith(BOUND_PREFIX) or not hmac.compare_digest(signature, expected):
        raise TokenError("invalid bearer token: signature does not verify")
    try:
        claims = json.loads(_unb64(payload))
        expires, granted, subject = int(claims["exp"]), list(claims["aud"]), str(claims["sub"])
    except (ValueError, KeyError, TypeError) as error:
        raise TokenError(f"invalid bearer token: {error}") from None
    if expires < time.time():
        raise TokenError("invalid bearer token: token has expired")
    wanted = list(audiences or [API_AUDIENCE])
    accepted = [audience for audience in wanted if audience in granted]
    if not accepted:
        raise TokenError(
            f"invalid bearer token: token audiences {granted} is invalid for the target audiences {wanted}"
        )
    return user_for_token(subject), accepted


def user_for_token(token: str) -> UserInfo:
    """The user a bearer token authenticates as; raises TokenError for a malformed bound-pod suffix, and for
    an issued token that is forged, expired or not for this server."""
    if token.startswith(BOUND_PREFIX):
        return review_token(token, [API_AUDIENCE])[0]
    if token.startswith(USER_PREFIX):
        name, *pairs = token.removeprefix(USER_PREFIX).split(";")
        named: list[str] = []
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if key != "group" or not sep or not value:
                raise TokenError(f"user token: unknown claim {pair!r}")
            named.append(value)
        return UserInfo(name, (*named, "system:authenticated"))
    if not token.startswith(SERVICE_ACCOUNT_PREFIX):
        return ADMIN
    username, *pairs = token.split(";")
    extra: dict[str, tuple[str, ...]] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in _BOUND_CLAIMS or not value:
            raise TokenError(f"service account token: unknown bound claim {pair!r}")
        extra[_BOUND_CLAIMS[key]] = (value,)
    namespace = username.removeprefix(SERVICE_ACCOUNT_PREFIX).split(":", 1)[0]
    groups = ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated")
    return UserInfo(username, groups, extra)


def user_for_authorization(authorization: str | None) -> UserInfo:
    """The user of an `Authorization: Bearer <token>` header (the admin when there is none)."""
    return user_for_token((authorization or "").removeprefix("Bearer ").strip())
