"""Contract tests: CRDs are served on creation, with schema defaults, validation and immutable spec."""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiException

from tests.sim.fixtures import GROUP, PLURAL, VERSION, compute_domain, compute_domain_crd

MERGE = "application/merge-patch+json"


@pytest.fixture
async def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


async def test_custom_resource_is_404_until_its_crd_exists(
    api: client.ApiClient, custom: client.CustomObjectsApi
) -> None:
    with pytest.raises(ApiException) as caught:
        await custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    assert caught.value.status == 404
    crd = await client.ApiextensionsV1Api(api).create_custom_resource_definition(compute_domain_crd())
    assert {c.type: c.status for c in crd.status.conditions}["Established"] == "True"
    listed = await custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    assert listed["kind"] == "ComputeDomainList" and listed["items"] == []


async def test_schema_defaults_are_applied(api: client.ApiClient, custom: client.CustomObjectsApi) -> None:
    await client.ApiextensionsV1Api(api).create_custom_resource_definition(compute_domain_crd())
    created = await custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, compute_domain("cd1")
    )
    assert created["spec"]["numNodes"] == 0
    assert created["spec"]["channel"]["allocationMode"] == "Single"
    assert "status" not in created, "status is a subresource: dropped on create"


async def test_spec_is_immutable_but_metadata_and_status_are_not(
    api: client.ApiClient, custom: client.CustomObjectsApi
) -> None:
    await client.ApiextensionsV1Api(api).create_custom_resource_definition(compute_domain_crd())
    await custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, compute_domain("cd1"))
    with pytest.raises(ApiException) as caught:
        await custom.patch_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, "cd1", {"spec": {"numNodes": 4}}, _content_type=MERGE
        )
    assert caught.value.status == 422
    assert "A computeDomain.spec is immutable" in json.loads(caught.value.body)["message"]
    labelled = await custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "cd1", {"metadata": {"labels": {"a": "b"}}}, _content_type=MERGE
    )
    assert labelled["metadata"]["labels"] == {"a": "b"}
    status = await custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", PLURAL, "cd1", {"status": {"status": "Ready"}}, _content_type=MERGE
    )
    assert status["status"]["status"] == "Ready"
    assert status["spec"]["numNodes"] == 0


async def test_schema_violations_are_422(api: client.ApiClient, custom: client.CustomObjectsApi) -> None:
    await client.ApiextensionsV1Api(api).create_custom_resource_definition(compute_domain_crd())
    bad = compute_domain("cd1")
    bad["spec"]["channel"]["allocationMode"] = "Some"
    with pytest.raises(ApiException) as caught:
        await custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, bad)
    assert caught.value.status == 422
    missing = compute_domain("cd2")
    del missing["spec"]["channel"]
    with pytest.raises(ApiException) as required:
        await custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, missing)
    assert required.value.status == 422


async def test_deleting_the_crd_stops_serving_and_removes_objects(
    api: client.ApiClient, custom: client.CustomObjectsApi
) -> None:
    extensions = client.ApiextensionsV1Api(api)
    await extensions.create_custom_resource_definition(compute_domain_crd())
    await custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, compute_domain("cd1"))
    await extensions.delete_custom_resource_definition(f"{PLURAL}.{GROUP}")
    with pytest.raises(ApiException) as caught:
        await custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    assert caught.value.status == 404
    await extensions.create_custom_resource_definition(compute_domain_crd())
    relisted = await custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    assert relisted["items"] == []


async def test_custom_object_status_write_with_finalizer_lifecycle(
    api: client.ApiClient, custom: client.CustomObjectsApi
) -> None:
    await client.ApiextensionsV1Api(api).create_custom_resource_definition(compute_domain_crd())
    body = compute_domain("cd1")
    body["metadata"]["finalizers"] = ["resource.nvidia.com/computeDomain"]
    await custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body)
    marked = await custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "cd1")
    assert marked["metadata"]["deletionTimestamp"]
    await custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "cd1", {"metadata": {"finalizers": []}}, _content_type=MERGE
    )
    with pytest.raises(ApiException) as caught:
        await custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "cd1")
    assert caught.value.status == 404


async def test_unknown_fields_are_pruned(api: client.ApiClient, custom: client.CustomObjectsApi) -> None:
    await client.ApiextensionsV1Api(api).create_custom_resource_definition(compute_domain_crd())
    body = compute_domain("cd1")
    body["spec"]["channel"]["typo"] = "dropped"
    body["extra"] = {"also": "dropped"}
    created = await custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body)
    assert "typo" not in created["spec"]["channel"] and "extra" not in created
    status = await custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "cd1",
        {"status": {"status": "Ready", "readyNodes": 3}},
        _content_type=MERGE,
    )
    assert status["status"] == {"status": "Ready"}
