"""Tokens for the event-log endpoint: the components review them, `cdctl collect` mints them.

Who may read a component's log over its HTTP port is decided by the API server, not by the network: the
collector (an operator with the chart's `<fullname>-collector` Role) asks for a short-lived token of the
collector service account through the TokenRequest API (`mint_token`), with an audience naming the one pod it
is about to read (`audience_for`), and sends it through the pod proxy in the `X-Cdctl-Eventlog-Token` header.
The component reviews it (`TokenReviewer`, the Authorizer of cdctl.store.logserver): a TokenReview with its
own audience, accepted when the API server authenticates it as the collector service account. A token minted
for one pod is refused by every other (its audience), and the API server refuses it too (not its audience), so
a component that receives one can use it nowhere. Accepted tokens are remembered for a minute (one review per
collection of a pod, not one per request). Used by the controller (cdctl.controller.app), the kubelet plugin
(cdctl.plugin.app) and cdctl.collect.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from cdctl.k8s.errors import KubeApiError
from cdctl.k8s.rest import KubeApi
from cdctl.store.logserver import Denied

AUDIENCE_PREFIX = "cdctl-eventlog"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
MIN_TTL_S = 600  # the API server's floor for a TokenRequest's expirationSeconds
REMEMBER_S = 60.0


def audience_for(namespace: str, pod: str) -> str:
    """The audience of a token that may read the logs of `pod` in `namespace` (and nothing else)."""
    return f"{AUDIENCE_PREFIX}/{namespace}/{pod}"


def parse_service_account(value: str) -> tuple[str, str]:
    """`NAMESPACE/NAME` (or `system:serviceaccount:NAMESPACE:NAME`) as (namespace, name); ValueError else."""
    text = value.strip()
    if text.startswith(SERVICE_ACCOUNT_PREFIX):
        namespace, _, name = text.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
    else:
        namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name or ":" in name:
        raise ValueError(f"{value!r} is not NAMESPACE/NAME of a service account")
    return namespace, name


class TokenReviewer:
    """A component's Authorizer: tokens of `reader` (NAMESPACE/NAME) minted for this pod's audience."""

    def __init__(self, api: KubeApi, namespace: str, pod: str, reader: str) -> None:
        self.api = api
        self._audience = audience_for(namespace, pod)
        reader_namespace, reader_name = parse_service_account(reader)
        self._account = f"{reader_namespace}/{reader_name}"
        self.username = f"{SERVICE_ACCOUNT_PREFIX}{reader_namespace}:{reader_name}"
        self._accepted: dict[str, float] = {}

    @property
    def audience(self) -> str:
        return self._audience

    @property
    def service_account(self) -> str:
        return self._account

    async def review(self, token: str) -> Denied | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        if self._accepted.get(key, 0.0) > now:
            return None
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [self._audience]},
        }
        try:
            answer = await self.api.create(TOKEN_REVIEWS, body)
        except KubeApiError as exc:
            return Denied(503, f"the token could not be reviewed: {exc}")
        status: dict[str, Any] = answer.get("status") or {}
        if not status.get("authenticated"):
            reason = status.get("error") or "not authenticated"
            return Denied(401, f"the token is not valid for {self._audience}: {reason}")
        username = str((status.get("user") or {}).get("username", ""))
        if username != self.username:
            return Denied(403, f"{username} may not read this event log (only {self.username})")
        if self._audience not in (status.get("audiences") or [self._audience]):
            return Denied(401, f"the token is not valid for {self._audience}")
        self._accepted = {k: t for k, t in self._accepted.items() if t > now}
        self._accepted[key] = now + REMEMBER_S
        return None


async def mint_token(
    api: KubeApi, namespace: str, service_account: str, audience: str, ttl_s: int = MIN_TTL_S
) -> str:
    """A token of `namespace/service_account` for `audience` (TokenRequest: create serviceaccounts/token)."""
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"audiences": [audience], "expirationSeconds": max(ttl_s, MIN_TTL_S)},
    }
    answer = await api.create(f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token", body)
    token = str((answer.get("status") or {}).get("token", ""))
    if not token:
        raise KubeApiError(500, "InternalError", "the TokenRequest answer holds no token")
    return token
