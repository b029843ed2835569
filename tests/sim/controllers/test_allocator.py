"""The DRA allocator stand-in: CEL selectors, exactly/count/allocationMode, no double allocation, binding."""

from __future__ import annotations

from typing import Any

from cdctl.sim.apiserver.claimrefs import allocated_node
from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.controllers.allocator import Allocator
from cdctl.sim.controllers.claimtemplates import ClaimTemplateController
from tests.sim.standins import (
    CHANNEL_CLASS,
    DAEMON_CLASS,
    DRIVER,
    add_classes,
    add_node,
    add_pod,
    add_slice,
    add_template,
    claims,
    get,
)


def _cluster(nodes: int = 2) -> ObjectStore:
    store = ObjectStore()
    add_classes(store)
    for index in range(nodes):
        add_node(store, f"n{index}", labels={"gpu": "yes"})
        add_slice(store, f"n{index}")
    return store


def _run(store: ObjectStore) -> None:
    ClaimTemplateController(store).reconcile()
    Allocator(store).reconcile()


def _claim_of(store: ObjectStore, pod: str) -> dict[str, Any]:
    name = get(store, "", "pods", pod)["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    return get(store, "resource.k8s.io", "resourceclaims", name)


def test_allocates_the_matching_device_and_binds_the_pod() -> None:
    store = _cluster(nodes=1)
    add_template(store, "tmpl")
    pod = add_pod(store, "w", "tmpl")
    _run(store)
    claim = _claim_of(store, "w")
    allocation = claim["status"]["allocation"]
    assert allocation["devices"]["results"] == [
        {"request": "channel", "driver": DRIVER, "pool": "n0", "device": "channel-0"}
    ]
    assert allocation["devices"]["config"] == [
        {
            "source": "FromClass",
            "requests": ["channel"],
            "opaque": {"driver": DRIVER, "parameters": {"fromClass": CHANNEL_CLASS}},
        },
        {
            "source": "FromClaim",
            "requests": ["channel"],
            "opaque": {"driver": DRIVER, "parameters": {"domainID": "d1"}},
        },
    ]
    assert allocated_node(claim) == "n0"
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "w", "uid": pod["metadata"]["uid"]}
    ]
    assert get(store, "", "pods", "w")["spec"]["nodeName"] == "n0"


def test_never_gives_one_device_to_two_claims() -> None:
    store = _cluster(nodes=2)
    add_template(store, "tmpl")
    for name in ("a", "b", "c"):
        add_pod(store, name, "tmpl")
    _run(store)
    _run(store)
    nodes = [get(store, "", "pods", name)["spec"].get("nodeName") for name in ("a", "b", "c")]
    assert sorted(n for n in nodes if n) == ["n0", "n1"]
    assert nodes.count(None) == 1, "only two channel-0 devices exist"
    results = [
        (r["pool"], r["device"])
        for c in claims(store)
        for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])
    ]
    assert len(results) == len(set(results)) == 2


def test_bound_pod_gets_devices_on_its_own_node_only() -> None:
    store = _cluster(nodes=2)
    add_template(store, "daemon", DAEMON_CLASS, request="daemon")
    add_pod(store, "d", "daemon", node="n1")
    _run(store)
    claim = _claim_of(store, "d")
    assert claim["status"]["allocation"]["devices"]["results"][0]["device"] == "daemon-0"
    assert allocated_node(claim) == "n1"


def test_node_selector_limits_candidates() -> None:
    store = _cluster(nodes=2)
    add_node(store, "special", labels={"zone": "z"})
    add_slice(store, "special")
    add_template(store, "tmpl")
    add_pod(store, "w", "tmpl", node_selector={"zone": "z"})
    _run(store)
    assert get(store, "", "pods", "w")["spec"]["nodeName"] == "special"


def test_allocation_mode_all_takes_every_matching_device() -> None:
    store = _cluster(nodes=1)
    store.create(
        store.type_of("resource.k8s.io", "deviceclasses"),
        "",
        {
            "metadata": {"name": "any-cd"},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
        },
    )
    add_template(store, "all", "any-cd", allocationMode="All")
    add_pod(store, "w", "all")
    _run(store)
    devices = sorted(r["device"] for r in _claim_of(store, "w")["status"]["allocation"]["devices"]["results"])
    assert devices == ["channel-0", "daemon-0"]


def test_count_larger_than_available_leaves_the_pod_pending() -> None:
    store = _cluster(nodes=1)
    add_template(store, "two", CHANNEL_CLASS, allocationMode="ExactCount", count=2)
    add_pod(store, "w", "two")
    _run(store)
    assert "allocation" not in (_claim_of(store, "w").get("status") or {})
    assert not get(store, "", "pods", "w")["spec"].get("nodeName")


def test_shared_claim_is_reserved_for_each_pod_on_the_same_node() -> None:
    store = _cluster(nodes=2)
    claim_type = store.type_of("resource.k8s.io", "resourceclaims")
    store.create(
        claim_type,
        "default",
        {
            "metadata": {"name": "shared"},
            "spec": {
                "devices": {"requests": [{"name": "channel", "exactly": {"deviceClassName": CHANNEL_CLASS}}]}
            },
        },
    )
    add_pod(store, "p1", claim="shared")
    add_pod(store, "p2", claim="shared")
    _run(store)
    claim = get(store, "resource.k8s.io", "resourceclaims", "shared")
    assert sorted(r["name"] for r in claim["status"]["reservedFor"]) == ["p1", "p2"]
    assert {get(store, "", "pods", p)["spec"]["nodeName"] for p in ("p1", "p2")} == {allocated_node(claim)}


def test_released_device_is_allocated_again() -> None:
    store = _cluster(nodes=1)
    add_template(store, "tmpl")
    add_pod(store, "first", "tmpl")
    add_pod(store, "second", "tmpl")
    _run(store)
    assert not get(store, "", "pods", "second")["spec"].get("nodeName")
    pods = store.type_of("", "pods")
    store.delete(pods, "default", "first")
    _run(store)
    assert not get(store, "", "pods", "second")["spec"].get("nodeName"), "a terminating pod keeps its claim"
    store.delete(pods, "default", "first", grace_period_s=0)  # its kubelet's last step: the pod is gone
    _run(store)
    _run(store)
    assert get(store, "", "pods", "second")["spec"]["nodeName"] == "n0"
