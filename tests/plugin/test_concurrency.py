"""Claims on one node prepare side by side; what the node-wide lock protected still holds.

The fake cluster counts the requests in flight and can hold one kind of request until the test lets it go,
so each interleaving below is forced, not hoped for: a claim's requests never wait for another claim's,
attempts on one claim never interleave, the label decision of a domain is made by one claim at a time, and
two claims never both complete on one device.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from cdctl.api.refs import DomainInfo
from cdctl.domain import claims as c
from cdctl.domain.errors import RetriableError
from cdctl.plugin import cdi
from cdctl.plugin.devices import AllocatedClaim, ClaimRef, parse_claim
from cdctl.plugin.prepare import DeviceState
from tests.plugin.conftest import Node
from tests.plugin.fakes import DOM1, channel_claim, daemon_claim

LATENCY_S = 0.02
DOMAINS = [f"d0000000-0000-4000-8000-00000000010{i}" for i in range(4)]
OLD = ClaimRef("c-old", "default", "rc-old")
NEW = ClaimRef("c-new", "default", "rc-new")


def channel(ref: ClaimRef, domain: str = DOM1) -> AllocatedClaim:
    return parse_claim(channel_claim(ref.uid, domain, name=ref.name, namespace=ref.namespace))


async def until(condition: Callable[[], bool]) -> None:
    """Let the other tasks run until `condition` holds (bounded: a hang guard, not a timing check)."""
    async with asyncio.timeout(10):
        while not condition():  # noqa: ASYNC110 - the condition is the book's, which signals nothing
            await asyncio.sleep(0.001)


async def reached(node: Node, request: str) -> None:
    async with asyncio.timeout(10):
        await node.cluster.entered[request].wait()


async def waiting_for_its_daemon(node: Node, ref: ClaimRef) -> None:
    """`ref` prepared up to the readiness wait: it labelled the node and holds no device (PrepareFailed).
    Such a claim of a pod that is gone (or one invalidated by a reboot) is what a new claim of the domain
    races: a completed one holds channel 0, so the new claim's Prepare could not start before it ends."""
    ready = set(node.cluster.ready)
    node.cluster.ready.clear()
    with pytest.raises(RetriableError):
        await node.state.prepare(channel(ref), 0)
    node.cluster.ready.update(ready)


def assert_idle(state: DeviceState) -> None:
    assert (len(state.claim_locks), len(state.label_locks), len(state.holds)) == (0, 0, 0)


async def test_four_claims_of_different_domains_make_their_requests_side_by_side(node: Node) -> None:
    for uid in DOMAINS:
        node.cluster.domains[uid] = DomainInfo(uid, f"cd-{uid[-1]}", "default")
        node.cluster.ready.add((uid, "node-a"))
    node.cluster.latency_s = LATENCY_S
    claims = [channel(ClaimRef(f"c{i}", "default", f"rc{i}"), uid) for i, uid in enumerate(DOMAINS)]
    outcomes = await asyncio.gather(*(node.state.prepare(cl, 0) for cl in claims), return_exceptions=True)
    assert node.cluster.max_in_flight == 4, "no claim's request waited for another claim's"
    # A node carries one domain's label: the first claim to label it prepares, the others are told to retry.
    assert isinstance(outcomes[0], list)
    for refused in outcomes[1:]:
        assert isinstance(refused, RetriableError) and "different ComputeDomain" in str(refused)
    assert node.cluster.labels == {"node-a": DOMAINS[0]}
    assert_idle(node.state)


async def test_a_channel_claim_and_the_daemon_claim_of_its_domain_prepare_side_by_side(node: Node) -> None:
    node.cluster.ready.add((DOM1, "node-a"))
    node.cluster.latency_s = LATENCY_S
    both = [channel(NEW), parse_claim(daemon_claim("d1", DOM1))]
    outcomes = await asyncio.gather(*(node.state.prepare(cl, 0) for cl in both))
    assert all(outcomes) and node.cluster.max_in_flight == 2
    assert all(node.state.book.get(uid).completed for uid in (NEW.uid, "d1"))  # type: ignore[union-attr]


