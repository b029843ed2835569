"""What keeps concurrent Prepares and Unprepares on one node apart, without a node-wide lock.

Used by cdctl.plugin.prepare. The Go plugin holds one node-wide file lock for a whole Prepare or Unprepare,
API requests included, so one slow request holds every other claim of the node back. Here each thing that
must not race has its own guard, and none but the label decision is held across an API request:

* `KeyedLocks` by claim UID: two attempts on the same claim (two Prepares, or a Prepare and an Unprepare)
  never interleave, so the claim's stream is appended to by one decision at a time.
* `KeyedLocks` by domain UID: the node-label decision of one domain (add in Prepare; holders counted,
  label removed and the claim marked Unprepared in Unprepare) is made by one claim at a time. It is held
  across the label's PATCH, and only claims of that domain wait on it.
* `DeviceHolds`: the check that a device is not allocated to a different claim is made again when a claim
  completes, and the devices are held from that check until its PrepareCompleted is durable: no await
  between the check and the hold, so two claims cannot both complete on the same device. Under channel
  isolation the IMEX channel held is the domain's number N, which claims of that domain share and no claim
  of another domain may hold at once (the node-local fence, cdctl.plugin.channels).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable

from cdctl.domain.claims import ClaimRecord
from cdctl.domain.errors import RetriableError
from cdctl.plugin.channels import fence
from cdctl.plugin.devices import (
    AllocatedClaim,
    assert_imex_channel_not_allocated,
    requested_non_admin_devices,
    validate_no_overlapping_prepared_devices,
)

DEVICE_BUSY_DELAY = 1.0
IMEX_CHANNEL_0 = "IMEX channel 0"


class KeyedLocks:
    """One asyncio.Lock per key, made on first use and dropped once nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._users[key] = self._users.get(key, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._users[key] -= 1
            if not self._users[key]:
                del self._users[key], self._locks[key]

    def __len__(self) -> int:
        """Keys with a holder or a waiter (an idle node has none)."""
        return len(self._locks)


class DeviceHolds:
    """Devices of claims whose completion is being written, by claim UID."""

    def __init__(self) -> None:
        self._held: dict[str, frozenset[str]] = {}
        self._channels: dict[str, tuple[int, str]] = {}  # claim uid -> (IMEX channel, domain uid)

    @staticmethod
    def _wanted(claim: AllocatedClaim, channel: bool) -> frozenset[str]:
        names = {f"device {name}" for name in requested_non_admin_devices(claim)}
        if channel:
            names.add(IMEX_CHANNEL_0)  # the channel itself: admin-access channel claims hold it too
        return frozenset(names)

    def take(self, claim: AllocatedClaim, records: Iterable[ClaimRecord], *, channel: bool) -> None:
        """Check that no other completed claim holds the claim's devices (and, when `channel`, IMEX channel
        0), nor another claim completing now, and hold them; RetriableError otherwise. Synchronous: nothing
        can interleave between the check and the hold."""
        uid = claim.ref.uid
        records = list(records)
        validate_no_overlapping_prepared_devices(claim, records)
        if channel:
            assert_imex_channel_not_allocated(records, 0, uid)
        wanted = self._wanted(claim, channel)
        for other, held in self._held.items():
            busy = sorted(wanted & held)
            if other != uid and busy:
                raise RetriableError(
                    f"{busy[0]} is being prepared for different claim {other}",
                    delay=DEVICE_BUSY_DELAY,
                )
        self._held[uid] = wanted

    def take_shared(
        self,
        claim: AllocatedClaim,
        records: Iterable[ClaimRecord],
        *,
        shared: frozenset[str],
        channel: int,
        domain_uid: str,
    ) -> None:
        """`take` under channel isolation: devices in `shared` may be held by many claims, and `channel`
        only by claims of `domain_uid` (recorded or completing now); RetriableError otherwise."""
        uid = claim.ref.uid
        records = list(records)
        validate_no_overlapping_prepared_devices(claim, records, shared=shared)
        fence(records, channel, domain_uid, uid)
        for other, (held, domain) in self._channels.items():
            if other != uid and held == channel and domain != domain_uid:
                raise RetriableError(
                    f"IMEX channel {channel} is being prepared for claim {other} of ComputeDomain {domain}",
                    delay=DEVICE_BUSY_DELAY,
                )
        wanted = frozenset(f"device {name}" for name in requested_non_admin_devices(claim)) - {
            f"device {name}" for name in shared
        }
        for other, held_devices in self._held.items():
            busy = sorted(wanted & held_devices)
            if other != uid and busy:
                raise RetriableError(
                    f"{busy[0]} is being prepared for different claim {other}", delay=DEVICE_BUSY_DELAY
                )
        self._held[uid] = wanted
        self._channels[uid] = (channel, domain_uid)

    def release(self, uid: str) -> None:
        self._held.pop(uid, None)
        self._channels.pop(uid, None)

    def __len__(self) -> int:
        return len(self._held)
