"""Contract tests: merge, JSON, strategic merge and apply patches through kubernetes_asyncio."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiException

from tests.sim.fixtures import GROUP, PLURAL, VERSION, compute_domain, compute_domain_crd, pod


async def test_strategic_merge_merges_containers_by_name(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    body = pod("p1")
    body["spec"]["containers"].append({"name": "side", "image": "old"})
    await core.create_namespaced_pod("default", body)
    patched = await core.patch_namespaced_pod(
        "p1",
        "default",
        {"spec": {"containers": [{"name": "side", "image": "new"}]}},
        _content_type="application/strategic-merge-patch+json",
    )
    assert [(c.name, c.image) for c in patched.spec.containers] == [("main", "busybox"), ("side", "new")]


async def test_merge_patch_replaces_lists(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    body = pod("p1")
    body["spec"]["containers"].append({"name": "side", "image": "old"})
    await core.create_namespaced_pod("default", body)
    patched = await core.patch_namespaced_pod(
        "p1",
        "default",
        {"spec": {"containers": [{"name": "only", "image": "x"}]}},
        _content_type="application/merge-patch+json",
    )
    assert [c.name for c in patched.spec.containers] == ["only"]


async def test_strategic_merge_conditions_by_type_on_status(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod("p1"))
    ready = {"type": "Ready", "status": "False"}
    scheduled = {"type": "PodScheduled", "status": "True"}
    await core.patch_namespaced_pod_status("p1", "default", {"status": {"conditions": [ready, scheduled]}})
    patched = await core.patch_namespaced_pod_status(
        "p1", "default", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    )
    assert {c.type: c.status for c in patched.status.conditions} == {"Ready": "True", "PodScheduled": "True"}


async def test_json_patch_with_test_op_guards(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod("p1", labels={"a": "1"}))
    ops = [
        {"op": "test", "path": "/metadata/labels/a", "value": "2"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "3"},
    ]
    with pytest.raises(ApiException) as caught:
        await core.patch_namespaced_pod("p1", "default", ops)
    assert caught.value.status == 422
    ops[0]["value"] = "1"
    patched = await core.patch_namespaced_pod("p1", "default", ops)
    assert patched.metadata.labels == {"a": "3"}


async def test_patch_with_stale_resource_version_is_409(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    created = await core.create_namespaced_pod("default", pod("p1"))
    await core.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"x": "1"}}})
    with pytest.raises(ApiException) as caught:
        await core.patch_namespaced_pod(
            "p1",
            "default",
            {"metadata": {"resourceVersion": created.metadata.resource_version, "labels": {"y": "2"}}},
            _content_type="application/merge-patch+json",
        )
    assert caught.value.status == 409


@pytest.fixture
async def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    await client.ApiextensionsV1Api(api).create_custom_resource_definition(compute_domain_crd())
    return client.CustomObjectsApi(api)


async def test_custom_object_dict_patch_defaults_to_json_patch_and_is_rejected(
    custom: client.CustomObjectsApi,
) -> None:
    await custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, compute_domain("cd1"))
    with pytest.raises(ApiException) as caught:
        await custom.patch_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, "cd1", {"metadata": {"labels": {"a": "b"}}}
        )
    assert caught.value.status in (400, 422)
    patched = await custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "cd1",
        {"metadata": {"labels": {"a": "b"}}},
        _content_type="application/merge-patch+json",
    )
    assert patched["metadata"]["labels"] == {"a": "b"}


async def test_strategic_merge_on_custom_object_is_415(custom: client.CustomObjectsApi) -> None:
    await custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, compute_domain("cd1"))
    with pytest.raises(ApiException) as caught:
        await custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            PLURAL,
            "cd1",
            {"metadata": {"labels": {"a": "b"}}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert caught.value.status == 415


async def test_server_side_apply_creates_then_merges(custom: client.CustomObjectsApi) -> None:
    applied = await custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "cd1",
        compute_domain("cd1", app="x"),
        _content_type="application/apply-patch+yaml",
        field_manager="test",
        force=True,
    )
    assert applied["metadata"]["uid"]
    again = await custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "cd1",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ComputeDomain",
            "metadata": {"name": "cd1", "labels": {"team": "y"}},
        },
        _content_type="application/apply-patch+yaml",
        field_manager="test",
        force=True,
    )
    assert again["metadata"]["labels"] == {"app": "x", "team": "y"}
    assert again["metadata"]["uid"] == applied["metadata"]["uid"]
