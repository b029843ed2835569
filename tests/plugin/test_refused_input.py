"""Input the plugin cannot act on is refused with an error naming the claim and what is wrong, and leaves
nothing behind: a claim with no result of this driver, a result from a pool or of a device this node did
not publish, a config with no valid source, a claim named twice in one call, empty or over-long names, and
a claim already in another call of the same kind."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cdctl.plugin.devices import ClaimRef
from cdctl.plugin.driver import Driver, RetryPolicy
from tests.plugin.conftest import Node
from tests.plugin.fakes import C1, C2, DOM1, channel_claim, claim_obj, daemon_claim, result

POLICY = RetryPolicy(base_s=0.001, cap_s=0.002, budget_s=0.05)
REF = ClaimRef(C1, "default", "rc")
PREFIX = f"error preparing devices for claim default/rc:{C1}: "


async def prepare(node: Node, obj: dict[str, Any], ref: ClaimRef = REF) -> str:
    node.cluster.ready.add((DOM1, "node-a"))
    node.cluster.add_claim(obj)
    return (await Driver(node.state, node.cluster, POLICY).prepare_resources([ref]))[ref.uid].error


def nothing_left(node: Node, uid: str = C1) -> None:
    rec = node.state.book.get(uid)
    assert rec is None or not rec.completed
    cdi_root = node.settings.cdi_root
    assert not cdi_root.exists() or not any(cdi_root.iterdir())
    assert node.cluster.labels == {}


async def test_a_claim_whose_only_result_belongs_to_another_driver_is_refused(node: Node) -> None:
    obj = channel_claim(C1, DOM1)
    obj["status"]["allocation"]["devices"]["results"] = [result("gpu", "gpu-0", driver="gpu.nvidia.com")]
    error = await prepare(node, obj)
    assert error == (
        f"{PREFIX}ResourceClaim default/rc has no device of driver compute-domain.nvidia.com to prepare: "
        "its results belong to 'gpu.nvidia.com'"
    )
    nothing_left(node)


async def test_a_claim_with_no_results_at_all_is_refused(node: Node) -> None:
    error = await prepare(node, claim_obj(C1, results=[]))
    assert error == (
        f"{PREFIX}ResourceClaim default/rc has no device of driver compute-domain.nvidia.com to prepare: "
        "it has no allocation results"
    )
    nothing_left(node)


async def test_a_result_from_a_pool_this_node_does_not_publish_is_refused(node: Node) -> None:
    obj = channel_claim(C1, DOM1)
    obj["status"]["allocation"]["devices"]["results"] = [result("channel", "channel-0", pool="node-b")]
    error = await prepare(node, obj)
    assert error == (
        f"{PREFIX}ResourceClaim default/rc: status.allocation.devices.results[0] is allocated from pool "
        "'node-b', which this node does not publish (its pool is 'node-a')"
    )
    nothing_left(node)


async def test_a_device_this_node_does_not_publish_is_refused(node: Node) -> None:
    error = await prepare(node, channel_claim(C1, DOM1, device="channel-7"))
    assert error == (
        f"{PREFIX}requested device is not allocatable: channel-7 (this node publishes only channel-0 and "
        "daemon-0)"
    )
    nothing_left(node)


@pytest.mark.parametrize(
    ("source", "found"), [(None, "none (the field is empty or null)"), ("FromNowhere", "'FromNowhere'")]
)
async def test_a_config_without_a_valid_source_says_what_was_found_and_what_is_allowed(
    node: Node, source: str | None, found: str
) -> None:
    obj = channel_claim(C1, DOM1)
    obj["status"]["allocation"]["devices"]["config"][0]["source"] = source
    error = await prepare(node, obj)
    assert error == f"{PREFIX}invalid config source: {found}; allowed: FromClass or FromClaim"
    nothing_left(node)


@pytest.mark.parametrize("call", ["prepare", "unprepare"])
async def test_a_claim_named_twice_in_one_call_is_refused_once_and_not_worked_on(
    node: Node, call: str
) -> None:
    node.cluster.add_claim(channel_claim(C1, DOM1))
    driver = Driver(node.state, node.cluster, POLICY)
    refs = [REF, ClaimRef(C1, "default", "rc-again")]
    if call == "prepare":
        got = {uid: o.error for uid, o in (await driver.prepare_resources(refs)).items()}
    else:
        got = await driver.unprepare_resources(refs)
    what = "preparing" if call == "prepare" else "unpreparing"
    assert got == {
        C1: f"error {what} devices for claim default/rc:{C1}: the claim's UID appears 2 times in this "
        "call; a call names each claim once"
    }
    assert node.cluster.claim_reads == 0
    assert node.state.book.get(C1) is None  # nothing recorded for it


@pytest.mark.parametrize(
    ("ref", "error"),
    [
        (ClaimRef(C1, "default", ""), "claim reference: name: not a ResourceClaim name: ''"),
        (ClaimRef(C1, "", "rc"), "claim reference: namespace: not a namespace name: ''"),
        (ClaimRef(C1, "n" * 64, "rc"), f"claim reference: namespace: not a namespace name: '{'n' * 64}'"),
        (
            ClaimRef(C1, "default", "r" * 254),
            f"claim reference: name: not a ResourceClaim name: '{'r' * 199}... (256 characters)",
        ),
    ],
)
@pytest.mark.parametrize("call", ["prepare", "unprepare"])
async def test_empty_and_over_long_names_are_refused_before_any_request_or_record(
    node: Node, ref: ClaimRef, error: str, call: str
) -> None:
    driver = Driver(node.state, node.cluster, POLICY)
    if call == "prepare":
        got = (await driver.prepare_resources([ref]))[C1].error
    else:
        got = (await driver.unprepare_resources([ref]))[C1]
    assert got.endswith(error), got
    assert node.cluster.requests == []
    assert node.state.book.get(C1) is None  # an unprepare of a bad reference records nothing either


async def test_a_claim_already_in_another_call_is_refused_and_the_first_call_completes(node: Node) -> None:
    node.cluster.ready.add((DOM1, "node-a"))
    node.cluster.add_claim(channel_claim(C1, DOM1))
    node.cluster.add_claim(daemon_claim(C2, DOM1, name="rc2"))
    driver = Driver(node.state, node.cluster, RetryPolicy(base_s=0.001, cap_s=0.002, budget_s=5.0))
    release = node.cluster.pause("get_claim")
    first = asyncio.create_task(driver.prepare_resources([REF]))
    await asyncio.wait_for(node.cluster.entered["get_claim"].wait(), 5)
    # the second call's claims are sorted out before its first await: one step of its task
    second_call = asyncio.create_task(driver.prepare_resources([REF, ClaimRef(C2, "nvidia", "rc2")]))
    await asyncio.sleep(0)
    release.set()
    second = await asyncio.wait_for(second_call, 5)
    assert second[C1].error == (
        f"{PREFIX}another call is already preparing this claim; refusing a second at once (the kubelet "
        "will retry)"
    )
    assert second[C2].error == ""  # the rest of the call is worked on
    assert (await asyncio.wait_for(first, 5))[C1].error == ""
    rec = node.state.book.get(C1)
    assert rec is not None and rec.completed
    # once the first call has answered, the same claim is accepted again (answered from the event log)
    again = await asyncio.wait_for(driver.prepare_resources([REF]), 5)
    assert again[C1].error == "" and again[C1].devices == (await first)[C1].devices
