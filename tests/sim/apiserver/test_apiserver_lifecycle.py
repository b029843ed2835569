"""Contract tests: finalizers and deletionTimestamp, ownerReference GC, namespace termination."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiException

from cdctl.sim.apiserver.errors import BadRequest
from cdctl.sim.apiserver.handlers import grace_period_option
from cdctl.sim.apiserver.store import ObjectStore
from tests.sim.fixtures import pod

MERGE = "application/merge-patch+json"


async def _exists(core: client.CoreV1Api, name: str, namespace: str = "default") -> bool:
    try:
        await core.read_namespaced_pod(name, namespace)
    except ApiException as error:
        assert error.status == 404
        return False
    return True


async def test_delete_with_finalizer_marks_then_last_removal_deletes(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    body = pod("p1")
    body["metadata"]["finalizers"] = ["example.com/a", "example.com/b"]
    await core.create_namespaced_pod("default", body)
    await core.delete_namespaced_pod("p1", "default")
    marked = await core.read_namespaced_pod("p1", "default")
    assert marked.metadata.deletion_timestamp is not None
    await core.patch_namespaced_pod("p1", "default", [{"op": "remove", "path": "/metadata/finalizers/0"}])
    assert await _exists(core, "p1")
    await core.patch_namespaced_pod("p1", "default", {"metadata": {"finalizers": None}})
    assert not await _exists(core, "p1")


async def test_owner_deletion_collects_dependents_without_other_owners(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    owner = await core.create_namespaced_config_map("default", {"metadata": {"name": "owner"}})
    other = await core.create_namespaced_config_map("default", {"metadata": {"name": "other"}})

    def ref(obj: client.V1ConfigMap) -> dict[str, str]:
        return {"apiVersion": "v1", "kind": "ConfigMap", "name": obj.metadata.name, "uid": obj.metadata.uid}

    only = pod("only-owned")
    only["metadata"]["ownerReferences"] = [ref(owner)]
    shared = pod("shared")
    shared["metadata"]["ownerReferences"] = [ref(owner), ref(other)]
    await core.create_namespaced_pod("default", only)
    await core.create_namespaced_pod("default", shared)
    await core.delete_namespaced_config_map("owner", "default")
    assert not await _exists(core, "only-owned")
    survivor = await core.read_namespaced_pod("shared", "default")
    assert [r.uid for r in survivor.metadata.owner_references] == [other.metadata.uid]


async def test_orphan_propagation_keeps_dependents(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    owner = await core.create_namespaced_config_map("default", {"metadata": {"name": "owner"}})
    dependent = pod("dep")
    dependent["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    ]
    await core.create_namespaced_pod("default", dependent)
    await core.delete_namespaced_config_map("owner", "default", propagation_policy="Orphan")
    kept = await core.read_namespaced_pod("dep", "default")
    assert not kept.metadata.owner_references


async def test_finalizer_holds_a_collected_dependent(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    owner = await core.create_namespaced_config_map("default", {"metadata": {"name": "owner"}})
    dependent = pod("dep")
    dependent["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    ]
    dependent["metadata"]["finalizers"] = ["example.com/hold"]
    await core.create_namespaced_pod("default", dependent)
    await core.delete_namespaced_config_map("owner", "default")
    held = await core.read_namespaced_pod("dep", "default")
    assert held.metadata.deletion_timestamp is not None


async def test_namespace_deletion_removes_contents_then_itself(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespace({"metadata": {"name": "scratch"}})
    held = pod("held")
    held["metadata"]["finalizers"] = ["example.com/hold"]
    await core.create_namespaced_pod("scratch", held)
    await core.create_namespaced_pod("scratch", pod("free"))
    await core.delete_namespace("scratch")
    terminating = await core.read_namespace("scratch")
    assert terminating.status.phase == "Terminating"
    assert not await _exists(core, "free", "scratch")
    with pytest.raises(ApiException) as caught:
        await core.create_namespaced_pod("scratch", pod("late"))
    assert caught.value.status == 403
    await core.patch_namespaced_pod("held", "scratch", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as gone:
        await core.read_namespace("scratch")
    assert gone.value.status == 404


async def test_delete_precondition_on_uid_is_409(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod("p1"))
    with pytest.raises(ApiException) as caught:
        await core.delete_namespaced_pod("p1", "default", body={"preconditions": {"uid": "not-the-uid"}})
    assert caught.value.status == 409
    assert await _exists(core, "p1")


async def test_no_new_finalizers_on_an_object_being_deleted(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    body = pod("p1")
    body["metadata"]["finalizers"] = ["example.com/a"]
    await core.create_namespaced_pod("default", body)
    await core.delete_namespaced_pod("p1", "default")
    with pytest.raises(ApiException) as caught:
        await core.patch_namespaced_pod(
            "p1",
            "default",
            {"metadata": {"finalizers": ["example.com/a", "example.com/b"]}},
            _content_type=MERGE,
        )
    assert caught.value.status == 422


def test_the_last_finalizers_removal_is_the_deletion_one_revision_one_event() -> None:
    """As the API server's registry deletes during an update that leaves a deleted object no finalizer:
    no MODIFIED before the DELETED; the event carries the object as stored, the answer the object as the
    request left it."""
    store = ObjectStore()
    maps = store.type_of("", "configmaps")
    store.create(maps, "default", {"metadata": {"name": "held", "finalizers": ["example.com/a"]}})
    marked = store.delete(maps, "default", "held")
    watcher = store.watch(maps, "default")
    before = int(store.resource_version)
    released = {**marked, "metadata": {**marked["metadata"], "finalizers": []}}
    answer = store.update(maps, "default", "held", released)
    assert not store.exists_name(maps, "default", "held")
    assert int(store.resource_version) == before + 1
    event = watcher.queue.get_nowait()
    assert watcher.queue.empty()
    assert event is not None and event.type == "DELETED"
    assert event.obj["metadata"]["finalizers"] == ["example.com/a"]
    assert event.obj["metadata"]["resourceVersion"] == str(before + 1)
    assert answer["metadata"]["deletionTimestamp"] and not answer["metadata"].get("finalizers")
    assert answer["metadata"]["resourceVersion"] == marked["metadata"]["resourceVersion"]


async def test_a_pod_on_a_node_is_deleted_gracefully_with_the_grace_period_the_client_gives(
    api: client.ApiClient,
) -> None:
    """As a real server: a pod on a node is marked (kubectl shows it Terminating) for the DeleteOptions'
    gracePeriodSeconds, and removed only by a delete with a grace period of 0 (its kubelet's last step)."""
    core = client.CoreV1Api(api)
    body = pod("p1")
    body["spec"]["nodeName"] = "n1"
    await core.create_namespaced_pod("default", body)
    answered = await core.delete_namespaced_pod("p1", "default", grace_period_seconds=7)
    assert answered.metadata.deletion_grace_period_seconds == 7
    assert (await core.read_namespaced_pod("p1", "default")).metadata.deletion_timestamp is not None
    await core.delete_namespaced_pod("p1", "default", body=client.V1DeleteOptions(grace_period_seconds=0))
    assert not await _exists(core, "p1")


def test_a_grace_period_that_is_not_a_number_is_a_bad_request() -> None:
    with pytest.raises(BadRequest, match="gracePeriodSeconds: 'soon': must be an integer"):
        grace_period_option("soon")
    assert (grace_period_option(None), grace_period_option("5"), grace_period_option(0)) == (None, 5, 0)
