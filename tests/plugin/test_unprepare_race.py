"""An Unprepare that reaches the plugin before a Prepare of the same claim has recorded anything.

The kubelet gives up on a NodePrepareResources (its pod went away, or it timed out) and calls
NodeUnprepareResources for the claim; the plugin's Prepare attempt is still in flight, reading the
ResourceClaim from the API server, with nothing in the claim's stream yet. The Unprepare finds the claim
unknown and answers as a no-op, leaving nothing that fences the attempt: the attempt then completes, writes
the CDI spec, labels the node and holds channel 0 for a claim the kubelet will never unprepare again (and
the stale-claim sweep only looks at claims that did not complete). That is the Go driver's issue 1162 by
another road; found by the rack's failover and chaos runs (a daemon pod force-deleted while its claim was
being prepared, left in the log as PrepareFailed).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Sequence
from pathlib import Path

import pytest

from cdctl.api.refs import DomainInfo
from cdctl.domain import claims as c
from cdctl.domain.events import RecordedEvent
from cdctl.plugin.cdi import claim_spec_path
from cdctl.plugin.checkpoint import ClaimBook
from cdctl.plugin.devices import ClaimRef, parse_claim
from cdctl.plugin.driver import Driver, RetryPolicy
from cdctl.plugin.prepare import DeviceState
from cdctl.plugin.preparesettings import FabricStatus
from cdctl.store import InMemoryEventStore, StreamAppend
from tests.plugin.conftest import CLIQUE, Node, node_settings
from tests.plugin.fakes import C1, DOM1, FakeCluster, FakeGates, channel_claim


async def test_a_prepare_in_flight_when_its_claim_is_unprepared_leaves_nothing_prepared(node: Node) -> None:
    node.cluster.ready.add((DOM1, "node-a"))
    node.cluster.add_claim(channel_claim(C1, DOM1))
    driver = Driver(node.state, node.cluster, RetryPolicy())
    ref = ClaimRef(C1, "default", "rc")
    node.cluster.paused["get_claim"] = asyncio.Event()
    node.cluster.entered["get_claim"] = asyncio.Event()
    prepare = asyncio.create_task(driver.prepare_resources([ref]))
    await asyncio.wait_for(
        node.cluster.entered["get_claim"].wait(), 30
    )  # the attempt is reading the claim: nothing recorded yet
    assert await driver.unprepare_resources([ref]) == {C1: ""}
    node.cluster.paused["get_claim"].set()
    await prepare
    rec = node.state.book.get(C1)
    assert rec is None or rec.state is not c.ClaimState.PREPARE_COMPLETED, "the claim stays prepared"
    assert not claim_spec_path(node.settings.cdi_root, C1).exists()
    assert node.cluster.labels.get("node-a") != DOM1


class _GatedStore(InMemoryEventStore):
    """Appends wait at the gate, once it is set up: a write that is in flight when its caller is cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def append_batch(self, appends: Sequence[StreamAppend]) -> list[RecordedEvent]:
        if self.gate is not None:
            self.entered.set()
            await asyncio.wait_for(self.gate.wait(), 30)
        return await super().append_batch(appends)


async def test_a_prepare_cancelled_mid_write_holds_the_claim_until_its_write_lands(tmp_path: Path) -> None:
    """The call's deadline cancels an attempt while its event write is in flight: the write finishes (it is
    shielded), and the Unprepare that comes next waits for it instead of deciding on the version before it
    (which failed the write's version check, an exception nobody retrieved: bench/socket_fuzz.py)."""
    store = _GatedStore()
    settings = node_settings(tmp_path)
    cluster = FakeCluster()
    cluster.domains[DOM1] = DomainInfo(DOM1, "cd", "default")
    cluster.ready.add((DOM1, "node-a"))
    cluster.add_claim(channel_claim(C1, DOM1))
    state = DeviceState(
        settings, await ClaimBook.load(store, "node-a"), cluster, FabricStatus(CLIQUE), FakeGates()
    )
    unretrieved: list[dict[str, object]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: unretrieved.append(context))
    store.gate = asyncio.Event()
    prepare = asyncio.create_task(state.prepare(parse_claim(channel_claim(C1, DOM1)), 0))
    await asyncio.wait_for(store.entered.wait(), 30)  # its write is in flight
    prepare.cancel()
    unprepare = asyncio.create_task(state.unprepare(ClaimRef(C1, "default", "rc")))
    await asyncio.sleep(0.05)
    assert not prepare.done() and not unprepare.done()  # both wait for the write
    store.gate.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(prepare, 30)
    assert await asyncio.wait_for(unprepare, 30)
    rec = state.book.get(C1)
    assert rec is not None and rec.state is c.ClaimState.UNPREPARED
    assert rec.version == await store.stream_version(c.claim_stream(C1))  # nothing lost, nothing conflicting
    gc.collect()  # an unretrieved task exception is reported when the task is collected
    assert unretrieved == []
