"""NoExecute taints evict as kube-controller-manager's taint-eviction controller does, after the pods'
tolerationSeconds (300 s by the DefaultTolerationSeconds admission plugin), DaemonSet pods never."""

from __future__ import annotations

from typing import Any

import pytest

from cdctl.sim.apiserver.errors import NotFound
from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.controllers.daemonsets import DaemonSetController
from cdctl.sim.controllers.nodelifecycle import UNREACHABLE_TAINT, NodeLifecycleController
from cdctl.sim.controllers.tainteviction import TaintEvictionController, eviction_delay
from cdctl.sim.node.noderegistration import register, renew_lease
from tests.sim.controllers.test_nodelifecycle import Clock
from tests.sim.standins import add_pod, get

UNREACHABLE = {"key": UNREACHABLE_TAINT, "effect": "NoExecute"}
OTHER = {"key": "example.com/maintenance", "value": "now", "effect": "NoExecute"}


@pytest.mark.parametrize(
    ("tolerations", "taints", "delay"),
    [
        ([], [], None),  # no taint
        ([], [{"key": "x", "effect": "NoSchedule"}], None),  # not NoExecute
        ([], [UNREACHABLE], 0.0),  # not tolerated: at once
        ([{"key": UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoExecute"}], [UNREACHABLE], None),
        ([{"key": UNREACHABLE_TAINT, "operator": "Exists", "tolerationSeconds": 30}], [UNREACHABLE], 30.0),
        ([{"operator": "Exists"}], [UNREACHABLE, OTHER], None),  # tolerates everything for ever
        (
            [{"key": UNREACHABLE_TAINT, "operator": "Exists", "tolerationSeconds": 300}],
            [UNREACHABLE, OTHER],
            0.0,
        ),
        (
            [
                {"key": UNREACHABLE_TAINT, "operator": "Exists", "tolerationSeconds": 300},
                {"key": OTHER["key"], "operator": "Equal", "value": "now", "tolerationSeconds": 60},
            ],
            [UNREACHABLE, OTHER],
            60.0,  # the smallest of the matching ones
        ),
        ([{"key": OTHER["key"], "operator": "Equal", "value": "later"}], [OTHER], 0.0),  # value differs
        ([{"key": UNREACHABLE_TAINT, "operator": "Exists", "tolerationSeconds": -5}], [UNREACHABLE], 0.0),
    ],
)
def test_the_eviction_delay_is_the_smallest_matching_toleration(
    tolerations: list[dict[str, Any]], taints: list[dict[str, Any]], delay: float | None
) -> None:
    assert eviction_delay(tolerations, taints) == delay


def test_a_new_pod_tolerates_a_silent_node_for_300_seconds_unless_it_says_otherwise() -> None:
    store = ObjectStore()
    defaulted = add_pod(store, "plain")["spec"]["tolerations"]
    assert sorted((t["key"], t["effect"], t["tolerationSeconds"]) for t in defaulted) == [
        ("node.kubernetes.io/not-ready", "NoExecute", 300),
        ("node.kubernetes.io/unreachable", "NoExecute", 300),
    ]
    pods = store.type_of("", "pods")
    own = {"key": UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}
    spec = {"containers": [{"name": "c", "image": "i"}], "tolerations": [own]}
    created = store.create(pods, "default", {"metadata": {"name": "own"}, "spec": spec})
    assert [t.get("tolerationSeconds") for t in created["spec"]["tolerations"]] == [5, 300]


def _exists(store: ObjectStore, name: str) -> bool:
    """Not evicted: an evicted pod on a silent node stays, Terminating, until its kubelet is back."""
    try:
        pod = get(store, "", "pods", name)
    except NotFound:
        return False
    return not pod["metadata"].get("deletionTimestamp")


def test_an_evicted_pod_is_marked_as_a_disruption_target_and_deleted_with_its_grace_period() -> None:
    store, clock = ObjectStore(), Clock()
    register(store, "n1", {}, "192.168.0.1")
    add_pod(store, "p", node="n1")
    node = get(store, "", "nodes", "n1", namespace="")
    node["spec"] = {"taints": [UNREACHABLE]}
    store.update(store.type_of("", "nodes"), "", "n1", node)
    eviction = TaintEvictionController(store, clock=clock)
    eviction.reconcile()
    clock.now += 300
    eviction.reconcile()
    pod = get(store, "", "pods", "p")
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 30, "Terminating: its kubelet must end it"
    (condition,) = [c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert (condition["status"], condition["reason"]) == ("True", "DeletionByTaintManager")


def test_pods_leave_a_silent_node_after_their_toleration_daemon_pods_never() -> None:
    store, clock = ObjectStore(), Clock()
    register(store, "n1", {}, "192.168.0.1")
    renew_lease(store, "n1", 40)
    pods = store.type_of("", "pods")
    add_pod(store, "default-300s", node="n1")
    spec = {
        "nodeName": "n1",
        "containers": [{"name": "c", "image": "i"}],
        "tolerations": [
            {"key": UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}
        ],
    }
    store.create(pods, "default", {"metadata": {"name": "short"}, "spec": spec})
    daemonsets = store.type_of("apps", "daemonsets")
    template = {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    store.create(daemonsets, "default", {"metadata": {"name": "d"}, "spec": {
        "selector": {"matchLabels": {"app": "d"}}, "template": template}})  # fmt: skip
    DaemonSetController(store).reconcile()
    (daemon,) = [
        p["metadata"]["name"] for p in store.pods_on_node("n1") if p["metadata"]["name"].startswith("d-")
    ]
    lifecycle = NodeLifecycleController(store, grace_s=40.0, clock=clock)
    eviction = TaintEvictionController(store, clock=clock)
    lifecycle.reconcile()
    clock.now += 41  # the kubelet went silent: Unknown and tainted
    lifecycle.reconcile()
    eviction.reconcile()
    assert all(_exists(store, n) for n in ("default-300s", "short", daemon)), "tolerated for now"
    clock.now += 10
    eviction.reconcile()
    assert not _exists(store, "short") and _exists(store, "default-300s")
    clock.now += 290
    eviction.reconcile()
    assert not _exists(store, "default-300s")
    clock.now += 10_000
    eviction.reconcile()
    assert _exists(store, daemon), "a DaemonSet's pod tolerates the silent node for ever"
    assert eviction.evicted == ["default/short", "default/default-300s"]


def test_a_taint_gone_before_the_deadline_evicts_nobody_and_a_new_one_starts_the_count_again() -> None:
    store, clock = ObjectStore(), Clock()
    register(store, "n1", {}, "192.168.0.1")
    add_pod(store, "p", node="n1")
    nodes = store.type_of("", "nodes")
    eviction = TaintEvictionController(store, clock=clock)

    def taint(on: bool) -> None:
        node = get(store, "", "nodes", "n1", namespace="")
        node["spec"] = {"taints": [UNREACHABLE]} if on else {}
        store.update(nodes, "", "n1", node)

    taint(True)
    eviction.reconcile()
    clock.now += 299
    taint(False)
    eviction.reconcile()
    clock.now += 10
    taint(True)
    eviction.reconcile()
    clock.now += 299
    eviction.reconcile()
    assert _exists(store, "p")
    clock.now += 1
    eviction.reconcile()
    assert not _exists(store, "p")