@pytest.mark.parametrize("held", ["get_compute_domain", "add_node_label", "daemon_ready"])
async def test_a_new_claim_prepared_while_the_domains_last_claim_is_unprepared_keeps_the_label(
    node: Node, held: str
) -> None:
    """The new claim is held at each of its requests while the old claim's Unprepare runs to its end."""
    node.cluster.ready.add((DOM1, "node-a"))
    await waiting_for_its_daemon(node, OLD)
    release = node.cluster.pause(held)
    new = asyncio.create_task(node.state.prepare(channel(NEW), 0))
    await reached(node, held)
    unprepare = asyncio.create_task(node.state.unprepare(OLD))
    if held == "add_node_label":  # the new claim holds the domain's label decision: the Unprepare waits
        await asyncio.sleep(0.01)
        assert not unprepare.done()
    else:
        assert await unprepare
    release.set()
    await new
    assert await unprepare
    assert node.state.book.get(NEW.uid).completed  # type: ignore[union-attr]
    assert node.cluster.labels == {"node-a": DOM1}, f"held at {held}: the prepared claim lost its daemon"
    assert_idle(node.state)


async def test_a_new_claim_prepared_while_the_label_removal_is_in_flight_labels_again(node: Node) -> None:
    node.cluster.ready.add((DOM1, "node-a"))
    await waiting_for_its_daemon(node, OLD)
    release = node.cluster.pause("remove_node_label")
    unprepare = asyncio.create_task(node.state.unprepare(OLD))
    await reached(node, "remove_node_label")
    labelled = node.cluster.requests.count("add_node_label")
    new = asyncio.create_task(node.state.prepare(channel(NEW), 0))
    await until(lambda: node.state.book.get(NEW.uid) is not None)  # recorded as holding the label ...
    await asyncio.sleep(0.01)
    assert node.cluster.requests.count("add_node_label") == labelled, "... and waiting for the decision"
    release.set()
    assert await unprepare
    await new
    assert node.cluster.label_log == [("add", DOM1), ("remove", DOM1), ("add", DOM1)]
    assert node.state.book.get(NEW.uid).completed  # type: ignore[union-attr]
    assert node.cluster.labels == {"node-a": DOM1}
    assert_idle(node.state)


async def test_the_domains_last_two_claims_unprepared_together_remove_the_label(node: Node) -> None:
    node.cluster.ready.add((DOM1, "node-a"))
    assert await node.state.prepare(channel(OLD), 0)
    await waiting_for_its_daemon(node, NEW)  # a second claim of the domain
    node.cluster.latency_s = LATENCY_S
    assert await asyncio.gather(node.state.unprepare(OLD), node.state.unprepare(NEW)) == [True, True]
    assert node.cluster.labels == {}, "each Unprepare counted the other as a holder: the label leaked"
    assert_idle(node.state)


async def test_two_claims_never_both_complete_on_channel_0(node: Node) -> None:
    node.cluster.ready.add((DOM1, "node-a"))
    node.cluster.latency_s = LATENCY_S
    rivals = [channel(OLD), channel(NEW)]
    outcomes = await asyncio.gather(*(node.state.prepare(cl, 0) for cl in rivals), return_exceptions=True)
    assert node.cluster.max_in_flight == 2, "both did their requests side by side"
    won = [cl.ref.uid for cl, out in zip(rivals, outcomes, strict=True) if isinstance(out, list)]
    lost = [out for out in outcomes if not isinstance(out, list)]
    assert len(won) == 1 and len(lost) == 1
    assert isinstance(lost[0], RetriableError)
    assert f"already allocated to different claim {won[0]}" in str(lost[0]) or (
        f"being prepared for different claim {won[0]}" in str(lost[0])
    )
    specs = [p.name for p in node.settings.cdi_root.glob("*claim_*.yaml")]
    assert specs == [cdi.claim_spec_path(node.settings.cdi_root, won[0]).name]
    assert_idle(node.state)


async def test_attempts_on_one_claim_never_interleave(node: Node) -> None:
    node.cluster.ready.add((DOM1, "node-a"))
    node.cluster.latency_s = LATENCY_S
    twice = await asyncio.gather(node.state.prepare(channel(NEW), 0), node.state.prepare(channel(NEW), 0))
    assert twice[0] == twice[1]
    assert node.cluster.max_in_flight == 1, "the second Prepare waited for the first"
    assert await node.state.unprepare(NEW)
    started = node.state.prepare(channel(OLD), 0)
    ended = node.state.unprepare(OLD)
    assert (await asyncio.gather(started, ended))[1] is True, "the Unprepare waited for the Prepare"
    for uid in (NEW.uid, OLD.uid):
        types = [e.type for e in await node.store.read_stream(f"claim/{uid}")]
        assert types == [
            "ClaimPrepareStarted", "ChannelAllocated", "CdiSpecWritten", "ClaimPrepareCompleted",
            "ChannelReleased", "ClaimUnprepared",
        ]  # fmt: skip
    assert node.state.book.get(OLD.uid).state is c.ClaimState.UNPREPARED  # type: ignore[union-attr]
    assert_idle(node.state)
