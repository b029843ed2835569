"""The DaemonSet stand-in: one pod per matching node, removal when a node stops matching, status, GC."""

from __future__ import annotations

from typing import Any

from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.controllers.daemonsets import DaemonSetController
from cdctl.sim.controllers.nodematch import pod_fits_node
from tests.sim.standins import add_node


def _daemonset(store: ObjectStore, name: str = "ds", **pod_spec: Any) -> dict[str, Any]:
    spec = {"containers": [{"name": "c", "image": "img"}], **pod_spec}
    body = {
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }
    return store.create(store.type_of("apps", "daemonsets"), "default", body)


def _pods_by_node(store: ObjectStore) -> dict[str, str]:
    pods, _ = store.list_objects(store.type_of("", "pods"), "default")
    return {
        p["spec"]["nodeName"]: p["metadata"]["name"]
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
    }


def _relabel(store: ObjectStore, node: str, labels: dict[str, str]) -> None:
    nodes = store.type_of("", "nodes")
    current = store.get(nodes, "", node)
    current["metadata"]["labels"] = labels
    store.update(nodes, "", node, current)


def test_one_pod_per_matching_node_and_removal_when_it_stops_matching() -> None:
    store = ObjectStore()
    add_node(store, "n1", labels={"cd": "yes"})
    add_node(store, "n2", labels={"cd": "yes"})
    add_node(store, "n3")
    _daemonset(store, nodeSelector={"cd": "yes"})
    controller = DaemonSetController(store)
    controller.reconcile()
    controller.reconcile()
    assert sorted(_pods_by_node(store)) == ["n1", "n2"]
    _relabel(store, "n2", {})
    _relabel(store, "n3", {"cd": "yes"})
    controller.reconcile()
    assert sorted(_pods_by_node(store)) == ["n1", "n3"]
    status = store.get(store.type_of("apps", "daemonsets"), "default", "ds")["status"]
    assert (status["desiredNumberScheduled"], status["currentNumberScheduled"], status["numberReady"]) == (
        2,
        2,
        0,
    )


def test_pods_are_owned_and_collected_with_the_daemonset() -> None:
    store = ObjectStore()
    add_node(store, "n1")
    daemonset = _daemonset(store)
    DaemonSetController(store).reconcile()
    pods, _ = store.list_objects(store.type_of("", "pods"), "default")
    owner = pods[0]["metadata"]["ownerReferences"][0]
    assert owner["uid"] == daemonset["metadata"]["uid"] and owner["controller"] is True
    assert pods[0]["metadata"]["name"].startswith("ds-")
    store.delete(store.type_of("apps", "daemonsets"), "default", "ds")
    (collected,), _ = store.list_objects(store.type_of("", "pods"), "default")
    assert collected["metadata"]["deletionGracePeriodSeconds"] == 30, "its kubelet ends it, then removes it"


def test_taints_need_tolerations() -> None:
    store = ObjectStore()
    add_node(store, "tainted", taints=[{"key": "gpu", "value": "true", "effect": "NoSchedule"}])
    add_node(store, "plain")
    _daemonset(store, "intolerant")
    _daemonset(store, "tolerant", tolerations=[{"key": "gpu", "operator": "Exists"}])
    DaemonSetController(store).reconcile()
    pods, _ = store.list_objects(store.type_of("", "pods"), "default")
    placed = sorted((p["metadata"]["labels"]["app"], p["spec"]["nodeName"]) for p in pods)
    assert placed == [("intolerant", "plain"), ("tolerant", "plain"), ("tolerant", "tainted")]


def test_ready_pods_are_counted() -> None:
    store = ObjectStore()
    add_node(store, "n1")
    _daemonset(store)
    controller = DaemonSetController(store)
    controller.reconcile()
    pods_type = store.type_of("", "pods")
    pod = store.list_objects(pods_type, "default")[0][0]
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    store.update(pods_type, "default", pod["metadata"]["name"], pod, subresource="status")
    controller.reconcile()
    assert store.get(store.type_of("apps", "daemonsets"), "default", "ds")["status"]["numberReady"] == 1


def test_template_change_replaces_pods() -> None:
    store = ObjectStore()
    add_node(store, "n1")
    _daemonset(store)
    controller = DaemonSetController(store)
    controller.reconcile()
    before = _pods_by_node(store)["n1"]
    daemonsets = store.type_of("apps", "daemonsets")
    current = store.get(daemonsets, "default", "ds")
    current["spec"]["template"]["spec"]["containers"][0]["image"] = "img:2"
    store.update(daemonsets, "default", "ds", current)
    controller.reconcile()
    after = _pods_by_node(store)["n1"]
    assert after != before
    pod = store.get(store.type_of("", "pods"), "default", after)
    assert pod["spec"]["containers"][0]["image"] == "img:2"


def test_required_node_affinity() -> None:
    spec = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]},
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["by-name"]}]},
                    ]
                }
            }
        }
    }
    assert pod_fits_node(spec, {"metadata": {"name": "x", "labels": {"rack": "r1"}}})
    assert pod_fits_node(spec, {"metadata": {"name": "by-name", "labels": {}}})
    assert not pod_fits_node(spec, {"metadata": {"name": "x", "labels": {"rack": "r2"}}})


def test_pods_naming_a_missing_service_account_are_not_created_and_say_so_in_events() -> None:
    """As the real DaemonSet controller: each refused create is a FailedCreate Warning on the DaemonSet (one
    Event, its count rising), no pod exists, and pods come once the ServiceAccount does."""
    store = ObjectStore()
    add_node(store, "n1")
    add_node(store, "n2")
    _daemonset(store, serviceAccountName="robot")
    controller = DaemonSetController(store)
    controller.reconcile()
    controller.reconcile()
    assert _pods_by_node(store) == {}
    events, _ = store.list_objects(store.type_of("", "events"), "default")
    (event,) = events
    assert (event["type"], event["reason"], event["count"]) == (
        "Warning",
        "FailedCreate",
        2,
    )  # a refusal ends the pass
    assert event["involvedObject"]["kind"] == "DaemonSet" and event["involvedObject"]["name"] == "ds"
    assert event["message"] == (
        'Error creating: pods "ds-" is forbidden: error looking up service account default/robot: '
        'serviceaccount "robot" not found'
    )
    assert event["source"] == {"component": "daemonset-controller"}
    store.create(store.type_of("", "serviceaccounts"), "default", {"metadata": {"name": "robot"}})
    controller.reconcile()
    assert sorted(_pods_by_node(store)) == ["n1", "n2"]
