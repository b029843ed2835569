"""A lost node as kube-controller-manager sees it: Ready=Unknown and tainted after the grace period, its pods
not Ready, its pods collected once it is deleted, the DaemonSet controller leaving them to that, the scheduler
avoiding the tainted node, and the taints gone when the kubelet reports again."""

from __future__ import annotations

from typing import Any

from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.controllers.allocator import Allocator
from cdctl.sim.controllers.claimtemplates import ClaimTemplateController
from cdctl.sim.controllers.daemonsets import DaemonSetController
from cdctl.sim.controllers.nodelifecycle import UNREACHABLE_TAINT, NodeLifecycleController, node_condition
from cdctl.sim.controllers.podgc import PodGarbageCollector
from cdctl.sim.node.noderegistration import register, renew_lease
from tests.sim.standins import add_classes, add_pod, add_slice, add_template, get


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _running(store: ObjectStore, name: str, node: str) -> dict[str, Any]:
    pods = store.type_of("", "pods")
    pod = add_pod(store, name, node=node)
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return store.update(pods, "default", name, pod, subresource="status")


def _ready(store: ObjectStore, name: str) -> str:
    pod = get(store, "", "pods", name)
    return next(c["status"] for c in pod["status"]["conditions"] if c["type"] == "Ready")


def _node(store: ObjectStore, name: str) -> dict[str, Any]:
    return get(store, "", "nodes", name, namespace="")


def test_a_silent_node_goes_unknown_and_tainted_and_its_pods_not_ready_until_its_kubelet_is_back() -> None:
    store, clock = ObjectStore(), Clock()
    for name in ("n1", "n2"):
        register(store, name, {}, "192.168.0.1")
        renew_lease(store, name, 40)
    _running(store, "on-n1", "n1")
    _running(store, "on-n2", "n2")
    lifecycle = NodeLifecycleController(store, grace_s=40.0, clock=clock)
    lifecycle.reconcile()
    clock.now += 30
    renew_lease(store, "n2", 40)  # n1's kubelet has gone silent
    lifecycle.reconcile()
    assert node_condition(_node(store, "n1"))["status"] == "True", "still within the grace period"
    clock.now += 11
    lifecycle.reconcile()
    lost = _node(store, "n1")
    ready = node_condition(lost)
    assert (ready["status"], ready["reason"]) == ("Unknown", "NodeStatusUnknown")
    assert sorted(t["effect"] for t in lost["spec"]["taints"] if t["key"] == UNREACHABLE_TAINT) == [
        "NoExecute",
        "NoSchedule",
    ]
    assert (_ready(store, "on-n1"), _ready(store, "on-n2")) == ("False", "True")
    assert node_condition(_node(store, "n2"))["status"] == "True"
    register(store, "n1", {}, "192.168.0.1")  # the kubelet is back and posts Ready
    renew_lease(store, "n1", 40)
    lifecycle.reconcile()
    assert "taints" not in _node(store, "n1")["spec"]


def test_pods_of_a_deleted_node_are_collected_after_the_quarantine_and_the_daemonset_leaves_them() -> None:
    store, clock = ObjectStore(), Clock()
    register(store, "n1", {"cd": "yes"}, "192.168.0.1")
    daemonsets = store.type_of("apps", "daemonsets")
    body = {
        "metadata": {"name": "ds"},
        "spec": {
            "selector": {"matchLabels": {"app": "ds"}},
            "template": {
                "metadata": {"labels": {"app": "ds"}},
                "spec": {"nodeSelector": {"cd": "yes"}, "containers": [{"name": "c", "image": "i"}]},
            },
        },
    }
    store.create(daemonsets, "default", body)
    ds = DaemonSetController(store)
    ds.reconcile()
    _running(store, "worker", "n1")
    store.delete(store.type_of("", "nodes"), "", "n1")
    ds.reconcile()
    pods, _ = store.list_objects(store.type_of("", "pods"), "default")
    assert len(pods) == 2, "the DaemonSet controller leaves a deleted node's pod to the pod GC"
    gc = PodGarbageCollector(store, quarantine_s=40.0, clock=clock)
    gc.reconcile()
    clock.now += 39
    gc.reconcile()
    assert gc.collected == []
    clock.now += 2
    gc.reconcile()
    assert sorted(name.split("/")[1].split("-")[0] for name in gc.collected) == ["ds", "worker"]
    assert store.list_objects(store.type_of("", "pods"), "default")[0] == []


def test_the_scheduler_does_not_place_a_pod_on_an_unreachable_node() -> None:
    store, clock = ObjectStore(), Clock()
    add_classes(store)
    add_template(store, "tmpl")
    for name in ("n1", "n2"):
        register(store, name, {}, "192.168.0.1")
        renew_lease(store, name, 40)
        add_slice(store, name)
    lifecycle = NodeLifecycleController(store, grace_s=1.0, clock=clock)
    lifecycle.reconcile()
    clock.now += 2
    renew_lease(store, "n2", 40)
    lifecycle.reconcile()
    add_pod(store, "worker", "tmpl")
    ClaimTemplateController(store).reconcile()
    Allocator(store).reconcile()
    assert get(store, "", "pods", "worker")["spec"]["nodeName"] == "n2"
