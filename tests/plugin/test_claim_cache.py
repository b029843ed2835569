"""Prepare's use of watched copies: a claim copy serves only when unambiguous, else the claim is read fresh (a
GET); a "not ready" pause ends when readiness is observed.

Driver-level, against the in-memory cluster port: `FakeCluster.watched` is what a watch delivered and may lag
`FakeCluster.claims`, what the API server holds.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from cdctl.plugin.devices import ClaimRef
from cdctl.plugin.driver import Driver, RetryPolicy
from tests.plugin.conftest import Node
from tests.plugin.fakes import C1, C2, DOM1, channel_claim

POLICY = RetryPolicy(base_s=0.001, cap_s=0.002, budget_s=5.0)


def reserved(obj: dict[str, Any], at: str = "2026-11-21T10:00:00Z") -> dict[str, Any]:
    """The claim as the kubelet sees it at Prepare: allocated (at `at`) and reserved for a pod."""
    obj = copy.deepcopy(obj)
    obj["status"]["allocation"]["allocationTimestamp"] = at
    obj["status"]["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "pod-1"}]
    return obj


def ref(uid: str = C1) -> ClaimRef:
    return ClaimRef(uid, "default", "rc")


async def prepare(node: Node, uid: str = C1) -> str:
    outcome = (await Driver(node.state, node.cluster, POLICY).prepare_resources([ref(uid)]))[uid]
    return outcome.error


def serve(node: Node, obj: dict[str, Any], watched: dict[str, Any] | None = None) -> None:
    """`obj` on the API server; `watched` (default: the same) in the watch cache."""
    key = ("default", "rc")
    node.cluster.claims[key] = obj
    node.cluster.watched[key] = obj if watched is None else watched


@pytest.fixture(autouse=True)
def ready(node: Node) -> None:
    node.cluster.ready.add((DOM1, "node-a"))


async def test_a_first_prepare_uses_the_watched_copy_without_a_get(node: Node) -> None:
    serve(node, reserved(channel_claim(C1, DOM1)))
    assert await prepare(node) == ""
    assert node.cluster.claim_reads == 0
    assert node.cluster.labels == {"node-a": DOM1}


async def test_a_watched_copy_with_another_uid_falls_back_to_a_get(node: Node) -> None:
    # the claim was deleted and recreated under the same name; the watch has not caught up
    serve(node, reserved(channel_claim(C2, DOM1)), watched=reserved(channel_claim(C1, DOM1)))
    assert await prepare(node, C2) == ""
    assert node.cluster.claim_reads == 1
    rec = node.state.book.get(C2)
    assert rec is not None and rec.completed and node.state.book.get(C1) is None


@pytest.mark.parametrize(
    "why",
    ["not reserved", "not allocated", "being deleted", "another node's pool", "missing"],
)
async def test_an_ambiguous_watched_copy_falls_back_to_a_get(node: Node, why: str) -> None:
    live = reserved(channel_claim(C1, DOM1))
    watched: dict[str, Any] = copy.deepcopy(live)
    if why == "not reserved":
        del watched["status"]["reservedFor"]
    elif why == "not allocated":
        del watched["status"]["allocation"]
    elif why == "being deleted":
        watched["metadata"]["deletionTimestamp"] = "2026-11-21T10:00:00Z"
    elif why == "another node's pool":
        watched["status"]["allocation"]["devices"]["results"][0]["pool"] = "node-b"
    serve(node, live, watched)
    if why == "missing":
        node.cluster.watched.clear()
    assert await prepare(node) == ""
    assert node.cluster.claim_reads == 1


async def test_a_retry_reads_fresh(node: Node) -> None:
    node.cluster.ready.clear()
    serve(node, reserved(channel_claim(C1, DOM1)))
    # One attempt with time to finish on a busy machine, then a backoff past the budget: the answer is
    # that attempt's error.
    driver = Driver(node.state, node.cluster, RetryPolicy(base_s=5.0, cap_s=5.0, budget_s=2.0))
    outcome = (await driver.prepare_resources([ref()]))[C1]
    assert "not ready" in outcome.error
    attempts = node.cluster.claim_reads
    node.cluster.ready.add((DOM1, "node-a"))
    assert await prepare(node) == ""  # the node now has a record of the claim: no copy stands in
    assert node.cluster.claim_reads == attempts + 1


async def test_a_watched_copy_of_an_unprepared_allocation_is_not_trusted(node: Node) -> None:
    """Issue 1162 with a lagging watch: the claim was prepared, unprepared, deallocated and allocated
    again; the watch still shows the first allocation. A new Prepare prepares what the API server has."""
    first = reserved(channel_claim(C1, DOM1), at="2026-11-21T10:00:00Z")
    serve(node, first)
    assert await prepare(node) == ""
    assert (await Driver(node.state, node.cluster, POLICY).unprepare_resources([ref()]))[C1] == ""
    second = reserved(channel_claim(C1, DOM1), at="2026-11-21T10:05:00Z")
    serve(node, second, watched=first)
    reads = node.cluster.claim_reads
    assert await prepare(node) == ""
    assert node.cluster.claim_reads == reads + 1
    rec = node.state.book.get(C1)
    assert rec is not None and rec.completed
    assert len(rec.allocations) == 2 and rec.allocation == rec.allocations[-1] != rec.allocations[0]


async def test_a_not_ready_wait_ends_when_readiness_is_observed(node: Node) -> None:
    node.cluster.ready.clear()
    serve(node, reserved(channel_claim(C1, DOM1)))
    driver = Driver(node.state, node.cluster, RetryPolicy(base_s=600.0, cap_s=600.0, budget_s=1200.0))
    preparing = asyncio.create_task(driver.prepare_resources([ref()]))
    while (rec := node.state.book.get(C1)) is None or not rec.last_error:  # noqa: ASYNC110
        await asyncio.sleep(0.001)  # until the first attempt found the daemon not ready
    assert "not ready" in rec.last_error
    await node.cluster.mark_ready(DOM1, "node-a")
    async with asyncio.timeout(60):  # a hang guard: without the wake the pause is ten minutes
        assert (await preparing)[C1].error == ""


@pytest.mark.parametrize("watched", [True, False])
async def test_a_not_ready_from_running_watches_is_retried_when_they_change(
    node: Node, watched: bool
) -> None:
    """Readiness from running watches changes only with them: the Prepare waits for the wake instead of
    re-reading its claim on every step of the backoff. Without watches, "not ready" was read live and is
    re-read on the backoff."""
    node.cluster.ready.clear()
    node.cluster.readiness_is_watched = watched
    serve(node, reserved(channel_claim(C1, DOM1)))
    preparing = asyncio.create_task(Driver(node.state, node.cluster, POLICY).prepare_resources([ref()]))
    while (rec := node.state.book.get(C1)) is None or not rec.last_error:  # noqa: ASYNC110
        await asyncio.sleep(0.001)  # until the first attempt found the daemon not ready
    assert "not ready" in rec.last_error
    reads = node.cluster.claim_reads
    await asyncio.sleep(0.2)  # a hundred steps of this policy's backoff
    if watched:
        assert node.cluster.claim_reads == reads
    else:
        assert node.cluster.claim_reads > reads + 2
    await node.cluster.mark_ready(DOM1, "node-a")
    async with asyncio.timeout(60):
        assert (await preparing)[C1].error == ""
