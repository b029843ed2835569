"""API writes made on behalf of a ComputeDomain, each one an intention and an outcome in its event stream.

Every write first records `DomainActionIntended` (durable before the call), then performs it, then records
`DomainActionSucceeded` or `DomainActionFailed`; a success in one append with the object the API returned,
fed back through the journal so the view reflects the write at once (as deleted, when the write removed the
last finalizer of an object being deleted: teardown need not wait for the watch to see it go). A create
whose name is taken succeeded only if the object found is the domain's; otherwise it is recorded as failed,
with who holds the name. API errors are mapped to the typed errors the work queue understands: conflicts
and server or transport failures are retriable, invalid or forbidden requests are permanent. A failure is
logged as a warning (inside the reconcile, so the line names the domain); a success at debug verbosity, and
in the reconcile's `WRITES` list, which the reconciler logs as one line (a line per write cost as much CPU as
the write; the event log records each one anyway). Used by every reconciler module of this package.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any

import structlog

from cdctl.api.verbosity import V_DECISION
from cdctl.controller.journal import Journal
from cdctl.controller.observations import PATCHED_FINALIZERS
from cdctl.domain.computedomains import (
    LABEL_COMPUTE_DOMAIN,
    DomainActionFailed,
    DomainActionIntended,
    DomainActionSucceeded,
    DomainObjectObserved,
)
from cdctl.domain.errors import PermanentError, RetriableError
from cdctl.domain.events import DomainEvent
from cdctl.k8s.errors import AlreadyExistsError, ConflictError, KubeApiError, NotFoundError
from cdctl.k8s.informer import Change
from cdctl.k8s.kube_events import AGGREGATED, POSTED, SUPPRESSED, EventRecorder
from cdctl.k8s.resources import ResourceType
from cdctl.k8s.rest import KubeApi

log = structlog.get_logger(__name__)
JsonObject = dict[str, Any]
# The writes of the reconcile running in this task, for its one log line (None outside a reconcile).
WRITES: ContextVar[list[str] | None] = ContextVar("cdctl_controller_writes", default=None)
# Inside `Actions.pipelined()`: a write's outcome is not waited for; the next intention, recorded behind it
# in the same append, or the block's end, waits for both.
_PIPELINED: ContextVar[bool] = ContextVar("cdctl_controller_pipelined", default=False)


def written_change(obj: JsonObject) -> Change:
    """What a write's answer tells of the object: DELETED when it is being deleted and has no finalizer left
    (the API server removes it in the same write), else MODIFIED."""
    meta = obj.get("metadata") or {}
    return Change.DELETED if meta.get("deletionTimestamp") and not meta.get("finalizers") else Change.MODIFIED


def labelled_for(uid: str) -> Callable[[JsonObject], bool]:
    """Whether an object carries the domain's label: the default test that a found object is the domain's."""
    return lambda obj: ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_COMPUTE_DOMAIN) == uid


def typed(exc: KubeApiError, what: str) -> RetriableError | PermanentError:
    if exc.retriable:
        return RetriableError(f"{what}: {exc}", delay=0.0)
    return PermanentError(f"{what}: {exc}")


class Actions:
    def __init__(self, api: KubeApi, journal: Journal, recorder: EventRecorder) -> None:
        self.api = api
        self.journal = journal
        self.recorder = recorder

    @asynccontextmanager
    async def pipelined(self) -> AsyncIterator[None]:
        """Writes made one after another, with no read of the view between them (a teardown step): each
        write's outcome shares an append with the next write's intention (one commit per write, not two),
        and the view has every outcome when the block ends without error. Each intention is still durable
        before its write."""
        token = _PIPELINED.set(True)
        try:
            yield
        finally:
            _PIPELINED.reset(token)
        # Only when the writes went through: a failed or cancelled reconcile reads the view no more (and at
        # shutdown the journal that would resolve the flush is stopping too).
        await self.journal.flush()

    async def record(self, uid: str, events: list[DomainEvent]) -> None:
        """Record events of the domain, in order behind a pipelined write's outcome."""
        if _PIPELINED.get():
            await self.journal.record_queued(uid, events)
        else:
            await self.journal.record(uid, events)

    async def forget(self, uid: str, known: DomainObjectObserved) -> None:
        """Record that an object the view holds for the domain is gone or no longer carries its label, where
        no watch follows that kind in the current mode to say so (a domain made before a switch of mode)."""
        await self.record(uid, [dataclasses.replace(known, change=str(Change.DELETED))])

    async def _intend(self, uid: str, action: str, resource: ResourceType, namespace: str, name: str) -> None:
        await self.record(uid, [DomainActionIntended(uid, action, resource.kind, namespace, name)])

    def _success(
        self, uid: str, action: str, resource: ResourceType, namespace: str, name: str, detail: str = ""
    ) -> DomainActionSucceeded:
        target = f"{namespace}/{name}" if namespace else name
        log.info(action, kind=resource.kind, object=target, detail=detail, v=V_DECISION)
        writes = WRITES.get()
        if writes is not None:
            writes.append(f"{action} {resource.kind} {target}{f' ({detail})' if detail else ''}")
        return DomainActionSucceeded(uid, action, resource.kind, namespace, name, detail)

    async def _succeeded(
        self, uid: str, action: str, resource: ResourceType, namespace: str, name: str, detail: str = ""
    ) -> None:
        """Record a success that returned no object to ingest."""
        await self.record(uid, [self._success(uid, action, resource, namespace, name, detail)])

    async def _succeeded_with(
        self,
        uid: str,
        action: str,
        resource: ResourceType,
        namespace: str,
        name: str,
        answer: JsonObject,
        change: Change,
    ) -> None:
        """Record a success and the object the API answered with, in one append."""
        outcome = self._success(uid, action, resource, namespace, name)
        await self.journal.observe_written(
            resource, answer, change, (uid, outcome), wait=not _PIPELINED.get()
        )

    async def _failed(
        self, uid: str, action: str, resource: ResourceType, namespace: str, name: str, exc: KubeApiError
    ) -> None:
        await self.refused(uid, action, resource, namespace, name, str(exc), exc.retriable)

    async def refused(
        self,
        uid: str,
        action: str,
        resource: ResourceType,
        namespace: str,
        name: str,
        error: str,
        retriable: bool,
    ) -> None:
        """Record (and log as a warning) an action that did not do what it meant, with the reason."""
        target = f"{namespace}/{name}" if namespace else name
        log.warning(f"{action} failed", kind=resource.kind, object=target, error=error)
        await self.record(
            uid, [DomainActionFailed(uid, action, resource.kind, namespace, name, error, retriable)]
        )

    async def warn(self, uid: str, obj: JsonObject, reason: str, message: str) -> None:
        """Tell the user on the object (a Warning Event); recorded as an action when a new Event was posted
        (or could not be), not for a repeat that only bumped its count."""
        outcome = await self.recorder.warn(obj, reason, message)
        if outcome in (SUPPRESSED, AGGREGATED):
            return
        meta = obj.get("metadata", {})
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        event: DomainEvent = (
            DomainActionSucceeded(uid, "warn", "Event", namespace, name, f"{reason}: {message}")
            if outcome == POSTED
            else DomainActionFailed(uid, "warn", "Event", namespace, name, f"{reason}: {message}", True)
        )
        await self.journal.record(uid, [event])

    async def get(self, resource: ResourceType, namespace: str | None, name: str) -> JsonObject | None:
        try:
            return await self.api.get_or_none(resource.object_path(namespace, name))
        except KubeApiError as exc:
            raise typed(exc, f"get {resource.kind} {namespace}/{name}") from exc

    async def create(
        self,
        uid: str,
        resource: ResourceType,
        body: JsonObject,
        ours: Callable[[JsonObject], bool] | None = None,
    ) -> JsonObject | None:
        """Create `body`, and say whether that did what was meant.

        When the name is taken, the object found is read: if it is this domain's (`ours(found)`; by default,
        it carries the domain's label), the create is a success ("already exists"), the object is ingested and
        returned; if not, the create failed (the name is someone else's: a warning, DomainActionFailed with
        who holds it) and None is returned for the caller to act on (a conflict to report, a status to set).
        """
        namespace, name = str(body["metadata"].get("namespace", "")), str(body["metadata"]["name"])
        await self._intend(uid, "create", resource, namespace, name)
        try:
            created = await self.api.create(resource.collection_path(namespace or None), body)
        except AlreadyExistsError:
            return await self._taken(uid, resource, namespace, name, ours or labelled_for(uid))
        except KubeApiError as exc:
            await self._failed(uid, "create", resource, namespace, name, exc)
            raise typed(exc, f"create {resource.kind} {namespace}/{name}") from exc
        await self._succeeded_with(uid, "create", resource, namespace, name, created, Change.ADDED)
        return created

    async def _taken(
        self, uid: str, resource: ResourceType, namespace: str, name: str, ours: Callable[[JsonObject], bool]
    ) -> JsonObject | None:
        """The outcome of a create whose name was taken: whose object holds it decides."""
        try:
            found = await self.api.get_or_none(resource.object_path(namespace or None, name))
        except KubeApiError as exc:
            await self._failed(uid, "create", resource, namespace, name, exc)
            raise typed(exc, f"get {resource.kind} {namespace}/{name}") from exc
        if found is None:
            await self.refused(
                uid, "create", resource, namespace, name, "already exists, then vanished", True
            )
            raise RetriableError(f"{resource.kind} {namespace}/{name} vanished during create", delay=0.0)
        if ours(found):
            outcome = self._success(uid, "create", resource, namespace, name, "already exists")
            await self.journal.observe_written(
                resource, found, Change.MODIFIED, (uid, outcome), wait=not _PIPELINED.get()
            )
            return found
        meta = found.get("metadata") or {}
        holder = (meta.get("labels") or {}).get(LABEL_COMPUTE_DOMAIN)
        whose = f"ComputeDomain {holder}'s" if holder and holder != uid else "not this ComputeDomain's"
        if holder == uid:
            whose = "labelled for this ComputeDomain but not what it would create"
        reason = f"already exists and is {whose} (uid {meta.get('uid', '?')})"
        await self.refused(uid, "create", resource, namespace, name, reason, True)
        return None

    async def replace(
        self, uid: str, action: str, resource: ResourceType, body: JsonObject, subresource: str | None = None
    ) -> JsonObject | None:
        """PUT `body` (its resourceVersion guards against lost updates); None when the object is gone."""
        namespace, name = body["metadata"].get("namespace"), str(body["metadata"]["name"])
        path = resource.object_path(namespace, name, subresource)
        return await self._modify(
            uid, action, resource, namespace, name, lambda: self.api.replace(path, body)
        )

    async def merge_patch(
        self,
        uid: str,
        action: str,
        resource: ResourceType,
        namespace: str | None,
        name: str,
        patch: JsonObject,
    ) -> JsonObject | None:
        """Merge-patch one object (a resourceVersion in `patch` guards against lost updates, as `replace`
        does); None when the object is gone."""
        path = resource.object_path(namespace, name)
        return await self._modify(
            uid, action, resource, namespace, name, lambda: self.api.merge_patch(path, patch)
        )

    async def _modify(
        self,
        uid: str,
        action: str,
        resource: ResourceType,
        namespace: str | None,
        name: str,
        write: Callable[[], Awaitable[JsonObject]],
    ) -> JsonObject | None:
        """Record the intention, make the `write`, record its outcome with the object it returned (one
        append): a conflict is retried at once, a gone object is a success with detail "gone" (None), other
        errors are typed."""
        await self._intend(uid, action, resource, namespace or "", name)
        try:
            written = await write()
        except NotFoundError:
            await self._succeeded(uid, action, resource, namespace or "", name, "gone")
            return None
        except ConflictError as exc:
            await self._failed(uid, action, resource, namespace or "", name, exc)
            raise RetriableError(f"{action} {resource.kind} {namespace}/{name}: {exc}", delay=0.0) from exc
        except KubeApiError as exc:
            await self._failed(uid, action, resource, namespace or "", name, exc)
            raise typed(exc, f"{action} {resource.kind} {namespace}/{name}") from exc
        change = written_change(written)
        await self._succeeded_with(uid, action, resource, namespace or "", name, written, change)
        return written

    async def set_finalizer(
        self,
        uid: str,
        resource: ResourceType,
        namespace: str | None,
        name: str,
        finalizer: str,
        present: bool,
    ) -> None:
        """Add (`present`) or remove `finalizer` with an update guarded by resourceVersion (a merge patch
        guarded by it for the kinds kept without their spec); gone is done."""
        body = self.journal.cached(resource, namespace, name)
        if body is None:
            body = await self.get(resource, namespace, name)
            if body is None:
                return
        finalizers = list(body.get("metadata", {}).get("finalizers") or [])
        if (finalizer in finalizers) == present:
            return
        finalizers = [*finalizers, finalizer] if present else [f for f in finalizers if f != finalizer]
        action = "add-finalizer" if present else "remove-finalizer"
        if resource.kind in PATCHED_FINALIZERS:  # kept without its spec: no whole object to write back
            rv = body["metadata"].get("resourceVersion")
            patch = {"metadata": {"resourceVersion": rv, "finalizers": finalizers}}
            await self.merge_patch(uid, action, resource, namespace, name, patch)
            return
        updated = {**body, "metadata": {**body["metadata"], "finalizers": finalizers}}
        await self.replace(uid, action, resource, updated)

    async def delete(self, uid: str, resource: ResourceType, namespace: str | None, name: str) -> bool:
        """Delete; False when it was already gone."""
        await self._intend(uid, "delete", resource, namespace or "", name)
        try:
            answer = await self.api.delete(resource.object_path(namespace, name))
        except NotFoundError:
            await self._succeeded(uid, "delete", resource, namespace or "", name, "already gone")
            return False
        except KubeApiError as exc:
            await self._failed(uid, "delete", resource, namespace or "", name, exc)
            raise typed(exc, f"delete {resource.kind} {namespace}/{name}") from exc
        if answer.get("kind") != "Status" and answer.get("metadata", {}).get("deletionTimestamp"):
            await self._succeeded_with(
                uid, "delete", resource, namespace or "", name, answer, Change.MODIFIED
            )
        else:
            await self._succeeded(uid, "delete", resource, namespace or "", name)
        return True
