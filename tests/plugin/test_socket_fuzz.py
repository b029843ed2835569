"""Arbitrary and mutated bytes to every gRPC method the plugin serves, through its real unix sockets: each is
answered OK (a message that decodes; per-claim errors inside) or INVALID_ARGUMENT, never UNKNOWN, never a
logged stack, and the plugin leaks no descriptor, task or CDI spec doing so. bench/socket_fuzz.py runs
100,000 of these and reports latency."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator, MutableMapping
from typing import Any

import pytest
import structlog
from grpclib.const import Status
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.plugin.socketfuzz import METHODS, UID, FuzzTarget, Method, mutate, open_descriptors, watching_logs

ANSWERED = {Status.OK, Status.INVALID_ARGUMENT}


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as r:
        yield r


@pytest.fixture(scope="module")
def target(runner: asyncio.Runner) -> Iterator[FuzzTarget]:
    t = FuzzTarget()
    runner.run(t.start())
    yield t
    runner.run(t.close())


def _stacks(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if "exc_info" in e or "exception" in e]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    method=st.sampled_from(METHODS),
    raw=st.binary(max_size=300),
    rnd=st.randoms(use_true_random=False),
    mutated=st.booleans(),
)
def test_every_method_answers_any_bytes_with_ok_or_invalid_argument_and_no_stack(
    runner: asyncio.Runner, target: FuzzTarget, method: Method, raw: bytes, rnd: random.Random, mutated: bool
) -> None:
    body = mutate(rnd, rnd.choice(method.seeds)) if mutated else raw
    with watching_logs() as watch, structlog.testing.capture_logs() as logs:
        answer = runner.run(target.send(method, body))
    assert answer.status in ANSWERED, (method.path, body, answer)
    assert watch.tracebacks == []
    assert _stacks(logs) == []
    if answer.status is Status.INVALID_ARGUMENT:
        assert answer.message.startswith("malformed ") and len(answer.message) < 400


@pytest.mark.parametrize(
    ("path", "body", "complaint"),
    [
        # the kinds the fuzzing first found: a varint where a Claim is declared, a string field sent as a
        # varint, a bool sent as a length-delimited field, a varint too long, one cut off
        ("DRAPlugin/NodePrepareResources", b"\x08\x05", "claims[0] is not a Claim message"),
        ("DRAPlugin/NodeUnprepareResources", b"\x0a\x02\x10\x07", "claims[0].uid is not a string"),
        ("Registration/NotifyRegistrationStatus", b"\x0a\x01x", "plugin_registered is not a bool"),
        ("Registration/GetInfo", b"\x08" + b"\xff" * 11, "Too many bytes when decoding varint"),
        ("DRAResourceHealth/NodeWatchResources", b"\x08\x80", "Stream ended unexpectedly"),
    ],
)
def test_the_known_kinds_of_damage_are_named_in_the_answer(
    runner: asyncio.Runner, target: FuzzTarget, path: str, body: bytes, complaint: str
) -> None:
    method = next(m for m in METHODS if m.path.endswith(path))
    answer = runner.run(target.send(method, body))
    assert answer.status is Status.INVALID_ARGUMENT, answer
    assert complaint in answer.message


def test_a_thousand_calls_leak_no_descriptor_task_or_cdi_spec(
    runner: asyncio.Runner, target: FuzzTarget
) -> None:
    rng = random.Random(7)

    async def burst(n: int) -> None:
        for _ in range(n):
            method = rng.choice(METHODS)
            await target.send(method, mutate(rng, rng.choice(method.seeds)))

    runner.run(burst(200))  # warm-up: connections, caches
    descriptors, tasks = open_descriptors(), len(runner.run(_tasks()))
    runner.run(burst(1000))
    assert open_descriptors() <= descriptors
    assert len(runner.run(_tasks())) <= tasks
    # the one claim that exists may be prepared (its spec), nothing else ever is
    assert {p.name for p in target.cdi_specs()} <= {f"compute-domain.nvidia.com-claim_{UID}.json"}


async def _tasks() -> set[asyncio.Task[object]]:
    await asyncio.sleep(0.05)  # let cancelled streams finish
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}
