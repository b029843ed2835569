"""Contract tests: resource.k8s.io v1 and v1beta1 serve the same objects, each in its own shape."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client

from tests.sim.fixtures import DRIVER


def _v1_slice(name: str, node: str) -> dict[str, object]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}}
            ],
        },
    }


async def test_v1_slice_reads_back_in_v1beta1_shape(api: client.ApiClient) -> None:
    await client.ResourceV1Api(api).create_resource_slice(_v1_slice("s1", "n1"))
    beta = await client.ResourceV1beta1Api(api).read_resource_slice("s1")
    assert beta.api_version == "resource.k8s.io/v1beta1"
    device = beta.spec.devices[0]
    assert device.name == "channel-0"
    assert device.basic.attributes["type"].string == "channel"


async def test_v1beta1_claim_reads_back_with_exactly(api: client.ApiClient) -> None:
    beta = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c1"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "channel", "deviceClassName": "cls", "allocationMode": "ExactCount", "count": 1}
                ]
            }
        },
    }
    await client.ResourceV1beta1Api(api).create_namespaced_resource_claim("default", beta)
    claim = await client.ResourceV1Api(api).read_namespaced_resource_claim("c1", "default")
    request = claim.spec.devices.requests[0]
    assert request.exactly.device_class_name == "cls"
    assert request.exactly.count == 1


async def test_claim_spec_is_immutable_and_status_is_a_subresource(api: client.ApiClient) -> None:
    resource = client.ResourceV1Api(api)
    body = {
        "metadata": {"name": "c1"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "cls"}}]}},
    }
    created = await resource.create_namespaced_resource_claim("default", body)
    status = {"status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}]}}
    updated = await resource.patch_namespaced_resource_claim_status("c1", "default", status)
    assert updated.status.reserved_for[0].uid == "u1"
    assert updated.metadata.generation == created.metadata.generation
    try:
        await resource.patch_namespaced_resource_claim(
            "c1",
            "default",
            {"spec": {"devices": {"requests": [{"name": "other", "exactly": {"deviceClassName": "x"}}]}}},
        )
    except client.ApiException as error:
        assert error.status == 422
    else:
        raise AssertionError("a claim spec change must be refused")


async def test_watch_in_v1beta1_sees_v1_writes(api: client.ApiClient) -> None:
    import asyncio

    from kubernetes_asyncio import watch

    beta = client.ResourceV1beta1Api(api)
    start = (await beta.list_resource_slice()).metadata.resource_version
    await client.ResourceV1Api(api).create_resource_slice(_v1_slice("s1", "n1"))
    async with watch.Watch() as w, asyncio.timeout(10):
        async for event in w.stream(beta.list_resource_slice, resource_version=start, timeout_seconds=30):
            assert event["type"] == "ADDED"
            assert event["raw_object"]["apiVersion"] == "resource.k8s.io/v1beta1"
            assert "basic" in event["raw_object"]["spec"]["devices"][0]
            break


async def test_v1beta2_serves_the_v1_shape(api: client.ApiClient) -> None:
    await client.ResourceV1Api(api).create_resource_slice(_v1_slice("s1", "n1"))
    listed = await client.ResourceV1beta2Api(api).list_resource_slice()
    # The list says its version; a built-in list's items carry none, as a real server writes them.
    assert (listed.api_version, listed.items[0].api_version) == ("resource.k8s.io/v1beta2", None)
    assert listed.items[0].spec.devices[0].attributes["id"].int == 0


async def test_slice_driver_and_pool_name_are_immutable(api: client.ApiClient) -> None:
    resource = client.ResourceV1Api(api)
    await resource.create_resource_slice(_v1_slice("s1", "n1"))
    with pytest.raises(client.ApiException) as caught:
        await resource.patch_resource_slice("s1", {"spec": {"pool": {"name": "other"}}})
    assert caught.value.status == 422
    bumped = await resource.patch_resource_slice("s1", {"spec": {"pool": {"generation": 2}}})
    assert bumped.spec.pool.generation == 2
