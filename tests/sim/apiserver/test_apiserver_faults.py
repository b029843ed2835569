"""Faults on demand: error shares and queued errors, delays, dropped watches, restarts that keep state."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client import ApiException

from cdctl.sim.apiserver.server import ApiServer
from cdctl.sim.apiserver.settings import ServerSettings
from tests.sim.fixtures import pod


async def test_queued_errors_answer_the_next_requests(apiserver: ApiServer, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    apiserver.faults.fail_next(429, 503)
    codes = []
    for _ in range(2):
        with pytest.raises(ApiException) as caught:
            await core.list_namespaced_pod("default")
        codes.append(caught.value.status)
    assert codes == [429, 503]
    assert (await core.list_namespaced_pod("default")).items == []


async def test_error_share_fails_that_share_and_heals(apiserver: ApiServer, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    apiserver.faults.fail_share(0.5, codes=(500,))
    failures = 0
    for _ in range(40):
        try:
            await core.list_namespaced_pod("default")
        except ApiException as error:
            assert error.status == 500
            failures += 1
    assert 5 < failures < 35
    apiserver.faults.heal()
    await core.list_namespaced_pod("default")


async def test_429_carries_retry_after(apiserver: ApiServer, api: client.ApiClient) -> None:
    apiserver.faults.fail_next(429)
    with pytest.raises(ApiException) as caught:
        await client.CoreV1Api(api).list_namespaced_pod("default")
    assert caught.value.headers["Retry-After"] == "1"


async def test_delay_postpones_answers_without_failing(apiserver: ApiServer, api: client.ApiClient) -> None:
    apiserver.faults.delay(0.05)
    created = await client.CoreV1Api(api).create_namespaced_pod("default", pod("p1"))
    assert created.metadata.name == "p1"


async def test_drop_watches_ends_open_streams(apiserver: ApiServer, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    ended = asyncio.Event()

    async def follow() -> list[str]:
        seen = []
        async with watch.Watch() as w:
            async for event in w.stream(core.list_namespaced_pod, "default", timeout_seconds=300):
                seen.append(event["type"])
        ended.set()
        return seen

    task = asyncio.create_task(follow())
    async with asyncio.timeout(10):
        while apiserver.store.hub.open_count == 0:  # noqa: ASYNC110 - the hub has no "watch opened" event
            await asyncio.sleep(0.01)
    assert apiserver.drop_watches() == 1
    async with asyncio.timeout(10):
        assert await task == []
    assert ended.is_set()


async def test_restart_keeps_objects_and_port(apiserver: ApiServer, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    created = await core.create_namespaced_pod("default", pod("p1"))
    port = apiserver.port
    await apiserver.restart()
    assert apiserver.port == port and apiserver.restarts == 1
    again = await core.read_namespaced_pod("p1", "default")
    assert again.metadata.uid == created.metadata.uid
    assert again.metadata.resource_version == created.metadata.resource_version


async def test_a_watch_whose_client_left_is_released() -> None:
    import aiohttp

    settings = ServerSettings(disconnect_check_s=0.05)
    async with ApiServer(settings=settings) as server:
        async with aiohttp.ClientSession() as session:
            response = await session.get(
                f"{server.url}/api/v1/namespaces/default/pods", params={"watch": "true"}
            )
            assert response.status == 200
            async with asyncio.timeout(10):
                while server.store.hub.open_count == 0:  # noqa: ASYNC110 - no "watch opened" event
                    await asyncio.sleep(0.01)
            response.close()
        async with asyncio.timeout(10):
            while server.store.hub.open_count:  # noqa: ASYNC110 - no "watch released" event
                await asyncio.sleep(0.01)
