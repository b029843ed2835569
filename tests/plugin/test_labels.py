"""The node's ComputeDomain label: it stays while a claim of the domain on this node may still need it."""

from __future__ import annotations

import pytest

from cdctl.domain import claims as c
from cdctl.plugin.devices import ClaimRef, parse_claim
from cdctl.plugin.preparesettings import DaemonNotReady
from tests.plugin.conftest import Node
from tests.plugin.fakes import DOM1, channel_claim

OLD = ClaimRef("c-old", "default", "rc-old")
NEW = ClaimRef("c-new", "default", "rc-new")


async def _reboot_with_a_prepared_claim(node: Node) -> None:
    """The dead pod's claim prepared before the reboot, then invalidated by the plugin's start after it."""
    await node.state.book.observe_boot("boot-1")
    node.cluster.ready.add((DOM1, "node-a"))
    assert await node.state.prepare(parse_claim(channel_claim(OLD.uid, DOM1, name=OLD.name)), 0)
    state = await node.restart()
    assert [r.claim_uid for r in await state.book.observe_boot("boot-2")] == [OLD.uid]
    node.cluster.ready.clear()  # the node rebooted: its daemon is starting again


async def test_unpreparing_a_claim_invalidated_by_a_reboot_keeps_the_label_of_a_new_claim(node: Node) -> None:
    await _reboot_with_a_prepared_claim(node)
    # the workload's new pod on this node: a new claim of the same domain, waiting for the daemon
    with pytest.raises(DaemonNotReady):
        await node.state.prepare(parse_claim(channel_claim(NEW.uid, DOM1, name=NEW.name)), 0)
    assert node.cluster.labels == {"node-a": DOM1}
    # the kubelet unprepares the dead pod's claim
    assert await node.state.unprepare(OLD)
    assert node.cluster.labels == {"node-a": DOM1}, "the new claim waits for the daemon the label schedules"
    node.cluster.ready.add((DOM1, "node-a"))
    assert await node.state.prepare(parse_claim(channel_claim(NEW.uid, DOM1, name=NEW.name)), 0)
    assert node.cluster.labels == {"node-a": DOM1}
    assert await node.state.unprepare(NEW)
    assert node.cluster.labels == {}, "the domain's last claim on the node unprepared: the label goes"


async def test_unpreparing_a_claim_invalidated_by_a_reboot_keeps_the_label_of_a_prepared_claim(
    node: Node,
) -> None:
    await _reboot_with_a_prepared_claim(node)
    node.cluster.ready.add((DOM1, "node-a"))
    assert await node.state.prepare(parse_claim(channel_claim(NEW.uid, DOM1, name=NEW.name)), 0)
    assert await node.state.unprepare(OLD)
    assert node.state.book.get(OLD.uid).state is c.ClaimState.UNPREPARED  # type: ignore[union-attr]
    assert node.cluster.labels == {"node-a": DOM1}, "removing it would take the daemon from a running pod"


async def test_the_sweep_unprepares_an_invalidated_claim_whose_resource_claim_is_gone(node: Node) -> None:
    await _reboot_with_a_prepared_claim(node)
    assert node.cluster.labels == {"node-a": DOM1}, "an invalidated claim's pod may still come back"
    assert await node.state.sweep_stale() == [OLD.uid]  # its ResourceClaim is not in the cluster
    assert node.state.book.get(OLD.uid).state is c.ClaimState.UNPREPARED  # type: ignore[union-attr]
    assert node.cluster.labels == {}, "nothing of the domain is left on the node"


async def test_the_sweep_leaves_alone_a_claim_that_changed_while_it_looked(node: Node) -> None:
    with pytest.raises(DaemonNotReady):
        await node.state.prepare(parse_claim(channel_claim(OLD.uid, DOM1, name=OLD.name)), 0)
    looked_at = node.state.book.version(OLD.uid)
    node.cluster.ready.add((DOM1, "node-a"))
    assert await node.state.prepare(parse_claim(channel_claim(OLD.uid, DOM1, name=OLD.name)), 0)
    assert not await node.state.unprepare(OLD, reason="stale", expected_version=looked_at)
    assert node.state.book.get(OLD.uid).completed  # type: ignore[union-attr]
    assert node.cluster.labels == {"node-a": DOM1}
