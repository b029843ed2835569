"""Small pure pieces: endpoint parsing, pod readiness, object summaries, clique index change events."""

from __future__ import annotations

import pytest

from cdctl.controller.clique import index_changes
from cdctl.controller.observations import kept_form, pod_is_ready, summarize
from cdctl.domain.computedomains import CliqueEntryRemoved, CliqueIndexAssigned, DaemonEntry
from cdctl.httpendpoint import parse_endpoint


@pytest.mark.parametrize(
    ("endpoint", "parsed"),
    [(":8080", ("0.0.0.0", 8080)), ("127.0.0.1:9", ("127.0.0.1", 9)), ("[::1]:8443", ("::1", 8443))],
)
def test_http_endpoints_in_the_go_forms(endpoint: str, parsed: tuple[str, int]) -> None:
    assert parse_endpoint(endpoint) == parsed


def test_an_endpoint_without_a_port_is_rejected() -> None:
    with pytest.raises(ValueError, match="want \\[host\\]:port"):
        parse_endpoint("localhost")


def test_a_pod_is_ready_only_when_running_with_the_ready_condition() -> None:
    ready = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    assert pod_is_ready(ready)
    assert not pod_is_ready(
        {"status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "True"}]}}
    )
    assert not pod_is_ready(
        {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}}
    )
    assert not pod_is_ready({})


def test_summaries_keep_what_decisions_need() -> None:
    pod = {
        "metadata": {"labels": {"resource.nvidia.com/computeDomain.cliqueID": ""}, "deletionTimestamp": "t"},
        "spec": {"nodeName": "n1"},
        "status": {"podIP": "10.0.0.1"},
    }
    assert summarize("Pod", pod) == {
        "finalizers": [],
        "deleting": True,
        "node": "n1",
        "ip": "10.0.0.1",
        "clique": "",
        "ready": False,
    }
    assert summarize("Pod", {"metadata": {}})["clique"] is None
    template = {
        "metadata": {"labels": {"resource.nvidia.com/computeDomainTarget": "Daemon"}, "finalizers": ["f"]}
    }
    assert summarize("ResourceClaimTemplate", template) == {
        "finalizers": ["f"],
        "deleting": False,
        "target": "Daemon",
    }
    clique = {
        "metadata": {"labels": {"resource.nvidia.com/computeDomain.cliqueID": "c.1"}},
        "daemons": [{"index": 0}],
    }
    assert summarize("ComputeDomainClique", clique)["daemons"] == [{"index": 0}]


def test_index_changes_name_each_node_that_left_or_got_an_index() -> None:
    old = [DaemonEntry("a", "ip", "c", 0), DaemonEntry("b", "ip", "c", 1)]
    new = (DaemonEntry("b", "ip2", "c", 1, "Ready"), DaemonEntry("d", "ip", "c", 0))
    assert index_changes("u", "c", old, new) == [
        CliqueEntryRemoved("u", "c", "a", 0),
        CliqueIndexAssigned("u", "c", "d", 0),
    ]


def test_what_is_kept_of_an_object_still_summarizes_the_same() -> None:
    meta = {
        "name": "x",
        "namespace": "drv",
        "uid": "u",
        "resourceVersion": "7",
        "labels": {
            "resource.nvidia.com/computeDomain": "d",
            "resource.nvidia.com/computeDomain.cliqueID": "c",
        },
        "finalizers": ["f"],
        "managedFields": [{"manager": "kube-controller-manager", "fieldsV1": {"f:status": {}}}],
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": "n1", "containers": [{"name": "d", "image": "i", "env": [{"name": "A"}]}]},
        "status": {
            "podIP": "10.0.0.1",
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "d", "ready": True}],
        },
    }
    kept = kept_form("Pod", pod)
    assert summarize("Pod", kept) == summarize("Pod", pod)
    assert "containers" not in kept["spec"] and "containerStatuses" not in kept["status"]
    assert "managedFields" not in kept["metadata"] and "managedFields" in pod["metadata"]  # a copy
    daemon_set = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta, "spec": {"template": {}}}
    kept = kept_form("DaemonSet", daemon_set)
    assert "spec" not in kept and summarize("DaemonSet", kept) == summarize("DaemonSet", daemon_set)
    # The objects the controller writes back whole keep their spec (less managedFields).
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": meta,
        "spec": {},
    }
    assert kept_form("ResourceClaimTemplate", template)["spec"] == {}
    assert "managedFields" not in kept_form("ResourceClaimTemplate", template)["metadata"]
