"""The ResourceSlice publisher's decisions against an in-memory collection with the API's semantics."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest

from cdctl.k8s.errors import NotFoundError
from cdctl.k8s.resourceslices import PublishedDevice, SlicePublisher
from tests import realanswers

DRIVER = "compute-domain.nvidia.com"
BOTH = [PublishedDevice("channel-0", "channel", 0), PublishedDevice("daemon-0", "daemon", 0)]


class SliceStore:
    """list (field selectors ignored: the publisher filters), create with generateName, replace, delete."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []
        self._n = itertools.count()

    async def list_objects(self, path: str, **query: Any) -> dict[str, Any]:
        self.calls.append("list")
        return {"items": [copy.deepcopy(o) for o in self.objects.values()]}

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("create")
        obj = copy.deepcopy(body)
        name = obj["metadata"].pop("generateName") + f"x{next(self._n)}"
        obj["metadata"].update(name=name, uid=f"uid-{name}", resourceVersion="1")
        self.objects[name] = obj
        return obj

    async def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("replace")
        self.objects[path.rsplit("/", 1)[1]] = copy.deepcopy(body)
        return body

    async def delete(self, path: str, *, uid: str | None = None) -> dict[str, Any]:
        self.calls.append("delete")
        name = path.rsplit("/", 1)[1]
        if name not in self.objects:
            raise NotFoundError(404, "NotFound", name)
        return self.objects.pop(name)


def publisher(store: SliceStore, version: str = "v1") -> SlicePublisher:
    return SlicePublisher(store, node="node-a", node_uid="nu-1", driver=DRIVER, version=version)  # type: ignore[arg-type]


async def test_creates_one_slice_owned_by_the_node() -> None:
    store = SliceStore()
    assert await publisher(store).sync(BOTH) == "created"
    (obj,) = store.objects.values()
    assert obj["metadata"]["name"].startswith("node-a-compute-domain.nvidia.com-")
    assert obj["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "nu-1", "controller": True}
    ]
    spec = obj["spec"]
    assert spec["pool"] == {"name": "node-a", "generation": 1, "resourceSliceCount": 1}
    assert spec["nodeName"] == "node-a" and spec["driver"] == DRIVER
    assert spec["devices"] == [
        {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}},
        {"name": "daemon-0", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}},
    ]
    assert await publisher(store).sync(BOTH) == "unchanged"
    assert store.calls[-1] == "list"


async def test_device_change_updates_in_place_without_a_generation_bump() -> None:
    store = SliceStore()
    await publisher(store).sync(BOTH[1:])  # fabric not ready: daemon only
    (name,) = store.objects
    assert await publisher(store).sync(BOTH) == "updated"
    assert list(store.objects) == [name]
    assert store.objects[name]["spec"]["pool"]["generation"] == 1
    assert [d["name"] for d in store.objects[name]["spec"]["devices"]] == ["channel-0", "daemon-0"]


async def test_other_slices_of_the_driver_on_the_node_are_deleted_and_a_lost_slice_recreated() -> None:
    store = SliceStore()
    await publisher(store).sync(BOTH)
    stray = copy.deepcopy(next(iter(store.objects.values())))
    stray["metadata"].update(name="stray", uid="uid-stray")
    stray["spec"]["pool"] = {"name": "old-pool", "generation": 4, "resourceSliceCount": 1}
    store.objects["stray"] = stray
    assert await publisher(store).sync(BOTH) == "unchanged"
    assert "stray" not in store.objects and len(store.objects) == 1
    store.objects.clear()  # the kubelet wiped the node's slices
    assert await publisher(store).sync(BOTH) == "created"
    assert len(store.objects) == 1


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
async def test_older_api_versions_get_converted_objects(version: str) -> None:
    store = SliceStore()
    await publisher(store, version).sync(BOTH[:1])
    (obj,) = store.objects.values()
    assert obj["apiVersion"] == f"resource.k8s.io/{version}"
    if version == "v1beta1":
        assert obj["spec"]["devices"] == [
            {"name": "channel-0", "basic": {"attributes": {"type": {"string": "channel"}, "id": {"int": 0}}}}
        ]
    else:
        assert obj["spec"]["devices"][0]["attributes"]["id"] == {"int": 0}


@pytest.mark.parametrize("served", realanswers.objects("resourceslices"), ids=lambda s: s["metadata"]["name"])
async def test_a_slice_as_a_real_api_server_answered_it_is_unchanged(served: dict[str, Any]) -> None:
    """The idempotency check runs on the real kube-apiserver v1.36's answer: a plugin that publishes the same
    devices again writes nothing."""
    store = SliceStore()
    store.objects[served["metadata"]["name"]] = copy.deepcopy(served)
    devices = [
        PublishedDevice(d["name"], d["attributes"]["type"]["string"], d["attributes"]["id"]["int"])
        for d in served["spec"]["devices"]
    ]
    node = served["spec"]["nodeName"]
    owner = served["metadata"]["ownerReferences"][0]["uid"]
    publish = SlicePublisher(store, node=node, node_uid=owner, driver=DRIVER, version="v1")  # type: ignore[arg-type]
    assert await publish.sync(devices) == "unchanged"
    assert store.calls == ["list"]
