"""A node of a running domain stops being Ready (its kubelet went silent): the domain says so in an Event."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.controller.harness import USER_NAMESPACE, Cluster, eventually


def _set_ready(
    cluster: Cluster, node: str, status: str, message: str = "Kubelet stopped posting node status."
) -> None:
    nodes = cluster.type_of("", "nodes")
    current = cluster.server.store.get(nodes, "", node)
    condition = {"type": "Ready", "status": status}
    if status != "True":
        condition.update(reason="NodeStatusUnknown", message=message)
    current["status"] = {**(current.get("status") or {}), "conditions": [condition]}
    cluster.server.store.update(nodes, "", node, current, subresource="status")


def _warnings(cluster: Cluster, reason: str) -> list[dict[str, Any]]:
    return [e for e in cluster.list("", "events", USER_NAMESPACE) if e.get("reason") == reason]


async def test_a_domain_node_that_is_not_ready_is_reported_once_on_the_domain(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller()
        uid = cluster.create_domain("cd1")["metadata"]["uid"]
        for node, ip in (("node-a", "10.0.0.1"), ("node-b", "10.0.0.2")):
            cluster.label_node(node, uid)
            _set_ready(cluster, node, "True")
            cluster.run_daemon(uid, node, ip, "cluster.7", ready=True)
        await eventually(lambda: (cluster.domain("cd1").get("status") or {}).get("status") == "Ready")
        assert _warnings(cluster, "NodeNotReady") == []
        _set_ready(cluster, "node-b", "Unknown")
        events = await eventually(lambda: _warnings(cluster, "NodeNotReady"))
        assert len(events) == 1
        event = events[0]
        assert event["type"] == "Warning"
        assert event["involvedObject"]["uid"] == uid
        assert "node node-b is not Ready (NodeStatusUnknown)" in event["message"]
        assert "clique cluster.7 index" in event["message"]
        # Other changes of the domain, and a node status whose message changes each time (a flapping or
        # hostile kubelet): still one Event for node-b.
        for attempt in range(3):
            _set_ready(cluster, "node-b", "Unknown", message=f"stopped posting at attempt {attempt}")
        cluster.run_daemon(uid, "node-c", "10.0.0.3", "cluster.7", ready=True)
        await eventually(lambda: len(cluster.domain("cd1")["status"]["nodes"]) == 3)
        assert len(_warnings(cluster, "NodeNotReady")) == 1
