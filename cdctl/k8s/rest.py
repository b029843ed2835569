"""JSON-over-HTTP access to the API server through the kubernetes_asyncio ApiClient, with typed errors.

Every request goes through `KubeApi`: it keeps the client's configuration (host, TLS, bearer-token refresh,
proxy, default headers) and its HTTP session, but sends and receives plain dicts, names the patch content
type explicitly (the library would otherwise send a dict to a custom resource as a JSON patch), applies the
client-side QPS/burst limit, and maps failures to cdctl.k8s.errors. Bodies are encoded and answers decoded
with orjson, and the session is called directly: the library's generic path (walking every body to
sanitize it, stdlib json) cost more CPU than the request. `stream()` opens a watch and yields its decoded
lines. Called by every cdctl.k8s module. Each request is a log line at verbosity 6 (method, path, status,
duration) and its bodies at 7, the bodies of Secrets and TokenReviews (keys, tokens) redacted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlencode

import aiohttp
import orjson
import structlog
from kubernetes_asyncio.client import ApiClient

from cdctl.api.verbosity import V_BODY, V_REQUEST, enabled, install_default_filter
from cdctl.k8s.errors import KubeApiError, NotFoundError, TransportError, error_for

install_default_filter()
log = structlog.get_logger("cdctl.k8s.rest")

JsonObject = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
# Requests whose bodies may hold credentials: logged at verbosity 7 without them.
SECRET_PATH_PARTS = ("/secrets", "/tokenreviews", "/serviceaccounts/")
REDACTED = "<redacted>"
MAX_LOGGED_BODY = 4096


class TokenBucket:
    """Client-side rate limit: `qps` tokens a second, up to `burst` saved. qps <= 0 means unlimited."""

    def __init__(self, qps: float, burst: int) -> None:
        self._qps = qps
        self._burst = max(1, burst)
        self._tokens = float(self._burst)
        self._stamp = time.monotonic()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        if self._qps <= 0:
            return
        async with self._lock:
            now = time.monotonic()
            self._tokens = min(self._burst, self._tokens + (now - self._stamp) * self._qps)
            self._stamp = now
            if self._tokens < 1:
                await asyncio.sleep((1 - self._tokens) / self._qps)
                self._stamp = time.monotonic()
                self._tokens = 0.0
            else:
                self._tokens -= 1


class KubeApi:
    """Typed-error JSON requests against one cluster; cheap to share between tasks."""

    def __init__(
        self, client: ApiClient, *, qps: float = 0.0, burst: int = 0, request_timeout_s: float = 30.0
    ) -> None:
        self.client = client
        self._bucket = TokenBucket(qps, burst)
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s)

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> JsonObject:
        """Send one request; the decoded JSON answer on 2xx, else the typed error."""
        await self._bucket.acquire()
        started = time.monotonic()
        try:
            response = await self._send(
                method, path, query, body, {"Content-Type": content_type, "Accept": "application/json"},
                self._timeout,
            )  # fmt: skip
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise TransportError(f"{method} {path}: {exc!r}") from exc
        async with response:
            try:
                raw = await response.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise TransportError(f"{method} {path}: {exc!r}") from exc
            if enabled(V_REQUEST):
                log_exchange(method, path, response.status, time.monotonic() - started, body, raw)
            if 200 <= response.status < 300:
                return _decode(raw)
            raise _status_error(response.status, raw)

    async def _send(
        self,
        method: str,
        path: str,
        query: Mapping[str, str | int | bool] | None,
        body: Any,
        headers: dict[str, str],
        limits: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        """One request on the client's session, as the library would send it (URL, query encoding, auth,
        proxy, TLS server name), minus its generic serialization."""
        client = self.client
        headers = {**client.default_headers, **headers}
        await client.update_params_for_auth(headers, [], ["BearerToken"])
        rest = client.rest_client
        url = f"{client.configuration.host}{path}"
        pairs = _query_pairs(query)
        if pairs:
            url += "?" + urlencode(pairs)
        options: dict[str, Any] = {}
        if rest.proxy:
            options["proxy"] = rest.proxy
        if rest.proxy_headers:
            options["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            options["server_hostname"] = rest.server_hostname
        data = None if body is None else orjson.dumps(body)
        session: aiohttp.ClientSession = rest.pool_manager
        return await session.request(method, url, data=data, headers=headers, timeout=limits, **options)

    async def get(self, path: str) -> JsonObject:
        return await self.request("GET", path)

    async def get_or_none(self, path: str) -> JsonObject | None:
        try:
            return await self.get(path)
        except NotFoundError:
            return None

    async def list_objects(
        self, path: str, *, label_selector: str | None = None, **query: str | int
    ) -> JsonObject:
        params: dict[str, str | int | bool] = dict(query)
        if label_selector:
            params["labelSelector"] = label_selector
        return await self.request("GET", path, query=params)

    async def create(self, path: str, body: JsonObject) -> JsonObject:
        return await self.request("POST", path, body=body)

    async def replace(self, path: str, body: JsonObject) -> JsonObject:
        return await self.request("PUT", path, body=body)

    async def merge_patch(self, path: str, patch: JsonObject) -> JsonObject:
        return await self.request("PATCH", path, body=patch, content_type=MERGE_PATCH)

    async def json_patch(self, path: str, operations: list[JsonObject]) -> JsonObject:
        return await self.request("PATCH", path, body=operations, content_type=JSON_PATCH)

    async def delete(self, path: str, *, uid: str | None = None) -> JsonObject:
        """Delete, optionally only if the object still has `uid` (a precondition)."""
        body: JsonObject | None = {"preconditions": {"uid": uid}} if uid else None
        return await self.request("DELETE", path, body=body)

    @asynccontextmanager
    async def stream(
        self, path: str, query: Mapping[str, str | int | bool]
    ) -> AsyncIterator[AsyncIterator[JsonObject]]:
        """Open a watch; the context yields an iterator of decoded watch events (one JSON object per line).

        The caller bounds each read itself: a stalled connection sends nothing and nothing here notices.
        """
        await self._bucket.acquire()
        try:
            response = await self._send(
                "GET", path, query, None, {"Accept": "application/json"},
                aiohttp.ClientTimeout(total=None, connect=30),
            )  # fmt: skip
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise TransportError(f"WATCH {path}: {exc!r}") from exc
        async with response:
            if enabled(V_REQUEST):
                log.info("api watch", path=path, status=response.status, v=V_REQUEST)
            if response.status != 200:
                raise _status_error(response.status, await response.read())
            yield _lines(response)


async def _lines(response: aiohttp.ClientResponse) -> AsyncIterator[JsonObject]:
    try:
        async for line in response.content:
            if line.strip():
                yield _decode(line)
    except (aiohttp.ClientError, asyncio.IncompleteReadError) as exc:
        raise TransportError(f"watch stream dropped: {exc!r}") from exc


def _shown_body(path: str, body: Any) -> str:
    if body is None or body == b"":
        return ""
    if any(part in path for part in SECRET_PATH_PARTS):
        return REDACTED
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else orjson.dumps(body).decode()
    return text if len(text) <= MAX_LOGGED_BODY else text[:MAX_LOGGED_BODY] + "...(truncated)"


def log_exchange(method: str, path: str, status: int, seconds: float, body: Any, raw: bytes) -> None:
    """Verbosity 6: the request line; 7: with its bodies (credential-bearing ones redacted)."""
    log.info("api request", method=method, path=path, status=status, ms=round(seconds * 1000, 1), v=V_REQUEST)
    if enabled(V_BODY):
        log.info(
            "api request bodies", method=method, path=path,
            request=_shown_body(path, body), response=_shown_body(path, raw), v=V_BODY,
        )  # fmt: skip


def _query_pairs(query: Mapping[str, str | int | bool] | None) -> list[tuple[str, str]]:
    if not query:
        return []
    return [(key, _query_value(value)) for key, value in query.items()]


def _query_value(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _decode(raw: bytes) -> JsonObject:
    if not raw:
        return {}
    decoded = orjson.loads(raw)
    if not isinstance(decoded, dict):
        raise TransportError(f"expected a JSON object, got {type(decoded).__name__}")
    return decoded


def _status_error(status: int, raw: bytes) -> KubeApiError:
    reason, message = "", raw.decode("utf-8", "replace")[:500]
    try:
        decoded = orjson.loads(raw)
        if isinstance(decoded, dict):
            reason = str(decoded.get("reason", ""))
            message = str(decoded.get("message", message))
    except ValueError:
        pass
    return error_for(status, reason, message)
