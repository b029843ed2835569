"""The list-then-watch loop: every change exactly once across 410s, dropped and stalled connections."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from cdctl.k8s.informer import Change, Informer, Observation, Synced, is_stale
from cdctl.k8s.resources import ResourceType
from cdctl.k8s.rest import KubeApi
from tests.k8s.fakeapi import FakeCollection, start

CONFIG_MAPS = ResourceType("", "v1", "configmaps", "ConfigMap", True)


@pytest.fixture
async def collection() -> AsyncIterator[tuple[FakeCollection, KubeApi]]:
    fake = FakeCollection()
    runner, url = await start(fake)
    client = ApiClient(Configuration(host=url))
    try:
        yield fake, KubeApi(client)
    finally:
        await client.close()
        await runner.cleanup()


class Recorder:
    """Runs an informer in a task and collects what it yields."""

    def __init__(self, informer: Informer) -> None:
        self.informer = informer
        self.items: list[Observation | Synced] = []
        self._arrived = asyncio.Condition()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for item in self.informer.observe():
            async with self._arrived:
                self.items.append(item)
                self._arrived.notify_all()

    @property
    def observations(self) -> list[tuple[Change, str, str]]:
        return [
            (item.change, item.name, item.obj["data"]["v"])
            for item in self.items
            if isinstance(item, Observation)
        ]

    async def wait_for(self, count: int, kind: type = Observation) -> None:
        async with self._arrived:
            await asyncio.wait_for(
                self._arrived.wait_for(lambda: sum(isinstance(i, kind) for i in self.items) >= count), 10
            )

    async def stop(self) -> None:
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task


def informer(api: KubeApi, **kwargs: float) -> Informer:
    return Informer(api, CONFIG_MAPS, namespace="default", min_backoff_s=0.01, max_backoff_s=0.02, **kwargs)


async def test_list_then_watch_emits_every_change_once(collection: tuple[FakeCollection, KubeApi]) -> None:
    fake, api = collection
    await fake.put("a", "1")
    recorder = Recorder(informer(api))
    await recorder.wait_for(1, Synced)
    await fake.put("a", "2")
    await fake.put("b", "1")
    await fake.delete("a")
    await recorder.wait_for(4)
    await recorder.stop()
    assert recorder.observations == [
        (Change.ADDED, "a", "1"),
        (Change.MODIFIED, "a", "2"),
        (Change.ADDED, "b", "1"),
        (Change.DELETED, "a", "2"),
    ]
    assert fake.watch_requests[0]["resourceVersion"] == "1"
    assert fake.watch_requests[0]["allowWatchBookmarks"] == "true"


async def test_gone_relists_and_reports_only_what_changed_meanwhile(
    collection: tuple[FakeCollection, KubeApi],
) -> None:
    fake, api = collection
    await fake.put("a", "1")
    await fake.put("b", "1")
    await fake.put("c", "1")
    recorder = Recorder(informer(api))
    await fake.open_watches(1)
    fake.stall_watches = True
    fake.drop_watches()  # the informer re-lists at rv 3 and its next watch hangs ...
    await recorder.wait_for(2, Synced)
    await fake.open_watches(2)
    # ... while changes happen, and that history is compacted away (so the re-watch gets 410).
    await fake.put("b", "2")
    await fake.delete("c")
    await fake.put("d", "1")
    fake.compact()
    fake.stall_watches = False
    fake.drop_watches()
    await recorder.wait_for(6)
    await recorder.stop()
    assert recorder.observations[:3] == [(Change.ADDED, n, "1") for n in "abc"]
    assert sorted(recorder.observations[3:]) == sorted(
        [(Change.MODIFIED, "b", "2"), (Change.DELETED, "c", "1"), (Change.ADDED, "d", "1")]
    )
    assert len(recorder.observations) == 6


async def test_error_event_410_inside_the_stream_leads_to_a_relist(
    collection: tuple[FakeCollection, KubeApi],
) -> None:
    fake, api = collection
    await fake.put("a", "1")
    fake.inject_error_event = True
    recorder = Recorder(informer(api))
    await recorder.wait_for(2, Synced)
    await fake.put("a", "2")
    await recorder.wait_for(2)
    await recorder.stop()
    assert recorder.observations == [(Change.ADDED, "a", "1"), (Change.MODIFIED, "a", "2")]
    assert fake.list_requests >= 2


async def test_stalled_watch_is_abandoned_and_the_gap_recovered(
    collection: tuple[FakeCollection, KubeApi],
) -> None:
    fake, api = collection
    fake.stall_watches = True
    recorder = Recorder(informer(api, stall_timeout_s=0.2))
    await recorder.wait_for(1, Synced)
    await fake.open_watches(1)
    await fake.put("a", "1")
    fake.stall_watches = False
    await recorder.wait_for(1)
    await recorder.stop()
    assert recorder.observations == [(Change.ADDED, "a", "1")]
    assert fake.list_requests >= 2


async def test_failed_lists_are_retried_until_one_succeeds(
    collection: tuple[FakeCollection, KubeApi],
) -> None:
    fake, api = collection
    await fake.put("a", "1")
    fake.failing_lists = 2
    recorder = Recorder(informer(api))
    await recorder.wait_for(1, Synced)
    await recorder.stop()
    assert fake.list_requests == 3
    assert recorder.observations == [(Change.ADDED, "a", "1")]


def test_staleness_compares_numeric_versions_and_equal_opaque_ones() -> None:
    assert is_stale("5", "5")
    assert is_stale("7", "5")
    assert not is_stale("5", "7")
    assert is_stale("abc", "abc")
    assert not is_stale("abc", "abd")


async def test_watches_that_end_at_once_are_retried_with_growing_backoff(
    collection: tuple[FakeCollection, KubeApi],
) -> None:
    fake, api = collection
    fake.end_watches_at_once = True
    observed = informer(api)
    recorder = Recorder(observed)
    await fake.open_watches(4)
    await recorder.stop()
    assert observed._failures >= 3  # the backoff exponent
    assert fake.list_requests == 1  # an empty but clean watch end is no reason to re-list


async def test_the_transform_shapes_what_is_kept_and_emitted(
    collection: tuple[FakeCollection, KubeApi],
) -> None:
    fake, api = collection
    await fake.put("a", "1")

    def transform(obj: dict[str, Any]) -> dict[str, Any]:
        return {**obj, "data": {"v": obj["data"]["v"] + "!"}}

    recorder = Recorder(Informer(api, CONFIG_MAPS, namespace="default", transform=transform))
    await recorder.wait_for(1, Synced)
    await fake.put("a", "2")
    await recorder.wait_for(2)
    assert [obj["data"]["v"] for obj in recorder.informer.known()] == ["2!"]
    await fake.delete("a")
    await recorder.wait_for(3)
    await recorder.stop()
    assert recorder.observations == [
        (Change.ADDED, "a", "1!"),
        (Change.MODIFIED, "a", "2!"),
        (Change.DELETED, "a", "2!"),
    ]
