"""The event store contract (docs/architecture.md section 2), run against every implementation."""

from __future__ import annotations

import asyncio
import json

import pytest

from cdctl.domain import hashchain
from cdctl.domain.errors import ConcurrencyConflict, InvalidInput
from cdctl.domain.events import Actor, NewEvent, ObservedVersion
from cdctl.store import ANY, NO_STREAM, EventStore, StreamAppend


def ev(type_: str = "Thing", **data: object) -> NewEvent:
    return NewEvent(type_, dict(data))


async def test_positions_are_global_gapless_and_versions_per_stream(store: EventStore) -> None:
    await store.append("domain/a", [ev(n=1), ev(n=2)])
    await store.append("domain/b", [ev(n=3)])
    await store.append("domain/a", [ev(n=4)])
    events = await store.read_all()
    assert [e.position for e in events] == [1, 2, 3, 4]
    assert [(e.stream, e.version) for e in events] == [
        ("domain/a", 1), ("domain/a", 2), ("domain/b", 1), ("domain/a", 3),
    ]  # fmt: skip
    assert store.head() == 4
    assert await store.stream_version("domain/a") == 3
    assert await store.stream_version("domain/none") == 0


async def test_envelope_is_complete(store: EventStore) -> None:
    event = NewEvent(
        "ClaimPrepareCompleted",
        {"claim_uid": "u1", "device_ids": ["x"]},
        schema_version=1,
        metadata={
            "actor": Actor("kubelet-plugin", "pod-1", "node-1").to_json(),
            "correlation_id": "c1",
            "causation_id": "k1",
        },
        observed=ObservedVersion("obj-uid", "42"),
    )
    [recorded] = await store.append("claim/u1", [event])
    assert recorded.type == "ClaimPrepareCompleted"
    assert recorded.schema_version == 1
    assert recorded.data == {"claim_uid": "u1", "device_ids": ["x"]}
    assert recorded.metadata["actor"] == {"component": "kubelet-plugin", "pod": "pod-1", "node": "node-1"}
    assert recorded.metadata["correlation_id"] == "c1" and recorded.metadata["causation_id"] == "k1"
    assert recorded.metadata["resourceVersion"] == "42" and recorded.metadata["uid"] == "obj-uid"
    assert recorded.recorded_at.tzinfo is not None and recorded.recorded_at.utcoffset().total_seconds() == 0
    assert len(recorded.hash) == 64
    [read] = await store.read_stream("claim/u1")
    assert read == recorded


async def test_hash_chain_links_every_event_to_the_previous(store: EventStore) -> None:
    await store.append("s/1", [ev(a=1), ev(a=2)])
    await store.append("s/2", [ev(b="é")])
    previous = hashchain.GENESIS
    for e in await store.read_all():
        at = e.recorded_at.isoformat(timespec="microseconds")
        data, metadata = hashchain.dumps(e.data), hashchain.dumps(e.metadata)
        payload = hashchain.canonical_bytes(
            e.position, e.stream, e.version, e.type, e.schema_version, data, metadata, at
        )
        assert e.hash == hashchain.chain(previous, payload)
        previous = e.hash


async def test_expected_version_conflict_is_typed_and_writes_nothing(store: EventStore) -> None:
    await store.append("domain/x", [ev()], expected_version=NO_STREAM)
    with pytest.raises(ConcurrencyConflict) as info:
        await store.append("domain/x", [ev()], expected_version=NO_STREAM)
    assert (info.value.stream, info.value.expected, info.value.actual) == ("domain/x", 0, 1)
    await store.append("domain/x", [ev()], expected_version=1)
    with pytest.raises(ConcurrencyConflict):
        await store.append("domain/x", [ev()], expected_version=1)
    assert await store.stream_version("domain/x") == 2
    assert store.head() == 2


async def test_concurrent_deciders_on_one_stream_exactly_one_wins(store: EventStore) -> None:
    await store.append("domain/race", [ev()])
    results = await asyncio.gather(
        *(store.append("domain/race", [ev(i=i)], expected_version=1) for i in range(5)),
        return_exceptions=True,
    )
    assert sum(1 for r in results if isinstance(r, list)) == 1
    assert sum(1 for r in results if isinstance(r, ConcurrencyConflict)) == 4


async def test_batches_across_streams_are_atomic(store: EventStore) -> None:
    await store.append("b/1", [ev()])
    with pytest.raises(ConcurrencyConflict):
        await store.append_batch(
            [StreamAppend("b/2", [ev(), ev()], NO_STREAM), StreamAppend("b/1", [ev()], expected_version=5)]
        )
    assert await store.stream_version("b/2") == 0
    assert store.head() == 1
    written = await store.append_batch(
        [StreamAppend("b/2", [ev()], NO_STREAM), StreamAppend("b/1", [ev()], 1)]
    )
    assert [(e.stream, e.version, e.position) for e in written] == [("b/2", 1, 2), ("b/1", 2, 3)]


async def test_watch_derived_events_are_recorded_once_per_uid_and_resource_version(store: EventStore) -> None:
    def observed(rv: str) -> NewEvent:
        return NewEvent("NodeObserved", {"rv": rv}, observed=ObservedVersion("node-uid", rv))

    assert len(await store.append("node/n1", [observed("10")])) == 1
    assert await store.append("node/n1", [observed("10")]) == []  # re-delivered watch event
    assert len(await store.append("node/n1", [observed("10"), observed("11"), observed("11")])) == 1
    assert [e.data["rv"] for e in await store.read_stream("node/n1")] == ["10", "11"]


async def test_subscribers_are_woken_after_commit(store: EventStore) -> None:
    seen: list[int] = []

    async def follow() -> None:
        async for event in store.subscribe(after=0):
            seen.append(event.position)
            if len(seen) == 3:
                return

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0)
    await store.append("s/1", [ev()])
    await store.append("s/1", [ev(), ev()])
    async with asyncio.timeout(5):
        await follower
    assert seen == [1, 2, 3]


async def test_read_all_paginates_and_filters_by_time(store: EventStore) -> None:
    first = await store.append("s/1", [ev(), ev()])
    later = await store.append("s/1", [ev()])
    assert [e.position for e in await store.read_all(after=1, limit=1)] == [2]
    until = first[-1].recorded_at
    assert [e.position for e in await store.read_all(until=until)] == [1, 2]
    assert later[0].recorded_at >= until


async def test_stream_names_are_checked(store: EventStore) -> None:
    with pytest.raises(InvalidInput):
        await store.append("", [ev()])


async def test_data_round_trips_as_json(store: EventStore) -> None:
    data = {"nested": {"list": [1, 2.5, None, True]}, "text": "ünïcode"}
    await store.append("s/1", [NewEvent("T", data)], expected_version=ANY)
    [event] = await store.read_stream("s/1")
    assert event.data == json.loads(json.dumps(data))
