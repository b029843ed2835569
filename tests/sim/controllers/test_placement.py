"""The allocator's scheduling filters: extended resources (nvidia.com/gpu), required pod (anti-)affinity."""

from __future__ import annotations

from typing import Any

import pytest

from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.controllers.allocator import Allocator
from cdctl.sim.controllers.placement import Placement, extended_requests, term_selector
from tests.sim.standins import add_node, get, kind

CLIQUE = "nvidia.com/gpu.clique"


def _gpu_node(store: ObjectStore, name: str, clique: str, gpus: int = 4) -> None:
    add_node(store, name, labels={CLIQUE: clique, "kubernetes.io/hostname": name})
    node = get(store, "", "nodes", name, namespace="")
    node["status"] = {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "144"}}
    store.update(kind(store, "", "nodes"), "", name, node, subresource="status")


def _worker(store: ObjectStore, name: str, *, gpus: int = 4, affinity: dict[str, Any] | None = None) -> None:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "w", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]
    }
    if affinity:
        spec["affinity"] = affinity
    store.create(
        kind(store, "", "pods"), "default", {"metadata": {"name": name, "labels": {"app": "w"}}, "spec": spec}
    )


def _node_of(store: ObjectStore, pod: str) -> str | None:
    return get(store, "", "pods", pod)["spec"].get("nodeName")


def _same_clique() -> dict[str, Any]:
    term = {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["w"]}]}}
    return {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{**term, "topologyKey": CLIQUE}]}
    }


def test_a_node_takes_no_more_gpus_than_it_advertises() -> None:
    store = ObjectStore()
    _gpu_node(store, "n0", "a")
    _gpu_node(store, "n1", "a")
    for name in ("w0", "w1", "w2"):
        _worker(store, name)
    Allocator(store).reconcile()
    assert sorted(filter(None, (_node_of(store, p) for p in ("w0", "w1", "w2")))) == ["n0", "n1"]
    assert [p for p in ("w0", "w1", "w2") if _node_of(store, p) is None] == ["w2"]


def test_two_pods_of_two_gpus_share_a_node() -> None:
    store = ObjectStore()
    _gpu_node(store, "n0", "a")
    _worker(store, "w0", gpus=2)
    _worker(store, "w1", gpus=2)
    Allocator(store).reconcile()
    assert _node_of(store, "w0") == _node_of(store, "w1") == "n0"


def test_pod_affinity_keeps_the_group_in_the_first_pods_clique() -> None:
    store = ObjectStore()
    for name, clique in (("n0", "a"), ("n1", "a"), ("n2", "b"), ("n3", "b")):
        _gpu_node(store, name, clique)
    for index in range(3):
        _worker(store, f"w{index}", affinity=_same_clique())
    Allocator(store).reconcile()
    assert [_node_of(store, f"w{i}") for i in range(3)] == ["n0", "n1", None]


def test_without_affinity_the_third_pod_spills_into_another_clique() -> None:
    store = ObjectStore()
    for name, clique in (("n0", "a"), ("n1", "a"), ("n2", "b")):
        _gpu_node(store, name, clique)
    for index in range(3):
        _worker(store, f"w{index}")
    Allocator(store).reconcile()
    assert [_node_of(store, f"w{i}") for i in range(3)] == ["n0", "n1", "n2"]


def test_pod_affinity_follows_a_pod_already_running_elsewhere() -> None:
    store = ObjectStore()
    for name, clique in (("n0", "a"), ("n1", "b"), ("n2", "b")):
        _gpu_node(store, name, clique)
    _worker(store, "first", gpus=1)
    pods = kind(store, "", "pods")
    first = get(store, "", "pods", "first")
    first["spec"]["nodeName"] = "n2"
    store.update(pods, "default", "first", first)
    _worker(store, "w0", gpus=2, affinity=_same_clique())
    Allocator(store).reconcile()
    assert _node_of(store, "w0") == "n1"


def test_anti_affinity_spreads_pods_over_hostnames() -> None:
    store = ObjectStore()
    _gpu_node(store, "n0", "a", gpus=8)
    _gpu_node(store, "n1", "a", gpus=8)
    term = {"labelSelector": {"matchLabels": {"app": "w"}}, "topologyKey": "kubernetes.io/hostname"}
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    for index in range(3):
        _worker(store, f"w{index}", gpus=1, affinity=anti)
    Allocator(store).reconcile()
    assert [_node_of(store, f"w{i}") for i in range(3)] == ["n0", "n1", None]


def test_requests_limits_and_selectors_are_read_as_kubernetes_does() -> None:
    pod = {
        "spec": {
            "containers": [
                {"resources": {"limits": {"nvidia.com/gpu": "4", "memory": "1Gi"}}},
                {"resources": {"requests": {"example.com/nic": 1}, "limits": {"example.com/nic": 2}}},
            ]
        }
    }
    assert extended_requests(pod) == {"nvidia.com/gpu": 4, "example.com/nic": 1}
    selector = term_selector(
        {
            "matchLabels": {"app": "w"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["x"]}],
        }
    )
    assert selector.matches({"app": "w"}) and not selector.matches({"app": "w", "tier": "x"})
    with pytest.raises(ValueError, match="operator"):
        term_selector({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]})
    assert Placement.of([], []).fits({"metadata": {"uid": "u"}, "spec": {}}, "nowhere")
