"""The simulated API server's audit log: one entry per request, with who made it and what it asked for.

The real kube-apiserver's audit log (audit.k8s.io/v1 Event) records each request's user (username, and the
extra claims of a bound service-account token such as the pod's name), verb, object (API group, resource,
namespace, name) and response code. The simulator keeps the same facts in memory, newest last, at most
`limit` entries, so that tests and benchmarks can count what each identity did: that a standby controller
wrote nothing before it led, or how many Lease requests a minute leader election costs. Filled by
cdctl.sim.apiserver.handlers before each request is served (requests answered by an injected fault or an RBAC
refusal included); read through `ApiServer.audit`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cdctl.sim.apiserver.identity import POD_NAME_CLAIM, TokenError, user_for_authorization
from cdctl.sim.apiserver.rbac import request_attributes

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@dataclass(slots=True)
class AuditEvent:
    """One request. `code` is 0 until the response is complete (a watch still streaming)."""

    timestamp: float  # wall-clock seconds when the request was received (comparable across processes)
    username: str
    pod: str  # the pod a bound service-account token names; "" for other tokens
    verb: str
    group: str
    resource: str  # "" for a non-resource request (discovery); "pods/status" for a subresource
    namespace: str
    name: str
    path: str
    code: int = 0

    @property
    def is_write(self) -> bool:
        return self.verb in WRITE_VERBS


class AuditLog:
    def __init__(self, limit: int = 50_000) -> None:
        self.events: deque[AuditEvent] = deque(maxlen=limit)

    def record(
        self, authorization: str | None, method: str, path: str, query: Mapping[str, str]
    ) -> AuditEvent:
        """The entry of a request as it arrives (its code is set when the answer is known)."""
        try:
            user = user_for_authorization(authorization)
            username, pod = user.username, (user.extra.get(POD_NAME_CLAIM) or ("",))[0]
        except TokenError:
            username, pod = "", ""
        attrs = request_attributes(method, path, query)
        if attrs is None:
            entry = AuditEvent(time.time(), username, pod, method.lower(), "", "", "", "", path)
        else:
            entry = AuditEvent(
                time.time(), username, pod, attrs.verb, attrs.group, attrs.resource, attrs.namespace,
                attrs.name, path,
            )  # fmt: skip
        self.events.append(entry)
        return entry

    def select(
        self,
        *,
        pod: str | None = None,
        username: str | None = None,
        resource: str | None = None,
        verbs: Iterable[str] | None = None,
        since: float | None = None,
    ) -> list[AuditEvent]:
        """The entries matching every given criterion, oldest first."""
        wanted = frozenset(verbs) if verbs is not None else None
        return [
            e
            for e in self.events
            if (pod is None or e.pod == pod)
            and (username is None or e.username == username)
            and (resource is None or e.resource == resource)
            and (wanted is None or e.verb in wanted)
            and (since is None or e.timestamp >= since)
        ]

    def writes(self, *, pod: str, since: float | None = None) -> list[AuditEvent]:
        """Every write request (create, update, patch, delete) made with a token bound to `pod`."""
        return self.select(pod=pod, verbs=WRITE_VERBS, since=since)

    def clear(self) -> None:
        self.events.clear()
