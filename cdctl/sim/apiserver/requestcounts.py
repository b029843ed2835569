"""Request counts of the simulated API server, by verb, resource, response code and user.

The real kube-apiserver counts every request in `apiserver_request_total{verb, group, resource, subresource,
code}`; the simulator keeps the same counts in memory so that a benchmark can state what one object's
lifecycle costs in requests (how many creates, updates, patches, deletes, gets and lists per ComputeDomain)
and a test can assert that a component makes no request it does not need. The verb is the authorization verb
(get, list, watch, create, update, patch, delete, deletecollection; cdctl.sim.apiserver.rbac), the resource
is `group/resource[/subresource]` (`resource` alone for the core group), and a request is counted when its
answer starts, with that answer's code (a watch when its stream opens) and the user it authenticated as
(REQUEST_USER, set by cdctl.sim.apiserver.handlers; '' for a request refused before that). Discovery and
health requests are not counted. cdctl.sim.apiserver.server attaches `RequestCounts.on_response_prepare` to
its application; read through `ApiServer.requests`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from aiohttp import web

from cdctl.sim.apiserver.rbac import request_attributes

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
REQUEST_USER = web.RequestKey("authenticated_user", str)  # the request's authenticated username


@dataclass(frozen=True, slots=True)
class RequestKey:
    verb: str
    resource: str  # "group/plural[/subresource]", or "plural[/subresource]" in the core group
    code: int
    user: str = ""


class RequestCounts:
    """How many requests of each (verb, resource, code) the server answered since the last `reset`."""

    def __init__(self) -> None:
        self.counts: Counter[RequestKey] = Counter()

    def record(self, method: str, path: str, query: dict[str, str] | None, code: int, user: str = "") -> None:
        attrs = request_attributes(method, path, query or {})
        if attrs is None:
            return
        resource = f"{attrs.group}/{attrs.resource}" if attrs.group else attrs.resource
        self.counts[RequestKey(attrs.verb, resource, code, user)] += 1

    async def on_response_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        """aiohttp signal: called once per response as its headers are sent."""
        user = str(request.get(REQUEST_USER, ""))
        self.record(request.method, request.path, dict(request.query), response.status, user)

    def reset(self) -> None:
        self.counts.clear()

    def total(self, verbs: Iterable[str] | None = None) -> int:
        wanted = frozenset(verbs) if verbs is not None else None
        return sum(n for key, n in self.counts.items() if wanted is None or key.verb in wanted)

    def writes(self) -> int:
        return self.total(WRITE_VERBS)

    def by_verb_and_resource(self) -> dict[str, int]:
        """`"verb resource"` -> count (all codes together), sorted by key."""
        merged: Counter[str] = Counter()
        for key, n in self.counts.items():
            merged[f"{key.verb} {key.resource}"] += n
        return dict(sorted(merged.items()))

    def by_user_verb_and_resource(self) -> dict[tuple[str, str, str], int]:
        """(user, verb, resource) -> count (all codes together)."""
        merged: Counter[tuple[str, str, str]] = Counter()
        for key, n in self.counts.items():
            merged[(key.user, key.verb, key.resource)] += n
        return dict(sorted(merged.items()))

    def failed(self) -> dict[str, int]:
        """`"verb resource code"` -> count, for answers that were not 2xx."""
        return {
            f"{key.verb} {key.resource} {key.code}": n
            for key, n in sorted(self.counts.items(), key=lambda item: str(item[0]))
            if not 200 <= key.code < 300
        }
