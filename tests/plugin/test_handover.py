"""Prepare hands a channel out only through its node's IMEX handover gate (cdctl.api.imexgate).

The clique and the pod may still say Ready when IMEX is not: a daemon replaced a moment ago, an IMEX
restarting. These tests make the cluster say Ready and the gate say otherwise, with the fake gates and with
the real files a killed daemon leaves behind.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from cdctl.api.imexgate import CLOSED_NO_HOLDER, HOLDS_DIR, live_holds
from cdctl.api.isolation import ImexIsolation
from cdctl.api.shareddaemon import SHARED_DIR
from cdctl.domain.errors import RetriableError
from cdctl.plugin import cdi
from cdctl.plugin.checkpoint import ClaimBook
from cdctl.plugin.daemonclaims import domain_dir
from cdctl.plugin.devices import ClaimRef, parse_claim
from cdctl.plugin.handover import GateFiles
from cdctl.plugin.prepare import DeviceState
from cdctl.plugin.preparesettings import DaemonNotReady
from tests.plugin.conftest import CLIQUE, Node
from tests.plugin.fakes import DOM1, channel_claim, imex_ready, killed_gate_holder


async def _prepare(node: Node, uid: str) -> list[dict]:
    claim = parse_claim(channel_claim(uid, DOM1, name=f"rc-{uid}"))
    return await node.state.prepare(claim, node.state.book.version(uid))


async def _with_gate_files(node: Node) -> Node:
    book = await ClaimBook.load(node.store, node.settings.node)
    node.state = DeviceState(node.settings, book, node.cluster, node.fabric, GateFiles(hold_s=60.0))
    return node


async def test_a_closed_gate_is_a_wait_that_opening_it_ends(node: Node) -> None:
    node.cluster.ready.add((DOM1, "node-a"))  # the clique says Ready ...
    node.gates.closed[DOM1] = "the IMEX daemon has not reported IMEX ready"  # ... IMEX is restarting
    with pytest.raises(DaemonNotReady) as refused:
        await _prepare(node, "c1")
    assert str(refused.value) == (
        f"IMEX on this node is not ready now ({DOM1}): the IMEX daemon has not reported IMEX ready"
    )
    assert isinstance(refused.value, RetriableError)
    assert not cdi.claim_spec_path(node.settings.cdi_root, "c1").exists()
    assert node.gates.held == {}, "a claim that was handed nothing keeps no IMEX restart back"
    waiting = asyncio.create_task(refused.value.wake())
    await asyncio.sleep(0)
    assert not waiting.done()
    node.gates.open(DOM1)
    await asyncio.wait_for(waiting, 5)
    assert await _prepare(node, "c1")
    assert node.gates.held == {"c1": {DOM1}}
    await node.state.unprepare(ClaimRef("c1", "default", "rc-c1"))
    assert node.gates.held == {}


async def test_a_node_outside_any_fabric_has_no_imex_to_wait_for(node: Node) -> None:
    node.fabric.clique_id = ""
    node.cluster.ready.add((DOM1, "node-a"))
    node.gates.closed[DOM1] = "no daemon"
    assert await _prepare(node, "c1")
    assert node.gates.held == {}


async def test_channel_isolation_hands_out_through_the_shared_daemons_gate(node: Node) -> None:
    node.settings = dataclasses.replace(node.settings, isolation=ImexIsolation.CHANNEL, channel_slots=4)
    node.cluster.shared_ready.add("node-a")
    book = await ClaimBook.load(node.store, node.settings.node)
    node.state = DeviceState(node.settings, book, node.cluster, node.fabric, node.gates)
    await node.cluster.assign_channel(DOM1, CLIQUE, 7)
    node.gates.closed[SHARED_DIR] = "the IMEX daemon has not reported IMEX ready"
    claim = parse_claim(channel_claim("c1", DOM1, name="rc-c1", device="channel"))
    with pytest.raises(DaemonNotReady, match=f"not ready now \\({SHARED_DIR}\\)"):
        await node.state.prepare(claim, 0)
    node.gates.open(SHARED_DIR)
    assert await node.state.prepare(claim, node.state.book.version("c1"))
    assert node.gates.held == {"c1": {SHARED_DIR}}


async def test_a_replaced_daemon_still_ready_in_its_clique_gets_no_claim(node: Node) -> None:
    """The old daemon is killed; its clique entry still says Ready and its gate file is still there. The
    Prepare must wait for the new daemon's IMEX, and only the hold of the claim handed out stays."""
    node = await _with_gate_files(node)
    node.cluster.ready.add((DOM1, "node-a"))
    imexd = domain_dir(node.settings.plugin_dir, DOM1)
    imexd.mkdir(parents=True)
    killed_gate_holder(imexd)
    with pytest.raises(DaemonNotReady, match=CLOSED_NO_HOLDER):
        await _prepare(node, "c1")
    assert live_holds(imexd) == {}
    with imex_ready(imexd):  # the replacement daemon's IMEX answers READY
        assert await _prepare(node, "c1")
        assert sorted(live_holds(imexd)) == ["c1"]
        await node.state.unprepare(ClaimRef("c1", "default", "rc-c1"))
        assert sorted(p.name for p in (imexd / HOLDS_DIR).iterdir()) == []
