"""Contract tests: list+watch with kubernetes_asyncio's Watch (resourceVersion, 410, bookmarks, timeouts)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client import ApiException

from cdctl.sim.apiserver.server import ApiServer
from tests.sim.fixtures import pod

STEP = 10.0  # generous guard so a broken server fails the test instead of hanging it


async def _collect(stream: Any, count: int) -> list[dict[str, Any]]:
    events = []
    async with asyncio.timeout(STEP):
        async for event in stream:
            events.append(event)
            if len(events) == count:
                break
    return events


async def test_watch_from_list_version_sees_only_later_changes(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod("before"))
    listed = await core.list_namespaced_pod("default")
    await core.create_namespaced_pod("default", pod("p1"))
    await core.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"a": "b"}}})
    await core.delete_namespaced_pod("p1", "default")
    async with watch.Watch() as w:
        stream = w.stream(
            core.list_namespaced_pod,
            "default",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=30,
        )
        events = await _collect(stream, 3)
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "p1"),
        ("MODIFIED", "p1"),
        ("DELETED", "p1"),
    ]
    versions = [int(e["object"].metadata.resource_version) for e in events]
    assert versions == sorted(versions) and versions[0] > int(listed.metadata.resource_version)


async def test_watch_without_version_starts_with_current_objects(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod("existing"))
    async with watch.Watch() as w:
        stream = w.stream(core.list_namespaced_pod, "default", timeout_seconds=30)
        first = await _collect(stream, 1)
        await core.create_namespaced_pod("default", pod("new"))
        second = await _collect(stream, 1)
    assert (first[0]["type"], first[0]["object"].metadata.name) == ("ADDED", "existing")
    assert (second[0]["type"], second[0]["object"].metadata.name) == ("ADDED", "new")


async def test_version_older_than_window_is_410_gone(apiserver: ApiServer, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    old = (await core.list_namespaced_pod("default")).metadata.resource_version
    for index in range(apiserver.settings.history_window + 5):
        await core.create_namespaced_config_map("default", {"metadata": {"name": f"cm{index}"}})
    async with watch.Watch() as w:
        stream = w.stream(core.list_namespaced_pod, "default", resource_version=old, timeout_seconds=30)
        with pytest.raises(ApiException) as caught:
            await _collect(stream, 1)
    assert caught.value.status == 410


async def test_bookmarks_carry_the_current_version(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_config_map("default", {"metadata": {"name": "bump"}})
    current = (await core.list_namespaced_pod("default")).metadata.resource_version
    async with watch.Watch() as w:
        stream = w.stream(
            core.list_namespaced_pod,
            "default",
            resource_version=current,
            allow_watch_bookmarks=True,
            timeout_seconds=30,
        )
        events = await _collect(stream, 1)
    assert events[0]["type"] == "BOOKMARK"
    assert events[0]["raw_object"]["metadata"]["resourceVersion"] == current


async def test_timeout_seconds_ends_the_stream(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    seen = []
    async with watch.Watch() as w, asyncio.timeout(STEP):
        async for event in w.stream(core.list_namespaced_pod, "default", timeout_seconds=1):
            seen.append(event)
    assert seen == []


async def test_label_change_out_of_selection_arrives_as_deleted(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    start = (await core.list_namespaced_pod("default")).metadata.resource_version
    await core.create_namespaced_pod("default", pod("p1", labels={"app": "x"}))
    await core.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"app": "y"}}})
    await core.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"app": "x"}}})
    async with watch.Watch() as w:
        stream = w.stream(
            core.list_namespaced_pod,
            "default",
            label_selector="app=x",
            resource_version=start,
            timeout_seconds=30,
        )
        events = await _collect(stream, 3)
    assert [e["type"] for e in events] == ["ADDED", "DELETED", "ADDED"]
    # As the real watch cache sends it: the object before the change, at the change's resourceVersion.
    left, back = events[1]["object"].metadata, events[2]["object"].metadata
    assert left.labels == {"app": "x"}
    assert int(left.resource_version) == int(back.resource_version) - 1


async def test_field_selected_watch_of_custom_objects(api: client.ApiClient) -> None:
    from tests.sim.fixtures import GROUP, PLURAL, VERSION, compute_domain, compute_domain_crd

    await client.ApiextensionsV1Api(api).create_custom_resource_definition(compute_domain_crd())
    custom = client.CustomObjectsApi(api)
    start = (await custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL))["metadata"]
    await custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, compute_domain("other"))
    await custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, compute_domain("mine"))
    async with watch.Watch() as w:
        stream = w.stream(
            custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            "default",
            PLURAL,
            field_selector="metadata.name=mine",
            resource_version=start["resourceVersion"],
            timeout_seconds=30,
        )
        events = await _collect(stream, 1)
    assert events[0]["type"] == "ADDED" and events[0]["object"]["metadata"]["name"] == "mine"
