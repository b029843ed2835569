"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics.

A candidate acquires the Lease when it is absent, already its own, released, or not renewed by its holder for
`lease_duration_s` as measured on the candidate's own clock since it last saw the record change (never by
comparing timestamps across machines). A standby polls the Lease every `retry_period_s` (one GET), and when
the holder's record would expire before the next poll it looks again just after the expiry, so a crashed
leader is replaced about `lease_duration_s` after its last renewal. The leader renews every `retry_period_s`
with one PUT of the Lease it last wrote (client-go's optimistic fast path; a conflict falls back to a GET);
each renewal is bounded by what is left of `renew_deadline_s`, and if none succeeds within it `hold()` raises
`LeadershipLost` (the command then exits, so the pod restarts clean). On a clean stop the leader releases the
Lease (ReleaseOnCancel), which a standby takes at its next poll. Each acquisition is described by an
`Acquisition` (how, the previous holder, the transitions) that the manager records in the event log.
`check_durations` refuses settings client-go would refuse. Identity is `<pod>-<uuid4>`. Used by
cdctl.controller.manager and cdctl.controller.app.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from cdctl.asynctasks import wait_at_most
from cdctl.controller.settings import LeaderElectionSettings
from cdctl.domain.errors import InvalidInput
from cdctl.domain.leadership import (
    ACQUIRED_CREATED,
    ACQUIRED_EXPIRED,
    ACQUIRED_OWN,
    ACQUIRED_RELEASED,
)
from cdctl.k8s.errors import ConflictError, KubeApiError, NotFoundError
from cdctl.k8s.resources import LEASES
from cdctl.k8s.rest import KubeApi

log = structlog.get_logger(__name__)
JsonObject = dict[str, Any]
JITTER_FACTOR = 1.2  # client-go's: the renew deadline must leave room for more than one retry period
POLL_AFTER_EXPIRY_S = 0.001  # look again this long after the holder's record would expire


class LeadershipLost(RuntimeError):
    """The Lease could not be renewed within the renew deadline."""


@dataclass(frozen=True)
class Acquisition:
    """How this candidate won the Lease (cdctl.domain.leadership's LeadershipAcquired records it)."""

    how: str
    previous_holder: str
    lease_transitions: int
    acquire_time: str
    silent_s: float  # how long the previous holder's record had been unchanged, on this candidate's clock
    at: float  # the candidate's clock when it won


def identity_for(pod_name: str) -> str:
    return f"{pod_name}-{uuid.uuid4()}"


def check_durations(settings: LeaderElectionSettings) -> None:
    """Refuse what client-go refuses: lease duration > renew deadline > retry period x 1.2, all positive."""
    if settings.retry_period_s <= 0:
        raise InvalidInput("leader election", "--leader-election-retry-period", "must be positive")
    if settings.renew_deadline_s <= JITTER_FACTOR * settings.retry_period_s:
        raise InvalidInput(
            "leader election",
            "--leader-election-renew-deadline",
            f"{settings.renew_deadline_s:g}s must be longer than {JITTER_FACTOR:g} x the retry period"
            f" ({settings.retry_period_s:g}s)",
        )
    if settings.lease_duration_s <= settings.renew_deadline_s:
        raise InvalidInput(
            "leader election",
            "--leader-election-lease-duration",
            f"{settings.lease_duration_s:g}s must be longer than the renew deadline"
            f" ({settings.renew_deadline_s:g}s)",
        )


def _now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _record(lease: JsonObject) -> tuple[Any, ...]:
    spec = lease.get("spec") or {}
    return (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))


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
        self._observed_duration = settings.lease_duration_s
        self._lease: JsonObject | None = None  # the Lease as this candidate last wrote it (fast renewals)
        self._path = LEASES.object_path(settings.lease_lock_namespace, settings.lease_lock_name)
        self.is_leader = False
        self.acquisition: Acquisition | None = None  # the latest time this candidate became the leader

    async def try_acquire_or_renew(self) -> bool:
        fresh = self._clock() < self._observed_at + self.settings.lease_duration_s
        if (
            self.is_leader
            and self._lease is not None
            and fresh
            and await self._renew_optimistically(self._lease)
        ):
            return True
        try:
            lease = await self.api.get_or_none(self._path)
        except KubeApiError as exc:
            log.warning("lease read failed", error=str(exc))
            return False
        now = self._clock()
        if lease is None:
            return await self._create()
        spec = lease.get("spec") or {}
        if _record(lease) != self._observed:
            self._observed, self._observed_at = _record(lease), now
        holder = spec.get("holderIdentity") or ""
        self._observed_duration = float(spec.get("leaseDurationSeconds") or self.settings.lease_duration_s)
        if holder and holder != self.identity and now < self._observed_at + self._observed_duration:
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
        silent = now - self._observed_at if holder and holder != self.identity else 0.0
        how = ACQUIRED_OWN if holder == self.identity else ACQUIRED_EXPIRED if holder else ACQUIRED_RELEASED
        self._remember(updated)
        if not self.is_leader:
            self._became_leader(how, holder, new_spec, silent)
        return True

    async def _renew_optimistically(self, lease: JsonObject) -> bool:
        """client-go's fast path: PUT the Lease as last written, with a new renewTime; no GET."""
        spec = {**(lease.get("spec") or {}), "renewTime": _now_micro()}
        try:
            updated = await self.api.replace(self._path, {**lease, "spec": spec})
        except KubeApiError as exc:
            log.info("optimistic lease renewal failed; reading the lease", error=str(exc))
            self._lease = None
            return False
        self._remember(updated)
        return True

    async def _create(self) -> bool:
        stamp = _now_micro()
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.settings.lease_duration_s),
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": 0,
        }
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.settings.lease_lock_name,
                "namespace": self.settings.lease_lock_namespace,
            },
            "spec": spec,
        }
        try:
            created = await self.api.create(LEASES.collection_path(self.settings.lease_lock_namespace), body)
        except KubeApiError as exc:
            log.info("lease create lost or failed", error=str(exc))
            return False
        self._remember(created)
        self._became_leader(ACQUIRED_CREATED, "", spec, 0.0)
        return True

    def _became_leader(self, how: str, previous: str, spec: JsonObject, silent_s: float) -> None:
        self.is_leader = True
        self.acquisition = Acquisition(
            how=how,
            previous_holder=previous,
            lease_transitions=int(spec.get("leaseTransitions") or 0),
            acquire_time=str(spec.get("acquireTime") or ""),
            silent_s=round(silent_s, 3),
            at=self._clock(),
        )
        log.info(
            "became leader",
            identity=self.identity,
            lease=self.settings.lease_lock_name,
            how=how,
            previous_holder=previous or None,
            lease_transitions=self.acquisition.lease_transitions,
        )

    def _remember(self, lease: JsonObject) -> None:
        self._lease = lease
        self._observed = _record(lease)
        self._observed_at = self._clock()

    def _poll_delay(self) -> float:
        """A retry period, or less when another holder's record expires sooner (a crashed leader)."""
        delay = self.settings.retry_period_s
        if self._observed is not None and self._observed[0] and self._observed[0] != self.identity:
            left = self._observed_at + self._observed_duration - self._clock()
            if 0 <= left < delay:
                delay = left + POLL_AFTER_EXPIRY_S
        return delay

    async def acquire(self) -> None:
        """Wait until this candidate holds the Lease."""
        log.info("waiting for the lease", identity=self.identity, lease=self.settings.lease_lock_name)
        while True:
            if await self.try_acquire_or_renew():
                return
            await asyncio.sleep(self._poll_delay())

    async def hold(self) -> None:
        """Renew until cancelled; raise LeadershipLost when no renewal succeeds within the renew deadline.

        Each attempt is cut off at the deadline, so a request the API server never answers cannot keep a
        leader that a standby may already have replaced acting on."""
        last_renewal = self._clock()
        while True:
            await asyncio.sleep(self.settings.retry_period_s)
            left = self.settings.renew_deadline_s - (self._clock() - last_renewal)
            try:
                renewed = await wait_at_most(self.try_acquire_or_renew(), max(left, 0.001))
            except TimeoutError:
                renewed = False
            if renewed:
                last_renewal = self._clock()
            elif self._clock() - last_renewal >= self.settings.renew_deadline_s or not self._still_ours():
                self.is_leader = False
                log.error("lost the lease", identity=self.identity, lease=self.settings.lease_lock_name)
                raise LeadershipLost(f"lease {self.settings.lease_lock_name} lost by {self.identity}")

    def _still_ours(self) -> bool:
        return self._observed is None or self._observed[0] == self.identity

    async def release(self) -> None:
        """Give the Lease up (holder cleared) so a standby takes over at its next poll; best effort."""
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
