"""The read-only event-log endpoint of a component's HTTP server, which `cdctl collect` reads through the API
server's pod proxy.

Routes, added to the component's aiohttp application (cdctl.httpendpoint):
- `GET /eventlog`: the logs this component serves (its own; the plugin adds its node's IMEX daemon logs),
  each with its component, domain, state (live or kept), chain scheme, first available event and head, and
  per log an error where one cannot be read. JSON.
- `GET /eventlog/events?log=NAME[&after=N&after_hash=H][&since=T][&domain=UID...][&limit=N]`: the log's
  events as NDJSON (the format is cdctl.store.export's), streamed a page at a time. 409 when `after_hash`
  is not the log's hash at `after` (another log), 404 for a log not served here, 400 for a bad parameter.
- `GET /eventlog/domains?namespace=NS&name=NAME`: the uids the logs observed for that ComputeDomain.

Every request carries a token in the `X-Cdctl-Eventlog-Token` header that the `Authorizer` accepts: the
components review it with the API server (cdctl.k8s.tokens: the collector service account's token, minted
for this pod's audience). The API server's proxy does not pass the caller's own credentials on, and the
port is reachable from the pod network, so without this check any pod could read every tenant's claims.
Without a token the answer is 401 with `WWW-Authenticate: CdctlEventlog serviceaccount="NS/NAME",
audience="..."`, saying which token to bring. At most `concurrent` streams run at once; others wait.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import orjson
import structlog
from aiohttp import web

from cdctl.domain.errors import StoreError
from cdctl.store.export import ContinuityBroken, ExportRequest, LogReader, LogRef, export_lines
from cdctl.store.sealing import format_time

log = structlog.get_logger(__name__)
TOKEN_HEADER = "X-Cdctl-Eventlog-Token"
CHALLENGE_SCHEME = "CdctlEventlog"
NDJSON = "application/x-ndjson"
_UID = re.compile(r"^[0-9a-zA-Z][0-9a-zA-Z.-]{0,62}$")
_HASH = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True, slots=True)
class Denied:
    status: int  # 401: no or bad token; 403: a valid token of someone else; 503: the review failed
    message: str


class Authorizer(Protocol):
    """Decides whether a request's token may read the logs."""

    @property
    def audience(self) -> str: ...

    @property
    def service_account(self) -> str:
        """`namespace/name` of the service account whose tokens are accepted."""
        ...

    async def review(self, token: str) -> Denied | None: ...


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=orjson.dumps(body), status=status, content_type="application/json", headers=headers
    )


class BadParameter(ValueError):
    pass


def _int(query: Any, name: str, default: int | None) -> int | None:
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit():
        raise BadParameter(f"{name}: {raw!r} is not a non-negative integer")
    return int(raw)


def parse_request(query: Any) -> ExportRequest:
    """The export request of a query string; BadParameter names the parameter at fault."""
    after = _int(query, "after", 0) or 0
    after_hash = (query.get("after_hash") or "").lower()
    if after_hash and not _HASH.match(after_hash):
        raise BadParameter(f"after_hash: {after_hash!r} is not 64 hex digits")
    since = query.get("since") or ""
    if since:
        try:
            moment = datetime.fromisoformat(since)
        except ValueError:
            raise BadParameter(f"since: {since!r} is not an ISO 8601 time") from None
        since = format_time(moment if moment.tzinfo else moment.replace(tzinfo=UTC))
    domains = tuple(query.getall("domain", ()))
    for uid in domains:
        if not _UID.match(uid):
            raise BadParameter(f"domain: {uid!r} is not a uid")
    limit = _int(query, "limit", None)
    if limit == 0:
        raise BadParameter("limit: must be at least 1")
    return ExportRequest(after, after_hash, since, domains, limit)


