"""Kubernetes Events (core/v1) about an object, aggregated as client-go's event recorder does.

`EventRecorder.warn(obj, reason, message)` (or `normal`) creates an Event in the object's namespace. A repeat
(the same object, type, reason and message: client-go's event key, kept in an LRU of 4096 like its
EventCorrelator) does not create a second Event: it bumps the first one's `count` and `lastTimestamp` with a
merge PATCH, as client-go's eventObserve does, so `kubectl describe` shows "(x12 over 6m)". Unlike client-go,
which patches on every repeat and drops repeats past its spam filter, every repeat is counted here but the
count is written at most once per `patch_every_s`: a reconcile retried every few seconds costs one write per
interval and the count stays exact (written at the next repeat after the interval). An Event that expired
(the API server keeps them about an hour) is created again with the running count, as client-go does.
Posting is best effort: a failure is logged and reported (POSTED, AGGREGATED, SUPPRESSED: counted but not
written yet, or FAILED), never raised. Used by the controller (cdctl.controller.actions, rackdomains) and
for the kubelet plugin's Node Events (cdctl.k8s.plugincluster, with `host`, the node, as client-go's
source.host).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from cdctl.k8s.errors import KubeApiError, NotFoundError
from cdctl.k8s.resources import EVENTS
from cdctl.k8s.rest import KubeApi

log = structlog.get_logger(__name__)
POSTED = "posted"
AGGREGATED = "aggregated"
SUPPRESSED = "suppressed"
FAILED = "failed"
CACHE_ENTRIES = 4096  # client-go's maxLruCacheEntries
PATCH_EVERY_S = 10.0  # the shortest wait between two writes of one Event's count


@dataclass(slots=True)
class _Seen:
    """One Event as posted: its name, how often it happened, when first, and when its count was written."""

    name: str
    namespace: str
    first_timestamp: str
    count: int
    written_at: float


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    def __init__(
        self,
        api: KubeApi,
        component: str,
        instance: str,
        *,
        host: str = "",
        patch_every_s: float | None = None,
    ) -> None:
        self.api = api
        self.component = component
        self.instance = instance
        self.source = {"component": component, "host": host} if host else {"component": component}
        self.patch_every_s = PATCH_EVERY_S if patch_every_s is None else patch_every_s
        self._seen: OrderedDict[tuple[str, str, str, str], _Seen] = OrderedDict()

    async def warn(self, obj: dict[str, Any], reason: str, message: str) -> str:
        return await self.post(obj, "Warning", reason, message)

    async def normal(self, obj: dict[str, Any], reason: str, message: str) -> str:
        return await self.post(obj, "Normal", reason, message)

    async def post(self, obj: dict[str, Any], event_type: str, reason: str, message: str) -> str:
        """Post one occurrence: POSTED (a new Event), AGGREGATED (the count written), SUPPRESSED (counted, to
        be written with a later repeat) or FAILED (the API refused it)."""
        meta = obj.get("metadata", {})
        message = message[:1024]
        key = (str(meta.get("uid", "")), event_type, reason, message)
        now = time.monotonic()
        seen = self._seen.get(key)
        if seen is not None:
            self._seen.move_to_end(key)
            seen.count += 1
            if now - seen.written_at < self.patch_every_s:
                return SUPPRESSED
            return await self._bump(obj, event_type, reason, message, seen, now)
        namespace = str(meta.get("namespace") or "default")
        stamp = _stamp()
        seen = _Seen("", namespace, stamp, 1, now)
        created = await self._create(obj, event_type, reason, message, seen, stamp)
        if created is None:
            return FAILED
        self._seen[key] = seen
        if len(self._seen) > CACHE_ENTRIES:
            self._seen.popitem(last=False)
        return POSTED

    async def _bump(
        self, obj: dict[str, Any], event_type: str, reason: str, message: str, seen: _Seen, now: float
    ) -> str:
        stamp = _stamp()
        seen.written_at = now
        try:
            await self.api.merge_patch(
                EVENTS.object_path(seen.namespace, seen.name),
                {"count": seen.count, "lastTimestamp": stamp, "message": message},
            )
        except NotFoundError:  # expired: a new Event that carries the running count (client-go does the same)
            created = await self._create(obj, event_type, reason, message, seen, stamp)
            return POSTED if created is not None else FAILED
        except KubeApiError as exc:
            log.warning("could not update event", reason=reason, error=str(exc))
            return FAILED
        return AGGREGATED

    async def _create(
        self, obj: dict[str, Any], event_type: str, reason: str, message: str, seen: _Seen, stamp: str
    ) -> dict[str, Any] | None:
        meta = obj.get("metadata", {})
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name', 'object')}.", "namespace": seen.namespace},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion", ""),
                "kind": obj.get("kind", ""),
                "name": meta.get("name", ""),
                "namespace": meta.get("namespace", ""),
                "uid": meta.get("uid", ""),
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "reason": reason,
            "message": message,
            "type": event_type,
            "count": seen.count,
            "firstTimestamp": seen.first_timestamp,
            "lastTimestamp": stamp,
            "source": self.source,
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
        }
        try:
            created = await self.api.create(EVENTS.collection_path(seen.namespace), body)
        except KubeApiError as exc:
            log.warning("could not post event", reason=reason, error=str(exc))
            return None
        seen.name = str(created.get("metadata", {}).get("name", ""))
        return created
