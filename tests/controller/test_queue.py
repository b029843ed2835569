"""The keyed work queue: serial per key, parallel across keys, coalescing, retries, permanent drops."""

from __future__ import annotations

import asyncio

import pytest

from cdctl.controller.queue import KeyedQueue, Outcome
from cdctl.domain.errors import PermanentError, RetriableError


async def run_queue(queue: KeyedQueue) -> asyncio.Task[None]:
    return asyncio.create_task(queue.run())


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_one_run_at_a_time_per_key_and_keys_in_parallel() -> None:
    active: dict[str, int] = {}
    overlap_same_key = False
    peak_parallel = 0
    gate = asyncio.Event()
    all_started = asyncio.Event()

    async def handler(key: str) -> None:
        nonlocal overlap_same_key, peak_parallel
        active[key] = active.get(key, 0) + 1
        overlap_same_key |= active[key] > 1
        peak_parallel = max(peak_parallel, sum(1 for v in active.values() if v))
        if peak_parallel == 3:
            all_started.set()
        await asyncio.wait_for(gate.wait(), 30)
        active[key] -= 1

    queue = KeyedQueue(handler, workers=4)
    task = await run_queue(queue)
    for key in ("a", "b", "c"):
        queue.add(key)
    await asyncio.wait_for(all_started.wait(), 30)
    queue.add("a")  # while "a" runs: once more afterwards
    queue.add("a")
    gate.set()
    await queue.wait_idle()
    await stop(task)
    assert not overlap_same_key
    assert peak_parallel == 3


async def test_changes_while_waiting_or_running_coalesce() -> None:
    runs: list[str] = []
    release = asyncio.Event()
    started = asyncio.Event()

    async def handler(key: str) -> None:
        runs.append(key)
        started.set()
        await asyncio.wait_for(release.wait(), 30)

    queue = KeyedQueue(handler, workers=1)
    for _ in range(5):
        queue.add("k")
    task = await run_queue(queue)
    await asyncio.wait_for(started.wait(), 30)
    for _ in range(5):
        queue.add("k")
    release.set()
    await queue.wait_idle()
    await stop(task)
    assert runs == ["k", "k"]


async def test_retriable_errors_are_retried_and_permanent_ones_parked() -> None:
    attempts: dict[str, int] = {}
    outcomes: list[Outcome] = []

    async def handler(key: str) -> None:
        attempts[key] = attempts.get(key, 0) + 1
        if key == "flaky" and attempts[key] < 3:
            raise RetriableError("not yet", delay=0.001)
        if key == "broken":
            raise PermanentError("never")
        if key == "crashy" and attempts[key] < 2:
            raise RuntimeError("boom")

    queue = KeyedQueue(handler, workers=2, min_delay_s=0.001, on_outcome=outcomes.append)
    task = await run_queue(queue)
    for key in ("flaky", "broken", "crashy"):
        queue.add(key)
    await queue.wait_idle()
    await stop(task)
    assert attempts == {"flaky": 3, "broken": 1, "crashy": 2}
    assert [o.result for o in outcomes if o.key == "flaky"] == ["retry", "retry", "success"]
    assert [o.result for o in outcomes if o.key == "broken"] == ["permanent"]
    assert queue.failures("flaky") == 0
    assert queue.parked() == ["broken"], "a parked key does not keep wait_idle waiting"


async def test_a_parked_key_runs_again_on_its_next_change_or_after_its_recheck() -> None:
    """A permanent refusal may come from what the controller does not watch (a policy, RBAC): the key runs
    again after `recheck_s` all the same; a change in between runs it at once and the re-check is dropped."""
    runs: list[float] = []
    loop = asyncio.get_running_loop()

    async def handler(key: str) -> None:
        runs.append(loop.time())
        if len(runs) < 3:
            raise PermanentError("refused by a policy")

    queue = KeyedQueue(handler, workers=1, recheck_s=0.2)
    task = await run_queue(queue)
    queue.add("k")
    await queue.wait_idle()
    assert len(runs) == 1 and queue.parked() == ["k"]
    await asyncio.sleep(0.3)
    await queue.wait_idle()
    assert len(runs) == 2, "the re-check ran it again"
    assert runs[1] - runs[0] >= 0.2
    queue.add("k")  # a change before the next re-check: runs now, succeeds
    await queue.wait_idle()
    assert len(runs) == 3 and queue.parked() == []
    await asyncio.sleep(0.3)
    await stop(task)
    assert len(runs) == 3, "the re-check of the parked run was cancelled by the change"


def test_backoff_doubles_per_failure_with_bounded_jitter() -> None:
    async def handler(key: str) -> None:
        return None

    queue = KeyedQueue(handler, min_delay_s=0.01, max_delay_s=1.0)
    queue._failures["k"] = 1
    first = queue.backoff_s("k")
    queue._failures["k"] = 4
    fourth = queue.backoff_s("k")
    queue._failures["k"] = 40
    capped = queue.backoff_s("k")
    assert 0.0075 <= first <= 0.0125
    assert 0.06 <= fourth <= 0.1
    assert 0.75 <= capped <= 1.25


async def test_a_change_cuts_a_long_retry_delay_short_and_a_batch_window_coalesces() -> None:
    runs: list[str] = []

    async def handler(key: str) -> None:
        runs.append(key)

    queue = KeyedQueue(handler, workers=1)
    task = await run_queue(queue)
    queue.add_after("k", 3600.0)  # e.g. a slow retry after a conflict
    for _ in range(10):
        queue.add_after("k", 0.01)  # a burst of changes within one window
    await queue.wait_idle()
    await stop(task)
    assert runs == ["k"]
