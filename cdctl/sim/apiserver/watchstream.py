"""The HTTP side of watch: streams ADDED/MODIFIED/DELETED/BOOKMARK lines as the API server does.

Called by cdctl.sim.apiserver.handlers for `?watch=true` (any case). Without a resourceVersion (or with "0")
the current objects come first as ADDED; with one, the retained history after it is replayed, or an ERROR
event carrying a 410 Expired Status is sent when it is older than the window. `timeoutSeconds` ends the stream
(with a final bookmark when bookmarks are allowed), and so do `ApiServer.drop_watches()` and restarts.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from aiohttp import web

from cdctl.asynctasks import wait_at_most
from cdctl.sim.apiserver.conversion import convert
from cdctl.sim.apiserver.errors import BadRequest, Gone
from cdctl.sim.apiserver.queryparams import is_true, non_negative_int
from cdctl.sim.apiserver.resources import ResourceType
from cdctl.sim.apiserver.selectors import ObjectFilter
from cdctl.sim.apiserver.settings import ServerSettings
from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.apiserver.watch import Watcher, WatchEvent


def _line(event_type: str, obj: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": event_type, "object": obj}) + b"\n"


def _bookmark(resource_type: ResourceType, resource_version: str) -> bytes:
    return _line(
        "BOOKMARK",
        {
            "kind": resource_type.kind,
            "apiVersion": resource_type.api_version,
            "metadata": {"resourceVersion": resource_version},
        },
    )


def _since(raw: str | None) -> int | None:
    if raw in (None, "", "0"):
        return None
    try:
        return int(str(raw))
    except ValueError as error:
        raise BadRequest(f"invalid resourceVersion {raw!r}") from error


async def serve_watch(
    request: web.Request,
    store: ObjectStore,
    resource_type: ResourceType,
    namespace: str | None,
    matches: ObjectFilter,
    settings: ServerSettings,
) -> web.StreamResponse:
    storage = store.type_of(resource_type.group, resource_type.plural)
    since = _since(request.query.get("resourceVersion"))
    requested = non_negative_int(request.query.get("timeoutSeconds"), "timeoutSeconds")
    timeout = float(requested) if requested else settings.default_watch_timeout_s
    bookmarks = is_true(request.query.get("allowWatchBookmarks"))

    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    await response.prepare(request)

    initial: list[dict[str, Any]] = []
    try:
        if since is None:
            initial, _ = store.list_objects(storage, namespace, matches)
            watcher = store.watch(storage, namespace, matches, since=None)
        else:
            watcher = store.watch(storage, namespace, matches, since=since)
    except Gone as gone:
        await response.write(_line("ERROR", gone.status_body()))
        await response.write_eof()
        return response

    try:
        for obj in initial:
            await response.write(_line("ADDED", convert(obj, storage, resource_type)))
        await _pump(request, response, watcher, store, storage, resource_type, timeout, bookmarks, settings)
        await response.write_eof()
    except ConnectionResetError:
        pass  # the client went away
    finally:
        store.hub.release(watcher)
    return response


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def _pump(
    request: web.Request,
    response: web.StreamResponse,
    watcher: Watcher,
    store: ObjectStore,
    storage: ResourceType,
    resource_type: ResourceType,
    duration_s: float,
    bookmarks: bool,
    settings: ServerSettings,
) -> None:
    deadline = time.monotonic() + duration_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            if bookmarks:
                await response.write(_bookmark(resource_type, store.resource_version))
            return
        interval = settings.bookmark_interval_s if bookmarks else settings.disconnect_check_s
        try:
            event = await wait_at_most(watcher.next(), min(remaining, interval))
        except TimeoutError:
            if _client_gone(request):
                return
            if bookmarks and time.monotonic() < deadline:
                await response.write(_bookmark(resource_type, store.resource_version))
            continue
        # Everything queued goes out in one write: one event per pass of a busy event loop was a trickle
        # (a burst of 144 node labels reached the controller over ten seconds).
        lines = []
        while event is not None:
            lines.append(_encoded(event, storage, resource_type))
            if watcher.queue.empty():
                break
            event = watcher.queue.get_nowait()
        if lines:
            await response.write(b"".join(lines))
        if event is None:
            return


def _encoded(event: WatchEvent, storage: ResourceType, resource_type: ResourceType) -> bytes:
    """The event's watch line in `resource_type`'s version, made once per event for all watches of it."""
    key = (event.type, resource_type.api_version)
    cache = event.encoded if event.encoded is not None else {}
    line = cache.get(key)
    if line is None:
        line = cache[key] = _line(event.type, convert(event.obj, storage, resource_type))
    return line
