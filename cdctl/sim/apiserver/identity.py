"""Who a request to the simulated API server comes from: the bearer token's user, groups and extra claims.

A token `system:serviceaccount:<namespace>:<name>` is that service account. A service-account token may be
bound to a pod, as the real server's projected tokens are, by the suffix
`;pod=<name>;pod-uid=<uid>;node=<node>` (`service_account_token(..., pod=, pod_uid=, node=)`): the claims
then appear in the user's `extra` under `authentication.kubernetes.io/pod-name`, `/pod-uid` and
`/node-name` (ServiceAccountTokenPodNodeInfo), which admission policies key on. Every other token is the
cluster admin. Used by cdctl.sim.apiserver.rbac (grants are per service account, whatever pod a token is
bound to), the HTTP handlers (the user of each write, for cdctl.sim.apiserver.policies) and the tests and
rack that hand components their identities.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
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


def user_for_token(token: str) -> UserInfo:
    """The user a bearer token authenticates as; raises TokenError for a malformed bound-pod suffix."""
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
