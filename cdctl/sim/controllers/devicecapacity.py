"""Which devices are in use and what a multi-allocatable device has left, as the scheduler's allocator sees.

Used by cdctl.sim.controllers.allocator. A device without `allowMultipleAllocations` is held by the one
allocation result that names it. A device with it (DRA consumable capacity) may be named by many results,
each with its own `shareID` and a `consumedCapacity` per capacity of the device; the sum of what they
consume never passes the capacity's `value`. What one allocation consumes: the request's
`capacity.requests[<name>]`, else the capacity's `requestPolicy.default`, else the whole value, rounded up
to the policy's `validValues` or `validRange` (none fits: the device does not fit). As the real allocator,
a result that names a shared device without a `shareID` (written while the feature was off) holds it whole.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

DeviceKey = tuple[str, str, str]  # (driver, pool, device)


class CapacityError(Exception):
    """A quantity this stand-in cannot read (it handles whole numbers)."""


def quantity(text: Any) -> int:
    """A Kubernetes quantity that is a whole number ("8", 8); anything else raises CapacityError."""
    try:
        value = int(str(text))
    except ValueError:
        raise CapacityError(f"capacity quantity {text!r} is not a whole number") from None
    if value < 0:
        raise CapacityError(f"capacity quantity {text!r} is negative")
    return value


def _rounded(wanted: int, policy: dict[str, Any]) -> int | None:
    """What `wanted` consumes under the capacity's request policy; None when no valid value is as large."""
    valid = policy.get("validValues")
    if valid:
        fitting = sorted(v for v in (quantity(x) for x in valid) if v >= wanted)
        return fitting[0] if fitting else None
    span = policy.get("validRange")
    if span:
        low = quantity(span.get("min", 0))
        step = quantity(span["step"]) if span.get("step") else 0
        amount = max(wanted, low)
        if step:
            amount = low + -(-(amount - low) // step) * step
        if span.get("max") is not None and amount > quantity(span["max"]):
            return None
        return amount
    return wanted


def consumption(device: dict[str, Any], shape: dict[str, Any]) -> dict[str, int] | None:
    """What one allocation of the request `shape` takes of each capacity of the shared `device`; None
    when some capacity cannot serve it."""
    requested = ((shape.get("capacity") or {}).get("requests")) or {}
    out: dict[str, int] = {}
    for name, capacity in (device.get("capacity") or {}).items():
        capacity = capacity or {}
        policy = capacity.get("requestPolicy") or {}
        if name in requested:
            wanted = quantity(requested[name])
        elif policy.get("default") is not None:
            wanted = quantity(policy["default"])
        else:
            wanted = quantity(capacity.get("value", 0))
        amount = _rounded(wanted, policy)
        if amount is None:
            return None
        out[name] = amount
    return out


@dataclass
class Usage:
    """Devices held whole, and what the allocations of each shared device consume."""

    whole: set[DeviceKey] = field(default_factory=set)
    consumed: dict[DeviceKey, dict[str, int]] = field(default_factory=dict)

    def copy(self) -> Usage:
        return Usage(set(self.whole), {k: dict(v) for k, v in self.consumed.items()})

    def adopt(self, other: Usage) -> None:
        self.whole, self.consumed = other.whole, other.consumed

    def add_result(self, result: dict[str, Any]) -> None:
        key = (result["driver"], result["pool"], result["device"])
        if not result.get("shareID"):
            self.whole.add(key)
            return
        held = self.consumed.setdefault(key, {})
        for name, amount in (result.get("consumedCapacity") or {}).items():
            held[name] = held.get(name, 0) + quantity(amount)

    def fits(self, key: DeviceKey, device: dict[str, Any], shape: dict[str, Any]) -> dict[str, int] | None:
        """What an allocation of `shape` would consume of `device`, or None when it is not free: a device
        held whole; a plain device any allocation names; a shared one without room left."""
        if key in self.whole:
            return None
        if not device.get("allowMultipleAllocations"):
            return None if key in self.consumed else {}
        wanted = consumption(device, shape)
        if wanted is None:
            return None
        held = self.consumed.get(key, {})
        for name, amount in wanted.items():
            total = quantity(((device.get("capacity") or {}).get(name) or {}).get("value", 0))
            if held.get(name, 0) + amount > total:
                return None
        return wanted

    def take(self, key: DeviceKey, device: dict[str, Any], amounts: dict[str, int]) -> dict[str, Any]:
        """Record one allocation; the fields its result carries (a shared device: shareID and what it
        consumes)."""
        if not device.get("allowMultipleAllocations"):
            self.whole.add(key)
            return {}
        held = self.consumed.setdefault(key, {})
        for name, amount in amounts.items():
            held[name] = held.get(name, 0) + amount
        return {"shareID": str(uuid.uuid4()), "consumedCapacity": {n: str(a) for n, a in amounts.items()}}