class LogServer:
    """Serves `logs()` read-only to requests `authorizer` accepts."""

    def __init__(
        self,
        identity: dict[str, str],
        logs: Callable[[], list[LogRef]],
        authorizer: Authorizer,
        concurrent: int = 2,
    ) -> None:
        self.identity = identity  # component, node, pod: said in every answer
        self.logs = logs
        self.authorizer = authorizer
        self._streams = asyncio.Semaphore(concurrent)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/eventlog", self._index)
        app.router.add_get("/eventlog/events", self._events)
        app.router.add_get("/eventlog/domains", self._domains)

    async def _denied(self, request: web.Request) -> web.Response | None:
        token = request.headers.get(TOKEN_HEADER, "").strip()
        challenge = (
            f'{CHALLENGE_SCHEME} serviceaccount="{self.authorizer.service_account}",'
            f' audience="{self.authorizer.audience}"'
        )
        if not token:
            denied: Denied | None = Denied(401, f"a token is required in the {TOKEN_HEADER} header")
        else:
            denied = await self.authorizer.review(token)
        if denied is None:
            return None
        body = {
            "message": denied.message,
            "serviceAccount": self.authorizer.service_account,
            "audience": self.authorizer.audience,
        }
        return _json(body, denied.status, {"WWW-Authenticate": challenge} if denied.status == 401 else None)

    async def _index(self, request: web.Request) -> web.Response:
        refused = await self._denied(request)
        if refused is not None:
            return refused
        entries: list[dict[str, Any]] = []
        for ref in self.logs():
            entry: dict[str, Any] = {
                "name": ref.name,
                "component": ref.component,
                "domain_uid": ref.domain_uid,
                "state": ref.state,
            }
            try:
                entry.update((await asyncio.to_thread(_summary, ref)).to_json())
            except StoreError as exc:
                entry["error"] = exc.message
            except sqlite3.Error as exc:
                entry["error"] = f"{ref.path}: cannot read: {exc}"
            entries.append(entry)
        return _json({**self.identity, "logs": entries})

    async def _domains(self, request: web.Request) -> web.Response:
        """The uids its logs observed for the ComputeDomain `namespace`/`name` (narrowing a collection by
        name)."""
        refused = await self._denied(request)
        if refused is not None:
            return refused
        namespace, name = request.query.get("namespace", ""), request.query.get("name", "")
        if not _UID.match(namespace) or not _UID.match(name):
            return _json({"message": "namespace and name: required, as Kubernetes names"}, 400)
        uids: set[str] = set()
        for ref in self.logs():
            try:
                uids.update(await asyncio.to_thread(_domain_uids, ref, namespace, name))
            except (StoreError, sqlite3.Error):
                continue  # an unreadable log is reported by the index
        return _json({"uids": sorted(uids)})

    async def _events(self, request: web.Request) -> web.StreamResponse:
        refused = await self._denied(request)
        if refused is not None:
            return refused
        name = request.query.get("log", "")
        try:
            export = parse_request(request.query)
        except BadParameter as exc:
            return _json({"message": str(exc)}, 400)
        ref = next((r for r in self.logs() if r.name == name), None)
        if ref is None:
            return _json({"message": f"no log {name!r} here"}, 404)
        async with self._streams:
            lines = export_lines(ref, export, self.identity)
            try:
                first = await anext(lines)
            except ContinuityBroken as exc:
                return _json({"message": exc.message, "reason": "ContinuityBroken"}, 409)
            except StoreError as exc:
                return _json({"message": exc.message}, 500)
            except sqlite3.Error as exc:
                return _json({"message": f"{ref.path}: cannot read: {exc}"}, 500)
            response = web.StreamResponse(headers={"Content-Type": NDJSON})
            await response.prepare(request)
            try:
                await response.write(first)
                async for chunk in lines:
                    await response.write(chunk)
            except (StoreError, sqlite3.Error) as exc:
                # The stream ends without its `end` line: the collector records it as cut short.
                log.warning("event log stream failed", log=ref.name, error=str(exc))
            finally:
                await lines.aclose()
            await response.write_eof()
            return response


def _summary(ref: LogRef) -> Any:
    reader = LogReader(ref)
    try:
        return reader.summary()
    finally:
        reader.close()


def _domain_uids(ref: LogRef, namespace: str, name: str) -> list[str]:
    reader = LogReader(ref)
    try:
        return reader.domain_uids(namespace, name)
    finally:
        reader.close()
