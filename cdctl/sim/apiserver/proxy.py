"""The pods `proxy` subresource of the simulated API server, and the pod network it dials through.

`GET /api/v1/namespaces/NS/pods/NAME[:PORT]/proxy/PATH?QUERY` (any method; RBAC verb as for the method on
`pods/proxy`) forwards the request to the pod's IP and port, as the real server does
(pkg/registry/core/pod ResourceLocation and the upgrade-aware proxy):
- `NAME`, `NAME:PORT` or `http:NAME:PORT`; no port: the first container port of the pod spec;
- a pod without an IP, or with a loopback, link-local or unspecified one, is refused: 400 `address not
  allowed` (the real server never proxies to its own host's loopback);
- a pod it cannot reach is a 503 ServiceUnavailable Status `error trying to reach service: dial tcp
  IP:PORT: connect: connection refused` (nothing listens) or `...: no route to host` (no such address);
- the caller's `Authorization` header is not passed on (the real server drops it once it authenticated the
  caller), nor are hop-by-hop headers; every other header is; the answer streams back as it comes, status and
  content type kept.

Processes of the simulated cluster all listen on this machine's loopback, so `PodNetwork` stands in for the
cluster network: it maps a pod's (IP, port) to the local address of the process that serves it; the rack
adds a route per component pod (cdctl.sim.rack.launch). Called by cdctl.sim.apiserver.handlers.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from cdctl.sim.apiserver.errors import BadRequest, ServiceUnavailable
from cdctl.sim.apiserver.store import ObjectStore

HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "TE", "Trailer",
        "Transfer-Encoding", "Upgrade", "Authorization", "Host", "Content-Length",
    )
)  # fmt: skip
PASSED_BACK = ("Content-Type", "WWW-Authenticate", "Retry-After")


@dataclass
class PodNetwork:
    """Where each pod (IP, port) is served on this machine: the simulated cluster network."""

    routes: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)

    def route(self, pod_ip: str, port: int, host: str, local_port: int) -> None:
        self.routes[(pod_ip, port)] = (host, local_port)

    def unroute(self, pod_ip: str, port: int) -> None:
        self.routes.pop((pod_ip, port), None)

    def resolve(self, pod_ip: str, port: int) -> tuple[str, int] | None:
        return self.routes.get((pod_ip, port))


def split_name_port(value: str) -> tuple[str, str]:
    """`name`, `name:port` or `scheme:name:port` as (name, port); the scheme must be http."""
    parts = value.split(":")
    if len(parts) == 3:
        if parts[0] not in ("", "http"):
            raise BadRequest(f"invalid request: scheme {parts[0]!r} is not served by the simulated proxy")
        parts = parts[1:]
    if len(parts) > 2 or not parts[0]:
        raise BadRequest(f"invalid resource name {value!r}")
    return parts[0], parts[1] if len(parts) == 2 else ""


def _proxyable(pod_ip: str) -> bool:
    try:
        address = ipaddress.ip_address(pod_ip)
    except ValueError:
        return False
    return not (address.is_loopback or address.is_link_local or address.is_unspecified)


class PodProxy:
    """Forwards proxy requests; one client session, closed with the server."""

    def __init__(self, store: ObjectStore, network: PodNetwork) -> None:
        self.store = store
        self.network = network
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _target(self, namespace: str, name_port: str) -> tuple[str, int]:
        name, port = split_name_port(name_port)
        pod = self.store.peek(self.store.type_of("", "pods"), namespace, name)
        if not port:
            for container in (pod.get("spec") or {}).get("containers") or []:
                ports = container.get("ports") or []
                if ports:
                    port = str(ports[0].get("containerPort", ""))
                    break
        pod_ip = str((pod.get("status") or {}).get("podIP") or "")
        if not _proxyable(pod_ip):
            raise BadRequest("address not allowed")
        if not port.isdigit():
            raise ServiceUnavailable(f"error trying to reach service: dial tcp {pod_ip}:{port}: unknown port")
        return pod_ip, int(port)

    async def forward(
        self, request: web.Request, namespace: str, name_port: str, path: str
    ) -> web.StreamResponse:
        pod_ip, port = self._target(namespace, name_port)
        dialed = f"dial tcp {pod_ip}:{port}"
        local = self.network.resolve(pod_ip, port)
        if local is None:
            raise ServiceUnavailable(f"error trying to reach service: {dialed}: connect: no route to host")
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, connect=5))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        url = f"http://{local[0]}:{local[1]}/{path}"
        try:
            upstream = await self._session.request(
                request.method, url, params=list(request.query.items()), headers=headers,
                data=await request.read() if request.can_read_body else None, allow_redirects=False,
            )  # fmt: skip
        except (aiohttp.ClientConnectionError, OSError) as error:
            reason = "connection refused" if isinstance(error, aiohttp.ClientConnectorError) else str(error)
            raise ServiceUnavailable(f"error trying to reach service: {dialed}: connect: {reason}") from None
        async with upstream:
            answer = web.StreamResponse(
                status=upstream.status,
                headers={h: upstream.headers[h] for h in PASSED_BACK if h in upstream.headers},
            )
            await answer.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await answer.write(chunk)
                await answer.write_eof()
            except (aiohttp.ClientError, OSError):
                pass  # the pod went away, or the caller hung up, mid-answer: the other side sees it end
            return answer
