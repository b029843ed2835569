"""Contract tests: object CRUD through the real kubernetes_asyncio client against the simulated API server."""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiException

from tests.sim.fixtures import node, pod


async def test_create_returns_201_object_with_server_fields(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    created = await core.create_namespaced_pod("default", pod("p1"))
    assert created is not None, "the client maps only 201 to a returned object"
    assert created.metadata.uid
    assert created.metadata.creation_timestamp is not None
    assert int(created.metadata.resource_version) > 0
    assert created.metadata.generation == 1
    assert created.status.phase == "Pending"


async def test_every_write_bumps_the_global_resource_version(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    first = await core.create_namespaced_pod("default", pod("p1"))
    second = await core.create_node(node("n1"))
    patched = await core.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"a": "b"}}})
    versions = [
        int(first.metadata.resource_version),
        int(second.metadata.resource_version),
        int(patched.metadata.resource_version),
    ]
    assert versions == sorted(versions) and len(set(versions)) == 3
    listed = await core.list_namespaced_pod("default")
    assert int(listed.metadata.resource_version) == versions[-1]


async def test_generate_name_gives_distinct_names_with_the_prefix(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    body = {"metadata": {"generateName": "worker-"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    names = {(await core.create_namespaced_pod("default", body)).metadata.name for _ in range(5)}
    assert len(names) == 5
    assert all(n.startswith("worker-") and len(n) == len("worker-") + 5 for n in names)


async def test_create_of_existing_name_is_409_already_exists(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod("p1"))
    with pytest.raises(ApiException) as caught:
        await core.create_namespaced_pod("default", pod("p1"))
    assert caught.value.status == 409
    assert json.loads(caught.value.body)["reason"] == "AlreadyExists"


async def test_missing_object_is_404_with_status_body(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    with pytest.raises(ApiException) as caught:
        await core.read_namespaced_pod("absent", "default")
    assert caught.value.status == 404
    status = json.loads(caught.value.body)
    assert status["kind"] == "Status" and status["reason"] == "NotFound" and status["code"] == 404
    assert status["message"] == 'pods "absent" not found'
    assert status["details"]["name"] == "absent"


async def test_create_in_missing_namespace_is_404(api: client.ApiClient) -> None:
    with pytest.raises(ApiException) as caught:
        await client.CoreV1Api(api).create_namespaced_pod("nowhere", pod("p1"))
    assert caught.value.status == 404


async def test_replace_with_stale_resource_version_is_409_conflict(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    stale = await core.create_namespaced_pod("default", pod("p1"))
    await core.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"x": "1"}}})
    stale.metadata.labels = {"x": "2"}
    with pytest.raises(ApiException) as caught:
        await core.replace_namespaced_pod("p1", "default", stale)
    assert caught.value.status == 409
    assert json.loads(caught.value.body)["reason"] == "Conflict"
    current = await core.read_namespaced_pod("p1", "default")
    assert current.metadata.labels == {"x": "1"}


async def test_replace_with_current_resource_version_succeeds(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    current = await core.create_namespaced_pod("default", pod("p1"))
    current.metadata.labels = {"x": "2"}
    replaced = await core.replace_namespaced_pod("p1", "default", current)
    assert replaced.metadata.labels == {"x": "2"}
    assert int(replaced.metadata.resource_version) > int(current.metadata.resource_version)


async def test_main_endpoint_ignores_status_and_status_endpoint_ignores_spec(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod("p1"))
    await core.patch_namespaced_pod(
        "p1", "default", {"status": {"phase": "Running"}, "metadata": {"labels": {"a": "1"}}}
    )
    after_main = await core.read_namespaced_pod("p1", "default")
    assert after_main.status.phase == "Pending"
    assert after_main.metadata.labels == {"a": "1"}
    await core.patch_namespaced_pod_status(
        "p1",
        "default",
        {"status": {"phase": "Running"}, "spec": {"nodeName": "n9"}, "metadata": {"labels": {"b": "2"}}},
    )
    after_status = await core.read_namespaced_pod("p1", "default")
    assert after_status.status.phase == "Running"
    assert after_status.spec.node_name is None
    assert after_status.metadata.labels == {"a": "1"}


async def test_generation_counts_spec_changes_only(api: client.ApiClient) -> None:
    apps = client.AppsV1Api(api)
    body = {
        "metadata": {"name": "ds"},
        "spec": {
            "selector": {"matchLabels": {"app": "x"}},
            "template": {
                "metadata": {"labels": {"app": "x"}},
                "spec": {"containers": [{"name": "c", "image": "a"}]},
            },
        },
    }
    await apps.create_namespaced_daemon_set("default", body)
    labelled = await apps.patch_namespaced_daemon_set("ds", "default", {"metadata": {"labels": {"l": "v"}}})
    assert labelled.metadata.generation == 1
    status = await apps.patch_namespaced_daemon_set_status("ds", "default", {"status": {"numberReady": 1}})
    assert status.metadata.generation == 1
    changed = await apps.patch_namespaced_daemon_set(
        "ds", "default", {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "b"}]}}}}
    )
    assert changed.metadata.generation == 2


