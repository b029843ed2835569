"""Builders of claim and domain events for projection tests."""

from __future__ import annotations

from cdctl.domain.claims import (
    ChannelAllocated,
    ClaimPrepareCompleted,
    ClaimPrepareFailed,
    ClaimPrepareStarted,
    ClaimUnprepared,
    claim_stream,
)
from cdctl.domain.events import NewEvent
from cdctl.store import EventStore


async def prepare(
    store: EventStore, uid: str, node: str = "n1", channel: int = 0, domain: str = "d1"
) -> None:
    await store.append(
        claim_stream(uid),
        [
            NewEvent.of(
                ClaimPrepareStarted(uid, "ns", f"claim-{uid}", node, "channel", domain, "a1", ["channel-0"])
            ),
            NewEvent.of(ChannelAllocated(uid, node, channel, domain)),
            NewEvent.of(ClaimPrepareCompleted(uid, [f"k8s.compute-domain.nvidia.com/claim={uid}-channel-0"])),
        ],
    )


async def fail(store: EventStore, uid: str, reason: str = "daemon not ready") -> None:
    await store.append(
        claim_stream(uid),
        [
            NewEvent.of(ClaimPrepareStarted(uid, "ns", f"claim-{uid}", "n1", "channel", "d1", "a1", [])),
            NewEvent.of(ClaimPrepareFailed(uid, reason, retriable=True)),
        ],
    )


async def unprepare(store: EventStore, uid: str) -> None:
    await store.append(claim_stream(uid), [NewEvent.of(ClaimUnprepared(uid))])
