"""`wait_at_most` never swallows a cancellation, and no module of the project uses `asyncio.wait_for`.

The leader's renew loop once used wait_for: cancelled in the loop turn in which a renewal finished, it went on
renewing, so the stopped controller kept its Lease and the standby never took over (a CI failure)."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from cdctl.asynctasks import wait_at_most

PACKAGE = Path(__file__).resolve().parent.parent / "cdctl"


async def _renew_forever(results: asyncio.Queue[asyncio.Future[int]], rounds: list[int]) -> None:
    """A loop like the leader's: each round waits (bounded) for one piece of work, then starts over."""
    while True:
        work = await wait_at_most(results.get(), 10)
        rounds.append(await wait_at_most(work, 10))


async def test_a_cancellation_that_arrives_as_the_work_finishes_ends_the_loop() -> None:
    loop = asyncio.get_running_loop()
    results: asyncio.Queue[asyncio.Future[int]] = asyncio.Queue()
    rounds: list[int] = []
    task = asyncio.create_task(_renew_forever(results, rounds))
    work = loop.create_future()
    await results.put(work)
    await asyncio.sleep(0.01)  # the loop now waits on `work`
    work.set_result(1)
    task.cancel()  # the same turn: asyncio.wait_for would return 1 here and the loop would go on
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert rounds == []


async def test_it_returns_the_result_or_raises_timeout() -> None:
    assert await wait_at_most(asyncio.sleep(0, result="done"), 1) == "done"
    with pytest.raises(TimeoutError):
        await wait_at_most(asyncio.Event().wait(), 0.01)


def test_no_module_of_the_project_calls_asyncio_wait_for() -> None:
    callers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "asyncio.wait_for":
                callers.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert callers == [], "use cdctl.asynctasks.wait_at_most (see its docstring)"
