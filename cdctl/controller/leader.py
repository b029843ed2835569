"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics and default durations.

A candidate acquires the Lease when it is absent, already its own, or not renewed by its holder for
`lease_duration_s` as measured on the candidate's own clock since it last saw the record change (never by
comparing timestamps across machines). The leader renews every `retry_period_s`; if no renewal succeeds for
`renew_deadline_s` it has lost the lease and `hold()` raises `LeadershipLost` (the command then exits, so the
pod restarts clean). On a clean stop the leader releases the Lease (ReleaseOnCancel). Identity is
`<pod>-<uuid4>`. Used by cdctl.controller.manager.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import structlog

from cdctl.controller.settings import LeaderElectionSettings
from cdctl.k8s.errors import ConflictError, KubeApiError, NotFoundError
from cdctl.k8s.resources import LEASES
from cdctl.k8s.rest import KubeApi

log = structlog.get_logger(__name__)
JsonObject = dict[str, Any]


class LeadershipLost(RuntimeError):
    """The Lease could not be renewed within the renew deadline."""


def identity_for(pod_name: str) -> str:
    return f"{pod_name}-{uuid.uuid4()}"


def _now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        api: KubeApi,
        settings: LeaderElectionSettings,
        identity: str,
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.api = api
        self.settings = settings
        self.identity = identity
        self._clock = clock or asyncio.get_running_loop().time
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._path = LEASES.object_path(settings.lease_lock_namespace, settings.lease_lock_name)
        self.is_leader = False

    async def try_acquire_or_renew(self) -> bool:
        try:
            lease = await self.api.get_or_none(self._path)
        except KubeApiError as exc:
            log.warning("lease read failed", error=str(exc))
            return False
        now = self._clock()
        if lease is None:
            return await self._create()
        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.settings.lease_duration_s)
        if holder and holder != self.identity and now < self._observed_at + duration:
            self.is_leader = False
            return False
        stamp = _now_micro()
        transitions = int(spec.get("leaseTransitions") or 0)
        new_spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.settings.lease_duration_s),
            "acquireTime": spec.get("acquireTime") if holder == self.identity else stamp,
            "renewTime": stamp,
            "leaseTransitions": transitions if holder == self.identity else transitions + 1,
        }
        try:
            updated = await self.api.replace(self._path, {**lease, "spec": new_spec})
        except (ConflictError, NotFoundError):
            return False
        except KubeApiError as exc:
            log.warning("lease update failed", error=str(exc))
            return False
        self._remember(updated)
        if not self.is_leader:
            log.info("became leader", identity=self.identity, lease=self.settings.lease_lock_name)
        self.is_leader = True
        return True

    async def _create(self) -> bool:
        stamp = _now_micro()
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.settings.lease_lock_name,
                "namespace": self.settings.lease_lock_namespace,
            },
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.settings.lease_duration_s),
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 0,
            },
        }
        try:
            created = await self.api.create(LEASES.collection_path(self.settings.lease_lock_namespace), body)
        except KubeApiError as exc:
            log.info("lease create lost or failed", error=str(exc))
            return False
        self._remember(created)
        log.info("became leader", identity=self.identity, lease=self.settings.lease_lock_name)
        self.is_leader = True
        return True

    def _remember(self, lease: JsonObject) -> None:
        spec = lease.get("spec") or {}
        self._observed = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))
        self._observed_at = self._clock()

    async def acquire(self) -> None:
        """Wait until this candidate holds the Lease."""
        log.info("waiting for the lease", identity=self.identity, lease=self.settings.lease_lock_name)
        while True:
            if await self.try_acquire_or_renew():
                return
            await asyncio.sleep(self.settings.retry_period_s)

    async def hold(self) -> None:
        """Renew until cancelled; raise LeadershipLost when no renewal succeeds within the renew deadline."""
        last_renewal = self._clock()
        while True:
            await asyncio.sleep(self.settings.retry_period_s)
            if await self.try_acquire_or_renew():
                last_renewal = self._clock()
            elif self._clock() - last_renewal >= self.settings.renew_deadline_s or not self._still_ours():
                self.is_leader = False
                log.error("lost the lease", identity=self.identity, lease=self.settings.lease_lock_name)
                raise LeadershipLost(f"lease {self.settings.lease_lock_name} lost by {self.identity}")

    def _still_ours(self) -> bool:
        return self._observed is None or self._observed[0] == self.identity

    async def release(self) -> None:
        """Give the Lease up (holder cleared) so a standby takes over at once; best effort."""
        if not self.is_leader:
            return
        self.is_leader = False
        try:
            lease = await self.api.get_or_none(self._path)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            spec = {
                **lease["spec"],
                "holderIdentity": None,
                "leaseDurationSeconds": 1,
                "renewTime": _now_micro(),
            }
            await self.api.replace(self._path, {**lease, "spec": spec})
            log.info("released the lease", identity=self.identity)
        except KubeApiError as exc:
            log.warning("lease release failed", error=str(exc))
