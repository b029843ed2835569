"""List-then-watch loop for one resource type that yields each change exactly once, as an `Observation`.

The client library's own watch retries a 410 once with the same stale resourceVersion and has no stall
detection (docs/architecture.md section 6), so this loop owns the protocol:

* list, then emit the difference between the listing and what was emitted before (a first list emits every
  object as ADDED; a re-list emits only what changed meanwhile, including DELETED for what vanished), then a
  `Synced` marker;
* watch from the list's resourceVersion with a server-side timeout; a clean end re-watches from the last
  resourceVersion seen (bookmarks included);
* a `410 Gone`, an ERROR event, a dropped connection or a stream silent for longer than `stall_timeout_s`
  leads to a re-list, after a jittered backoff when the cause was an error.

Every emitted observation carries (uid, resourceVersion); an event whose resourceVersion for that uid was
already emitted is dropped here, so consumers see no duplicates, and the event log deduplicates again on the
same key. An optional `transform` (as client-go's SetTransform) is applied to every object before it is kept
and emitted, so that what a consumer never reads (managedFields, a pod's containers) is not held in memory.
Used by the controller (cdctl.controller.manager) and any other component that follows objects. Each watch
event received is a log line at verbosity 4 (cdctl.api.verbosity).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import structlog

from cdctl.api.verbosity import V_WATCH, enabled
from cdctl.k8s.errors import GoneError, KubeApiError
from cdctl.k8s.resources import ResourceType
from cdctl.k8s.rest import JsonObject, KubeApi

log = structlog.get_logger(__name__)


class Change(StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


@dataclass(frozen=True)
class Observation:
    """One change of one object as the API server reported it (for DELETED: the last state we knew)."""

    resource: ResourceType
    change: Change
    obj: JsonObject = field(repr=False)

    @property
    def metadata(self) -> dict[str, Any]:
        meta = self.obj.get("metadata", {})
        return meta if isinstance(meta, dict) else {}

    @property
    def uid(self) -> str:
        return str(self.metadata.get("uid", ""))

    @property
    def resource_version(self) -> str:
        return str(self.metadata.get("resourceVersion", ""))

    @property
    def namespace(self) -> str | None:
        namespace = self.metadata.get("namespace")
        return str(namespace) if namespace else None

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @property
    def labels(self) -> dict[str, str]:
        labels = self.metadata.get("labels") or {}
        return {str(key): str(value) for key, value in labels.items()}


@dataclass(frozen=True)
class Synced:
    """The informer's view equals a complete listing as of `resource_version` (after every list)."""

    resource: ResourceType
    resource_version: str


def _last_state(previous: JsonObject, deleted: JsonObject) -> JsonObject:
    """What a DELETED observation reports: the object as we knew it (a watch with a label selector reports an
    object that stopped matching in its new, non-matching state), at the deletion's resourceVersion."""
    last = dict(previous)
    last["metadata"] = {
        **previous.get("metadata", {}),
        **{
            key: value
            for key, value in deleted.get("metadata", {}).items()
            if key in ("resourceVersion", "deletionTimestamp")
        },
    }
    return last


def _rv_number(resource_version: str) -> int | None:
    return int(resource_version) if resource_version.isdigit() else None


def is_stale(known_rv: str, incoming_rv: str) -> bool:
    """True when `incoming_rv` is the version already emitted, or provably older (both numeric)."""
    if known_rv == incoming_rv:
        return True
    known, incoming = _rv_number(known_rv), _rv_number(incoming_rv)
    return known is not None and incoming is not None and incoming < known