async def test_noop_update_keeps_the_resource_version(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    created = await core.create_namespaced_pod("default", pod("p1", labels={"a": "1"}))
    same = await core.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"a": "1"}}})
    assert same.metadata.resource_version == created.metadata.resource_version


async def test_list_limit_and_continue_page_through_everything(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    for index in range(5):
        await core.create_namespaced_config_map("default", {"metadata": {"name": f"cm{index}"}})
    first = await core.list_namespaced_config_map("default", limit=2)
    assert [c.metadata.name for c in first.items] == ["cm0", "cm1"]
    assert first.metadata._continue
    names = [c.metadata.name for c in first.items]
    token = first.metadata._continue
    while token:
        page = await core.list_namespaced_config_map("default", limit=2, _continue=token)
        names += [c.metadata.name for c in page.items]
        token = page.metadata._continue
    assert names == [f"cm{i}" for i in range(5)]


async def test_cluster_wide_list_spans_namespaces(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespace({"metadata": {"name": "other"}})
    await core.create_namespaced_pod("default", pod("a"))
    await core.create_namespaced_pod("other", pod("b"))
    listed = await core.list_pod_for_all_namespaces()
    assert sorted((p.metadata.namespace, p.metadata.name) for p in listed.items) == [
        ("default", "a"),
        ("other", "b"),
    ]


async def test_pod_binding_sets_node_name(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod("p1"))
    await core.create_namespaced_pod_binding(
        "p1", "default", {"metadata": {"name": "p1"}, "target": {"kind": "Node", "name": "n1"}}
    )
    bound = await core.read_namespaced_pod("p1", "default")
    assert bound.spec.node_name == "n1"


async def test_invalid_name_is_422(api: client.ApiClient) -> None:
    with pytest.raises(ApiException) as caught:
        await client.CoreV1Api(api).create_namespaced_pod("default", pod("Not_Valid"))
    assert caught.value.status == 422


async def test_lease_replace_is_guarded_by_resource_version(api: client.ApiClient) -> None:
    coordination = client.CoordinationV1Api(api)
    lease = await coordination.create_namespaced_lease(
        "kube-system",
        {
            "metadata": {"name": "cdctl-controller"},
            "spec": {
                "holderIdentity": "a",
                "leaseDurationSeconds": 15,
                "acquireTime": "2026-01-01T00:00:00.000000Z",
            },
        },
    )
    lease.spec.holder_identity = "b"
    taken = await coordination.replace_namespaced_lease("cdctl-controller", "kube-system", lease)
    assert taken.spec.holder_identity == "b"
    lease.spec.holder_identity = "c"
    with pytest.raises(ApiException) as caught:
        await coordination.replace_namespaced_lease("cdctl-controller", "kube-system", lease)
    assert caught.value.status == 409


async def test_events_are_listed_by_involved_object(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    for name, target in (("e1", "cd1"), ("e2", "cd2")):
        await core.create_namespaced_event(
            "default",
            {
                "metadata": {"name": name},
                "involvedObject": {"kind": "ComputeDomain", "name": target, "namespace": "default"},
                "reason": "Ready",
                "message": "ok",
                "type": "Normal",
            },
        )
    listed = await core.list_namespaced_event("default", field_selector="involvedObject.name=cd2")
    assert [e.metadata.name for e in listed.items] == ["e2"]


async def test_dry_run_create_persists_nothing(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    answered = await core.create_namespaced_pod("default", pod("p1"), dry_run="All")
    assert answered.metadata.name == "p1"
    assert (await core.list_namespaced_pod("default")).items == []
