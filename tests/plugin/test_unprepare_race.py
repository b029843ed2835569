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

from cdctl.domain import claims as c
from cdctl.plugin.cdi import claim_spec_path
from cdctl.plugin.devices import ClaimRef
from cdctl.plugin.driver import Driver, RetryPolicy
from tests.plugin.conftest import Node
from tests.plugin.fakes import C1, DOM1, channel_claim


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
