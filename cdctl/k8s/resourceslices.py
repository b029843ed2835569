"""The kubelet plugin's ResourceSlice: one pool named after the node, one slice, published and kept.

Called by the plugin (cdctl.plugin.app) after every (re)registration, when the slice disappears or changes
under it, and when the devices change (the fabric completing adds `channel-0`). `SlicePublisher.sync`:
lists this driver's slices on the node (field selectors `spec.driver`, `spec.nodeName`), keeps one slice of
the node's pool and deletes the rest, creates it if missing (generateName `<node>-<driver>-`, ownerReference
to the Node with controller: true, generation one above any seen) and updates it in place, without a
generation bump, when only its devices changed. Objects are built in the v1 shape and converted for a
cluster that serves only v1beta2 (same JSON) or v1beta1 (attributes under `basic`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import structlog

from cdctl.k8s.errors import NotFoundError
from cdctl.k8s.resources import RESOURCE_GROUP, ResourceType
from cdctl.k8s.rest import JsonObject, KubeApi

log = structlog.get_logger("cdctl.k8s.resourceslices")


def resource_slices(version: str) -> ResourceType:
    return ResourceType(RESOURCE_GROUP, version, "resourceslices", "ResourceSlice", False)


@dataclass(frozen=True, slots=True)
class PublishedDevice:
    """A device of the slice with the Go driver's attributes: `type` (string) and `id` (int).

    `shares`, when set, makes it a device many claims share (DRA consumable capacity, resource.k8s.io
    `allowMultipleAllocations`): capacity `shares` of which each allocation consumes exactly one (the
    capacity's requestPolicy), so the scheduler hands it to at most that many claims at once."""

    name: str
    type: str
    id: int
    shares: int = 0

    def to_v1(self) -> JsonObject:
        out: JsonObject = {
            "name": self.name,
            "attributes": {"type": {"string": self.type}, "id": {"int": self.id}},
        }
        if self.shares:
            out["allowMultipleAllocations"] = True
            out["capacity"] = {
                SHARES_CAPACITY: {
                    "value": str(self.shares),
                    "requestPolicy": {"default": "1", "validValues": ["1"]},
                }
            }
        return out


# The capacity of a shared device: how many claims may hold it at once.
SHARES_CAPACITY = "claims"


def allows_multiple_allocations(device: JsonObject) -> bool:
    """Whether a device as the API server stored it (v1 or v1beta1 shape) is multi-allocatable: a server
    whose DRAConsumableCapacity feature is off drops the field on write."""
    shape = device.get("basic") if isinstance(device.get("basic"), dict) else device
    return bool((shape or {}).get("allowMultipleAllocations"))


def devices_for_version(devices: list[PublishedDevice], version: str) -> list[JsonObject]:
    if version == "v1beta1":
        return [
            {"name": d.name, "basic": {k: v for k, v in d.to_v1().items() if k != "name"}} for d in devices
        ]
    return [d.to_v1() for d in devices]


def desired_slice(
    node: str, node_uid: str, driver: str, devices: list[PublishedDevice], version: str, generation: int
) -> JsonObject:
    return {
        "apiVersion": f"{RESOURCE_GROUP}/{version}",
        "kind": "ResourceSlice",
        "metadata": {
            "generateName": f"{node}-{driver}-",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}
            ],
        },
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices_for_version(devices, version),
        },
    }


def _generation(obj: JsonObject) -> int:
    return int(((obj.get("spec") or {}).get("pool") or {}).get("generation") or 0)


class SlicePublisher:
    """Keeps this node's one ResourceSlice equal to the desired devices."""

    def __init__(self, api: KubeApi, *, node: str, node_uid: str, driver: str, version: str) -> None:
        self.api = api
        self.node = node
        self.node_uid = node_uid
        self.driver = driver
        self.version = version
        self.resource = resource_slices(version)
        self.stored: list[JsonObject] = []  # the devices of the slice as the API server last stored them

    async def list_own(self) -> list[JsonObject]:
        listing = await self.api.list_objects(
            self.resource.collection_path(),
            fieldSelector=f"spec.driver={self.driver},spec.nodeName={self.node}",
        )
        items = [i for i in listing.get("items") or [] if (i.get("spec") or {}).get("driver") == self.driver]
        return sorted(items, key=lambda i: str((i.get("metadata") or {}).get("name", "")))

    async def _delete(self, obj: JsonObject) -> None:
        meta = obj.get("metadata") or {}
        try:
            await self.api.delete(self.resource.object_path(None, str(meta["name"])), uid=meta.get("uid"))
        except NotFoundError:
            pass

    async def withdraw(self) -> int:
        """Delete every ResourceSlice of this driver on this node (a node with nothing to offer publishes
        no slice rather than an empty one); returns how many were deleted."""
        existing = await self.list_own()
        for obj in existing:
            log.info("withdrawing ResourceSlice", name=obj["metadata"].get("name"))
            await self._delete(obj)
        return len(existing)

    async def sync(self, devices: list[PublishedDevice], *, bump: bool = False) -> str:
        """Make the cluster match; returns "created", "updated" or "unchanged". `bump` republishes the pool
        with its generation one higher even when the devices are the same (the node's clique changed, so what
        a scheduler knows of the old pool is stale). API errors propagate."""
        existing = await self.list_own()
        keep = next(
            (s for s in existing if ((s.get("spec") or {}).get("pool") or {}).get("name") == self.node), None
        )
        for other in existing:
            if other is not keep:
                log.info("deleting obsolete ResourceSlice", name=other["metadata"].get("name"))
                await self._delete(other)
        top = max((_generation(s) for s in existing), default=0)
        if keep is None:
            body = desired_slice(self.node, self.node_uid, self.driver, devices, self.version, top + 1)
            created = await self.api.create(self.resource.collection_path(), body)
            self.stored = list((created.get("spec") or {}).get("devices") or [])
            log.info(
                "published ResourceSlice", name=created.get("metadata", {}).get("name"), devices=len(devices)
            )
            return "created"
        generation = _generation(keep) + (1 if bump else 0)
        want = desired_slice(self.node, self.node_uid, self.driver, devices, self.version, generation)
        spec = keep.get("spec") or {}
        if (
            spec.get("devices") == want["spec"]["devices"]
            and spec.get("pool") == want["spec"]["pool"]
            and spec.get("nodeName") == self.node
        ):
            self.stored = list(spec.get("devices") or [])
            return "unchanged"
        updated = copy.deepcopy(keep)
        updated["spec"]["devices"] = want["spec"]["devices"]
        updated["spec"]["pool"] = want["spec"]["pool"]
        updated["spec"]["nodeName"] = self.node
        replaced = await self.api.replace(
            self.resource.object_path(None, str(keep["metadata"]["name"])), updated
        )
        self.stored = list(((replaced or {}).get("spec") or {}).get("devices") or [])
        log.info("updated ResourceSlice in place", name=keep["metadata"].get("name"), devices=len(devices))
        return "updated"


def is_own_slice(obj: dict[str, Any], driver: str, node: str) -> bool:
    spec = obj.get("spec") or {}
    return spec.get("driver") == driver and spec.get("nodeName") == node
