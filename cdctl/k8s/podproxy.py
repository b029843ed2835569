"""Requests to a pod's HTTP port through the API server's proxy subresource (`pods/NAME:PORT/proxy/PATH`).

What `cdctl collect` reads a component's event log and metrics with, holding only the operator's kubeconfig
(RBAC: `get pods/proxy` in the driver namespace). The API server authenticates the caller, strips its
credentials and forwards the rest of the request, headers included, to the pod's IP; a pod it cannot reach
is a 503 (`error trying to reach service: ...`), a pod without an address a 400. `get` reads a short answer,
`lines` streams an NDJSON answer line by line in bounded memory (lines of any length up to
`MAX_LINE_BYTES`). Errors are the typed ones of cdctl.k8s.errors; the pod's own error answers (JSON with a
`message`) become them too. Used by cdctl.collect.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from urllib.parse import quote

import aiohttp

from cdctl.k8s.errors import TransportError
from cdctl.k8s.rest import KubeApi, _status_error

Query = Sequence[tuple[str, str]]

MAX_LINE_BYTES = 64 * 1024 * 1024
READ_TIMEOUT_S = 60.0  # silence this long on an open stream is a dead pod or proxy


def proxy_path(namespace: str, pod: str, port: int, path: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(pod)}:{port}/proxy/{path.lstrip('/')}"


class PodProxy:
    """One pod's port, reached through the API server."""

    def __init__(self, api: KubeApi, namespace: str, pod: str, port: int) -> None:
        self.api = api
        self.namespace = namespace
        self.pod = pod
        self.port = port

    def path(self, path: str) -> str:
        return proxy_path(self.namespace, self.pod, self.port, path)

    async def _open(
        self,
        path: str,
        query: Query,
        headers: Mapping[str, str] | None,
        total: float | None,
    ) -> aiohttp.ClientResponse:
        full = self.path(path)
        try:
            response: aiohttp.ClientResponse = await self.api.client.call_api(
                full,
                "GET",
                query_params=list(query),
                header_params={"Accept": "*/*", **(headers or {})},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=aiohttp.ClientTimeout(total=total, connect=30, sock_read=READ_TIMEOUT_S),
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise TransportError(f"GET {full}: {exc!r}") from exc
        return response

    async def get_raw(
        self, path: str, query: Query = (), headers: Mapping[str, str] | None = None
    ) -> tuple[int, bytes]:
        """The status and body of the answer, whatever the status (transport failures raise)."""
        response = await self._open(path, query, headers, total=READ_TIMEOUT_S)
        async with response:
            try:
                return response.status, await response.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise TransportError(f"GET {self.path(path)}: {exc!r}") from exc

    async def get(self, path: str, query: Query = (), headers: Mapping[str, str] | None = None) -> bytes:
        """The body of a 2xx answer; a typed error otherwise."""
        status, raw = await self.get_raw(path, query, headers)
        if 200 <= status < 300:
            return raw
        raise _status_error(status, raw)

    @asynccontextmanager
    async def lines(
        self, path: str, query: Query = (), headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """Stream a 2xx answer's lines (without their newline); a typed error before the first line."""
        response = await self._open(path, query, headers, total=None)
        async with response:
            if not 200 <= response.status < 300:
                raise _status_error(response.status, await response.read())
            yield _split_lines(response, self.path(path))


async def _split_lines(response: aiohttp.ClientResponse, where: str) -> AsyncIterator[bytes]:
    pending = bytearray()
    try:
        async for chunk in response.content.iter_any():
            pending += chunk
            start = 0
            while True:
                end = pending.find(b"\n", start)
                if end < 0:
                    break
                if end > start:
                    yield bytes(pending[start:end])
                start = end + 1
            del pending[:start]
            if len(pending) > MAX_LINE_BYTES:
                raise TransportError(f"GET {where}: a line longer than {MAX_LINE_BYTES} bytes")
    except (aiohttp.ClientError, asyncio.IncompleteReadError, TimeoutError) as exc:
        raise TransportError(f"GET {where}: the stream dropped: {exc!r}") from exc
    if pending.strip():
        yield bytes(pending)
