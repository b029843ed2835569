"""Every NodePrepareResources is answered within the kubelet's 45 s, however slow the API server is.

The scenarios run on an event loop whose clock runs SPEED times faster than the wall clock (its selector
waits 1/SPEED of each timeout), so a literal 25 s API delay and the 40 s budget play out in well under a
second while the driver sees exactly those figures.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from cdctl.api.refs import DomainInfo
from cdctl.plugin.checkpoint import ClaimBook
from cdctl.plugin.devices import ClaimRef
from cdctl.plugin.driver import KUBELET_CALL_TIMEOUT_S, Driver, PrepareOutcome, RetryPolicy
from cdctl.plugin.prepare import DeviceState
from cdctl.plugin.preparesettings import FabricStatus
from cdctl.store import InMemoryEventStore
from tests.plugin.conftest import CLIQUE, node_settings
from tests.plugin.fakes import C1, DOM1, FakeCluster, FakeGates, channel_claim

SPEED = 100.0
API_DELAY_S = 25.0
T = TypeVar("T")


class FastClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose `time()` runs SPEED times faster than the wall clock."""

    def __init__(self) -> None:
        super().__init__()
        self._origin = time.monotonic()
        select = self._selector.select  # type: ignore[attr-defined]
        self._selector.select = lambda timeout=None: select(None if timeout is None else timeout / SPEED)  # type: ignore[attr-defined]

    def time(self) -> float:
        return self._origin + (time.monotonic() - self._origin) * SPEED


class SlowApiCluster(FakeCluster):
    """Every request to the API server (claim GET, label write) takes API_DELAY_S."""

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        await asyncio.sleep(API_DELAY_S)
        return await super().get_claim(namespace, name)

    async def add_node_label(self, node: str, domain_uid: str) -> None:
        await asyncio.sleep(API_DELAY_S)
        await super().add_node_label(node, domain_uid)


def run_fast(scenario: Callable[[], Awaitable[T]]) -> T:
    with asyncio.Runner(loop_factory=FastClockLoop) as runner:
        return runner.run(scenario())  # type: ignore[arg-type]


async def prepare_timed(tmp: Path, cluster: FakeCluster) -> tuple[PrepareOutcome, float]:
    store = InMemoryEventStore()
    settings = node_settings(tmp)
    cluster.domains[DOM1] = DomainInfo(DOM1, "cd", "default")
    cluster.ready.add((DOM1, "node-a"))
    cluster.add_claim(channel_claim(C1, DOM1))
    state = DeviceState(
        settings, await ClaimBook.load(store, settings.node), cluster, FabricStatus(CLIQUE), FakeGates()
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    outcomes = await Driver(state, cluster, RetryPolicy()).prepare_resources([ClaimRef(C1, "default", "rc")])
    took = loop.time() - started
    await store.close()
    return outcomes[C1], took


def test_a_25_s_api_server_still_gets_an_answer_within_the_kubelets_45_s(tmp_path: Path) -> None:
    wall = time.monotonic()
    outcome, took = run_fast(lambda: prepare_timed(tmp_path, SlowApiCluster()))
    # Two 25 s requests (claim GET, node label) need 50 s: the call's 40 s budget cuts the attempt short and
    # the claim gets its own answer, before the kubelet's deadline.
    assert took < KUBELET_CALL_TIMEOUT_S
    assert 40.0 <= took < 44.0  # the budget, plus the scaled-up overhead of a busy test machine
    assert "no answer within the call's 40 s budget" in outcome.error
    assert "the kubelet will retry" in outcome.error
    assert time.monotonic() - wall < 10.0  # the fast clock, not 40 s of wall time


def test_a_claim_whose_requests_fit_the_budget_is_prepared(tmp_path: Path) -> None:
    cluster = SlowApiCluster()
    cluster.labels["node-a"] = DOM1  # already labelled: only the claim GET is slow
    cluster.add_node_label = FakeCluster.add_node_label.__get__(cluster)  # type: ignore[method-assign]
    outcome, took = run_fast(lambda: prepare_timed(tmp_path, cluster))
    assert outcome.error == "" and outcome.devices[0]["device_name"] == "channel-0"
    assert API_DELAY_S <= took < API_DELAY_S + 5.0
