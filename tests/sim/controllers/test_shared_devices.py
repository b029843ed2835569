"""The allocator stand-in and multi-allocatable devices (DRA consumable capacity), as the real scheduler:
many claims share one device while its capacity lasts; a plain device stays one claim's; and the API server
drops the feature's fields while it is off, so the same slice then serves one claim."""

from __future__ import annotations

from typing import Any

import pytest

from cdctl.plugin.channels import shared_channel_devices
from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.controllers.allocator import Allocator
from cdctl.sim.controllers.claimtemplates import ClaimTemplateController
from cdctl.sim.controllers.devicecapacity import CapacityError, Usage, consumption
from cdctl.sim.rack import chart as sim_chart
from tests.sim.standins import DRIVER, add_node, add_pod, add_slice, add_template, get, kind

CHANNEL_CLASS = "compute-domain-channel.nvidia.com"


def _cluster(*, consumable: bool, shares: int, nodes: int = 1) -> ObjectStore:
    store = ObjectStore()
    store.features.dra_consumable_capacity = consumable
    for cls in sim_chart.device_classes(
        {"resources": {"computeDomains": {"imex": {"isolation": "channel"}}}}
    ):
        store.create(kind(store, "resource.k8s.io", "deviceclasses"), "", cls)
    for index in range(nodes):
        add_node(store, f"n{index}")
        add_slice(store, f"n{index}", devices=[d.to_v1() for d in shared_channel_devices(True, shares)])
    add_template(store, "tmpl", device_class=CHANNEL_CLASS)
    return store


def _run(store: ObjectStore) -> None:
    ClaimTemplateController(store).reconcile()
    Allocator(store).reconcile()


def _results(store: ObjectStore, pod: str) -> list[dict[str, Any]]:
    name = get(store, "", "pods", pod)["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim = get(store, "resource.k8s.io", "resourceclaims", name)
    return list(((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or [])


def test_many_claims_share_the_device_up_to_its_capacity() -> None:
    store = _cluster(consumable=True, shares=3)
    for name in ("a", "b", "c", "d"):
        add_pod(store, name, "tmpl")
    _run(store)
    _run(store)
    placed = {name: _results(store, name) for name in ("a", "b", "c", "d")}
    shared = [r for name in ("a", "b", "c") for r in placed[name]]
    assert [r["device"] for r in shared] == ["channel"] * 3
    assert len({r["shareID"] for r in shared}) == 3
    assert all(r["consumedCapacity"] == {"claims": "1"} for r in shared)
    assert placed["d"] == []  # capacity 3 is spent: the fourth pod waits
    assert not get(store, "", "pods", "d")["spec"].get("nodeName")


def test_a_deallocated_share_frees_its_capacity() -> None:
    store = _cluster(consumable=True, shares=1)
    add_pod(store, "a", "tmpl")
    add_pod(store, "b", "tmpl")
    _run(store)
    assert _results(store, "a") and not _results(store, "b")
    name = get(store, "", "pods", "a")["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claims = kind(store, "resource.k8s.io", "resourceclaims")
    claim = get(store, "resource.k8s.io", "resourceclaims", name)
    store.update(claims, "default", name, {**claim, "status": {}}, subresource="status")
    store.delete(kind(store, "", "pods"), "default", "a")  # else the allocator would give it back to `a`
    _run(store)
    assert [r["device"] for r in _results(store, "b")] == ["channel"]


def test_without_the_feature_the_server_drops_it_and_the_device_serves_one_claim() -> None:
    store = _cluster(consumable=False, shares=3)
    stored = get(store, "resource.k8s.io", "resourceslices", f"n0-{DRIVER}", namespace="")
    (device,) = stored["spec"]["devices"]
    assert "allowMultipleAllocations" not in device
    assert "requestPolicy" not in device["capacity"]["claims"]
    add_pod(store, "a", "tmpl")
    add_pod(store, "b", "tmpl")
    _run(store)
    assert _results(store, "a") == [
        {"request": "channel", "driver": DRIVER, "pool": "n0", "device": "channel"}
    ]
    assert _results(store, "b") == []


def test_slot_devices_are_one_claim_each() -> None:
    store = ObjectStore()
    for cls in sim_chart.device_classes(
        {"resources": {"computeDomains": {"imex": {"isolation": "channel"}}}}
    ):
        store.create(kind(store, "resource.k8s.io", "deviceclasses"), "", cls)
    add_node(store, "n0")
    add_slice(store, "n0", devices=[d.to_v1() for d in shared_channel_devices(False, 2)])
    add_template(store, "tmpl", device_class=CHANNEL_CLASS)
    for name in ("a", "b", "c"):
        add_pod(store, name, "tmpl")
    _run(store)
    devices = [[r["device"] for r in _results(store, n)] for n in ("a", "b", "c")]
    assert devices == [["channel-slot-0"], ["channel-slot-1"], []]


def test_consumption_follows_the_request_policy() -> None:
    device = {
        "allowMultipleAllocations": True,
        "capacity": {
            "mem": {
                "value": "10",
                "requestPolicy": {"default": "2", "validRange": {"min": "2", "step": "2"}},
            },
            "whole": {"value": "4"},
        },
    }
    assert consumption(device, {}) == {"mem": 2, "whole": 4}
    assert consumption(device, {"capacity": {"requests": {"mem": "3", "whole": "1"}}}) == {
        "mem": 4,
        "whole": 1,
    }
    usage = Usage()
    key = ("d", "p", "x")
    amounts = usage.fits(key, device, {"capacity": {"requests": {"whole": "3"}}})
    assert amounts == {"mem": 2, "whole": 3}
    usage.take(key, device, amounts)
    assert usage.fits(key, device, {"capacity": {"requests": {"whole": "2"}}}) is None  # 3 + 2 > 4
    with pytest.raises(CapacityError):
        consumption({"capacity": {"c": {"value": "1Gi"}}}, {})
