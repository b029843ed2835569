"""Contract tests: label and field selectors on list, watch and deletecollection, via kubernetes_asyncio."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiException

from tests.sim.fixtures import DRIVER, pod


async def _names(core: client.CoreV1Api, **kwargs: str) -> list[str]:
    listed = await core.list_namespaced_pod("default", **kwargs)
    return sorted(p.metadata.name for p in listed.items)


@pytest.fixture
async def labelled_pods(api: client.ApiClient) -> client.CoreV1Api:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod("a", node="n1", labels={"app": "x", "tier": "web"}))
    await core.create_namespaced_pod("default", pod("b", node="n2", labels={"app": "y", "tier": "web"}))
    await core.create_namespaced_pod("default", pod("c", labels={"app": "z"}))
    return core


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=x", ["a"]),
        ("app==x", ["a"]),
        ("app!=x", ["b", "c"]),
        ("app in (x,y)", ["a", "b"]),
        ("app notin (x, y)", ["c"]),
        ("tier", ["a", "b"]),
        ("!tier", ["c"]),
        ("tier=web,app!=y", ["a"]),
    ],
)
async def test_label_selector_operators(
    labelled_pods: client.CoreV1Api, selector: str, expected: list[str]
) -> None:
    assert await _names(labelled_pods, label_selector=selector) == expected


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("metadata.name=b", ["b"]),
        ("spec.nodeName=n1", ["a"]),
        ("spec.nodeName!=n1", ["b", "c"]),
        ("metadata.namespace=default,spec.nodeName=n2", ["b"]),
    ],
)
async def test_field_selector(labelled_pods: client.CoreV1Api, selector: str, expected: list[str]) -> None:
    assert await _names(labelled_pods, field_selector=selector) == expected


async def test_unsupported_field_is_400(labelled_pods: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as caught:
        await labelled_pods.list_namespaced_pod("default", field_selector="spec.hostname=x")
    assert caught.value.status == 400


def _slice(name: str, node: str, driver: str) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}}
            ],
        },
    }


async def test_resource_slice_field_selectors_and_delete_collection(api: client.ApiClient) -> None:
    resource = client.ResourceV1Api(api)
    await resource.create_resource_slice(_slice("s1", "n1", DRIVER))
    await resource.create_resource_slice(_slice("s2", "n2", DRIVER))
    await resource.create_resource_slice(_slice("s3", "n1", "gpu.nvidia.com"))
    on_n1 = await resource.list_resource_slice(field_selector=f"spec.nodeName=n1,spec.driver={DRIVER}")
    assert [s.metadata.name for s in on_n1.items] == ["s1"]
    await resource.delete_collection_resource_slice(field_selector="spec.nodeName=n1")
    remaining = await resource.list_resource_slice()
    assert [s.metadata.name for s in remaining.items] == ["s2"]


async def test_non_numeric_limit_is_400(api: client.ApiClient) -> None:
    with pytest.raises(ApiException) as caught:
        await client.CoreV1Api(api).list_namespaced_pod("default", limit="ten")
    assert caught.value.status == 400
