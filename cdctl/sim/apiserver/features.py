"""Feature gates of the simulated API server, and the fields of a disabled feature that a write drops.

The real API server's registry strategies clear the fields of a disabled alpha or beta feature on create and
update (`dropDisabled...Fields`), unless the old object already used them. The simulated server reports
Kubernetes 1.34, where DRA consumable capacity (`DRAConsumableCapacity`) is alpha and off; `ServerSettings`
can turn it on to stand in for 1.36, where it is beta and on. Called by cdctl.sim.apiserver.store on every
create and update of ResourceSlices and ResourceClaims, before admission. What is dropped when it is off:

* ResourceSlice devices: `allowMultipleAllocations`, and each capacity's `requestPolicy`;
* ResourceClaim requests (and subrequests): `capacity`;
* ResourceClaim allocation results: `shareID` and `consumedCapacity`.

The kubelet plugin reads the slice back and falls back to slot devices when the first is gone
(cdctl.plugin.app), so a test of either setting shows what a real cluster of that kind does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from cdctl.sim.apiserver.resources import ResourceType

SLICE_KEY = ("resource.k8s.io", "resourceslices")
CLAIM_KEY = ("resource.k8s.io", "resourceclaims")
TEMPLATE_KEY = ("resource.k8s.io", "resourceclaimtemplates")


@dataclass
class FeatureGates:
    dra_consumable_capacity: bool = False


def _slice_devices(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for device in (obj.get("spec") or {}).get("devices") or []:
        if isinstance(device, dict):
            yield device


def _requests(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for request in (spec.get("devices") or {}).get("requests") or []:
        if not isinstance(request, dict):
            continue
        if isinstance(request.get("exactly"), dict):
            yield request["exactly"]
        yield request
        for sub in request.get("firstAvailable") or []:
            if isinstance(sub, dict):
                yield sub


def _results(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    allocation = (obj.get("status") or {}).get("allocation") or {}
    for result in (allocation.get("devices") or {}).get("results") or []:
        if isinstance(result, dict):
            yield result


def _uses_consumable(key: tuple[str, str], obj: dict[str, Any] | None) -> bool:
    if obj is None:
        return False
    if key == SLICE_KEY:
        return any("allowMultipleAllocations" in d for d in _slice_devices(obj))
    return any("shareID" in r or "consumedCapacity" in r for r in _results(obj))


def drop_disabled_fields(
    gates: FeatureGates, resource_type: ResourceType, new: dict[str, Any], old: dict[str, Any] | None
) -> None:
    """Clear, in place, the fields of disabled features (kept when `old` already used them)."""
    key = resource_type.storage_key
    if gates.dra_consumable_capacity or _uses_consumable(key, old):
        return
    if key == SLICE_KEY:
        for device in _slice_devices(new):
            device.pop("allowMultipleAllocations", None)
            for capacity in (device.get("capacity") or {}).values():
                if isinstance(capacity, dict):
                    capacity.pop("requestPolicy", None)
    elif key in (CLAIM_KEY, TEMPLATE_KEY):
        spec = new.get("spec") or {}
        if key == TEMPLATE_KEY:
            spec = spec.get("spec") or {}
        if old is None:  # the spec is immutable: only a create can bring a field in
            for request in _requests(spec):
                request.pop("capacity", None)
        for result in _results(new):
            result.pop("shareID", None)
            result.pop("consumedCapacity", None)
