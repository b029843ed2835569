"""A minimal in-test API server for one resource collection: list, watch from a resourceVersion, 410, faults.

Only what the informer tests need; the full simulated cluster lives in cdctl.sim. Faults are switched on by
the test: `compact()` makes older resourceVersions answer 410, `drop_watches()` cuts every open watch
mid-stream, `stall_watches` keeps new watch connections open but silent.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from aiohttp import web

PATH = "/api/v1/namespaces/default/configmaps"


class FakeCollection:
    def __init__(self) -> None:
        self.rv = 0
        self.objects: dict[str, dict[str, Any]] = {}
        self.history: list[tuple[int, str, dict[str, Any]]] = []
        self.compacted_below = 0
        self.stall_watches = False
        self.inject_error_event = False
        self.watch_requests: list[dict[str, str]] = []
        self.list_requests = 0
        self.failing_lists = 0
        self.end_watches_at_once = False
        self._changed = asyncio.Condition()
        self._responses: set[web.StreamResponse] = set()

    async def _record(self, kind: str, obj: dict[str, Any]) -> None:
        self.history.append((self.rv, kind, json.loads(json.dumps(obj))))
        async with self._changed:
            self._changed.notify_all()

    async def put(self, name: str, data: str) -> dict[str, Any]:
        self.rv += 1
        existing = self.objects.get(name)
        meta = {"name": name, "namespace": "default", "resourceVersion": str(self.rv)}
        meta["uid"] = existing["metadata"]["uid"] if existing else str(uuid.uuid4())
        obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"v": data}}
        self.objects[name] = obj
        await self._record("MODIFIED" if existing else "ADDED", obj)
        return obj

    async def delete(self, name: str) -> None:
        self.rv += 1
        obj = self.objects.pop(name)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        await self._record("DELETED", obj)

    async def open_watches(self, count: int) -> None:
        """Wait until `count` watch connections have been opened in total."""
        async with self._changed:
            await self._changed.wait_for(lambda: len(self.watch_requests) >= count)

    def compact(self) -> None:
        self.compacted_below = self.rv + 1

    def drop_watches(self) -> None:
        for response in list(self._responses):
            transport = response._req.transport if response._req else None
            if transport is not None:
                transport.abort()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") not in ("true", "True", "1"):
            self.list_requests += 1
            if self.failing_lists > 0:
                self.failing_lists -= 1
                return web.json_response(
                    {"kind": "Status", "code": 500, "reason": "InternalError"}, status=500
                )
            return web.json_response(
                {
                    "kind": "ConfigMapList",
                    "metadata": {"resourceVersion": str(self.rv)},
                    "items": list(self.objects.values()),
                }
            )
        self.watch_requests.append(dict(request.query))
        async with self._changed:
            self._changed.notify_all()
        since = int(request.query.get("resourceVersion", "0") or 0)
        response = web.StreamResponse()
        await response.prepare(request)
        self._responses.add(response)
        try:
            if since < self.compacted_below or self.inject_error_event:
                self.inject_error_event = False
                status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
                await response.write(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
                return response
            if self.stall_watches:
                await asyncio.sleep(3600)
            if self.end_watches_at_once:
                return response
            sent = [since]
            while True:
                for rv, kind, obj in self.history:
                    if rv > sent[0]:
                        await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
                        sent[0] = rv
                async with self._changed:
                    await self._changed.wait_for(lambda: self.rv > sent[0])
        finally:
            self._responses.discard(response)


async def start(collection: FakeCollection) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_get(PATH, collection.handle)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"
