"""Kubernetes Events (core/v1) about an object, for failures a user must act on.

`EventRecorder.warn(obj, reason, message)` creates an Event in the object's namespace; the same (object,
reason, message) is posted at most once per `repeat_after_s`, so a reconcile retried every few seconds does
not flood the namespace. Posting is best effort: a failure is logged and reported (POSTED, SUPPRESSED or
FAILED), never raised. Used by the controller.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import structlog

from cdctl.k8s.errors import KubeApiError
from cdctl.k8s.resources import EVENTS
from cdctl.k8s.rest import KubeApi

log = structlog.get_logger(__name__)
POSTED = "posted"
SUPPRESSED = "suppressed"
FAILED = "failed"


class EventRecorder:
    def __init__(self, api: KubeApi, component: str, instance: str, *, repeat_after_s: float = 600.0) -> None:
        self.api = api
        self.component = component
        self.instance = instance
        self.repeat_after_s = repeat_after_s
        self._posted: dict[tuple[str, str, str], float] = {}

    async def warn(self, obj: dict[str, Any], reason: str, message: str) -> str:
        return await self.post(obj, "Warning", reason, message)

    async def normal(self, obj: dict[str, Any], reason: str, message: str) -> str:
        return await self.post(obj, "Normal", reason, message)

    async def post(self, obj: dict[str, Any], event_type: str, reason: str, message: str) -> str:
        """Post one Event: POSTED, SUPPRESSED (a repeat) or FAILED (the API refused it)."""
        meta = obj.get("metadata", {})
        key = (str(meta.get("uid", "")), reason, message)
        now = time.monotonic()
        last = self._posted.get(key)
        if last is not None and now - last < self.repeat_after_s:
            return SUPPRESSED
        if len(self._posted) > 10_000:  # forget what can no longer suppress anything
            self._posted = {k: t for k, t in self._posted.items() if now - t < self.repeat_after_s}
        self._posted[key] = now
        namespace = str(meta.get("namespace") or "default")
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name', 'object')}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion", ""),
                "kind": obj.get("kind", ""),
                "name": meta.get("name", ""),
                "namespace": meta.get("namespace", ""),
                "uid": meta.get("uid", ""),
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "reason": reason,
            "message": message[:1024],
            "type": event_type,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
        }
        try:
            await self.api.create(EVENTS.collection_path(namespace), body)
        except KubeApiError as exc:
            log.warning("could not post event", reason=reason, error=str(exc))
            return FAILED
        return POSTED