class Informer:
    """Follows one resource type (optionally one namespace, label and field selector)."""

    def __init__(
        self,
        api: KubeApi,
        resource: ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        watch_timeout_s: int = 300,
        stall_timeout_s: float | None = None,
        min_backoff_s: float = 0.1,
        max_backoff_s: float = 10.0,
        transform: Callable[[JsonObject], JsonObject] | None = None,
    ) -> None:
        self.api = api
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.watch_timeout_s = watch_timeout_s
        self.stall_timeout_s = stall_timeout_s if stall_timeout_s is not None else watch_timeout_s + 30.0
        self.min_backoff_s = min_backoff_s
        self.max_backoff_s = max_backoff_s
        self.transform = transform
        self.relists = 0
        self._known: dict[str, JsonObject] = {}
        self._failures = 0

    def known(self) -> list[JsonObject]:
        """The last emitted state of every object that currently exists, as far as this informer knows."""
        return list(self._known.values())

    async def observe(self) -> AsyncIterator[Observation | Synced]:
        """Yield observations forever (until cancelled)."""
        resource_version: str | None = None
        path = self.resource.collection_path(self.namespace)
        while True:
            if resource_version is None:
                try:
                    listing = await self.api.list_objects(path, **self._selectors())
                except KubeApiError as exc:
                    await self._back_off("list failed", exc)
                    continue
                self.relists += 1
                for observation in self._diff(listing.get("items") or []):
                    yield observation
                resource_version = str(listing.get("metadata", {}).get("resourceVersion", ""))
                yield Synced(self.resource, resource_version)
            received = False
            try:
                async for item in self._watch(path, resource_version):
                    received = True
                    if isinstance(item, str):
                        resource_version = item
                    else:
                        resource_version = item.resource_version or resource_version
                        yield item
                if received:
                    self._failures = 0
                else:  # a server that ends every watch at once must not make this a busy loop
                    await self._back_off("watch ended without events", TimeoutError("empty watch"))
            except GoneError:
                log.info("watch expired; re-listing", resource=self.resource.plural)
                resource_version = None
            except (KubeApiError, TimeoutError) as exc:
                resource_version = None
                await self._back_off("watch failed", exc)

    async def _watch(self, path: str, resource_version: str) -> AsyncIterator[Observation | str]:
        """One watch connection; yields observations and bare resourceVersions (bookmarks, duplicates)."""
        query: dict[str, str | int | bool] = {
            "watch": True,
            "resourceVersion": resource_version,
            "allowWatchBookmarks": True,
            "timeoutSeconds": self.watch_timeout_s,
            **self._selectors(),
        }
        async with self.api.stream(path, query) as lines:
            while True:
                try:
                    async with asyncio.timeout(self.stall_timeout_s):
                        event = await anext(lines)
                except StopAsyncIteration:
                    return
                kind, obj = str(event.get("type", "")), event.get("object") or {}
                if enabled(V_WATCH):
                    self._log_event(kind, obj)
                if kind == "ERROR":
                    code = int(obj.get("code", 0) or 0)
                    if code == 410:
                        raise GoneError(410, str(obj.get("reason", "Expired")), str(obj.get("message", "")))
                    raise KubeApiError(code, str(obj.get("reason", "")), str(obj.get("message", "")))
                rv = str(obj.get("metadata", {}).get("resourceVersion", ""))
                if kind == "BOOKMARK":
                    yield rv
                    continue
                observation = self._apply(kind, obj)
                yield observation if observation is not None else rv

    def _log_event(self, kind: str, obj: JsonObject) -> None:
        meta = obj.get("metadata") or {}
        log.info(
            "watch event", type=kind, resource=self.resource.plural, namespace=meta.get("namespace"),
            name=meta.get("name"), resource_version=meta.get("resourceVersion"), v=V_WATCH,
        )  # fmt: skip

    def _apply(self, kind: str, obj: JsonObject) -> Observation | None:
        meta = obj.get("metadata", {})
        uid, rv = str(meta.get("uid", "")), str(meta.get("resourceVersion", ""))
        previous = self._known.get(uid)
        if kind == "DELETED":
            if previous is None:
                return None
            del self._known[uid]
            return Observation(self.resource, Change.DELETED, _last_state(previous, obj))
        if previous is not None and is_stale(str(previous["metadata"].get("resourceVersion", "")), rv):
            return None
        if self.transform is not None:
            obj = self.transform(obj)
        self._known[uid] = obj
        return Observation(self.resource, Change.ADDED if previous is None else Change.MODIFIED, obj)

    def _diff(self, items: list[JsonObject]) -> list[Observation]:
        observations: list[Observation] = []
        listed: set[str] = set()
        for obj in items:
            obj.setdefault("apiVersion", self.resource.api_version)
            obj.setdefault("kind", self.resource.kind)
            listed.add(str(obj.get("metadata", {}).get("uid", "")))
            observation = self._apply("MODIFIED", obj)
            if observation is not None:
                observations.append(observation)
        for uid in [uid for uid in self._known if uid not in listed]:
            observations.append(Observation(self.resource, Change.DELETED, self._known.pop(uid)))
        return observations

    def _selectors(self) -> dict[str, str]:
        selectors = {}
        if self.label_selector:
            selectors["labelSelector"] = self.label_selector
        if self.field_selector:
            selectors["fieldSelector"] = self.field_selector
        return selectors

    async def _back_off(self, what: str, exc: BaseException) -> None:
        self._failures += 1
        ceiling = min(self.max_backoff_s, self.min_backoff_s * 2 ** min(self._failures - 1, 16))
        delay = random.uniform(ceiling / 2, ceiling)
        log.warning(
            what, resource=self.resource.plural, error=str(exc) or repr(exc), retry_in_s=round(delay, 3)
        )
        await asyncio.sleep(delay)
