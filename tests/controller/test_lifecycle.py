"""Create, status and delete flows of a ComputeDomain on the simulated cluster, with the real client."""

from __future__ import annotations

from pathlib import Path

from tests.controller.harness import DRIVER_NAMESPACE, USER_NAMESPACE, Cluster, eventually

FINALIZER = "resource.nvidia.com/computeDomain"


async def test_a_new_domain_gets_finalizer_templates_daemonset_and_status(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller()
        cd = cluster.create_domain("cd1", num_nodes=1, mode="All")
        uid = cd["metadata"]["uid"]
        workload = await eventually(
            lambda: cluster.get("resource.k8s.io", "resourceclaimtemplates", USER_NAMESPACE, "cd1-channel")
        )
        daemon_rct = await eventually(
            lambda: cluster.get(
                "resource.k8s.io", "resourceclaimtemplates", DRIVER_NAMESPACE, f"computedomain-daemon-{uid}"
            )
        )
        ds = await eventually(
            lambda: cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, f"computedomain-daemon-{uid}")
        )
        current = await eventually(lambda: (d := cluster.domain("cd1")) and d.get("status") and d)
        assert FINALIZER in current["metadata"]["finalizers"]
        assert current["status"] == {"status": "NotReady", "nodes": []}
        params = workload["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
        assert params == {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomainChannelConfig",
            "domainID": uid,
            "allocationMode": "All",
        }
        assert daemon_rct["metadata"]["labels"]["resource.nvidia.com/computeDomainTarget"] == "Daemon"
        assert ds["spec"]["template"]["spec"]["nodeSelector"] == {"resource.nvidia.com/computeDomain": uid}


async def test_daemons_get_clique_indices_and_status_follows_readiness(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller()
        uid = cluster.create_domain("cd1", num_nodes=3)["metadata"]["uid"]
        await eventually(
            lambda: cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, f"computedomain-daemon-{uid}")
        )
        pods = [
            cluster.run_daemon(uid, "node-b", "10.0.0.2", "cluster.7"),
            cluster.run_daemon(uid, "node-a", "10.0.0.1", "cluster.7"),
            cluster.run_daemon(uid, "node-c", "10.0.0.3", ""),
        ]
        clique_name = f"{uid}.cluster.7"
        clique = await eventually(
            lambda: (
                (
                    c := cluster.get(
                        "resource.nvidia.com", "computedomaincliques", DRIVER_NAMESPACE, clique_name
                    )
                )
                and len(c.get("daemons") or []) == 2
                and c
            )
        )
        indices = {d["nodeName"]: d["index"] for d in clique["daemons"]}
        assert sorted(indices.values()) == [0, 1]
        assert {d["status"] for d in clique["daemons"]} == {"NotReady"}
        assert clique["metadata"]["labels"] == {
            "resource.nvidia.com/computeDomain": uid,
            "resource.nvidia.com/computeDomain.cliqueID": "cluster.7",
        }
        status = await eventually(
            lambda: (
                len((cluster.domain("cd1") or {}).get("status", {}).get("nodes") or []) == 3
                and cluster.domain("cd1")["status"]
            )
        )
        assert status["status"] == "NotReady"
        assert {n["name"]: (n["cliqueID"], n["index"]) for n in status["nodes"]} == {
            "node-a": ("cluster.7", indices["node-a"]),
            "node-b": ("cluster.7", indices["node-b"]),
            "node-c": ("", -1),
        }
        for pod in pods:
            cluster.set_pod(pod, ready=True)
        await eventually(lambda: (cluster.domain("cd1").get("status") or {}).get("status") == "Ready")
        # node-a's daemon leaves: its entry goes, the domain is short of nodes, a newcomer reuses its index.
        cluster.delete_pod(pods[1])
        await eventually(lambda: (cluster.domain("cd1").get("status") or {}).get("status") == "NotReady")
        cluster.run_daemon(uid, "node-d", "10.0.0.4", "cluster.7", ready=True)
        clique = await eventually(
            lambda: (
                (
                    c := cluster.get(
                        "resource.nvidia.com", "computedomaincliques", DRIVER_NAMESPACE, clique_name
                    )
                )
                and {d["nodeName"] for d in c["daemons"]} == {"node-b", "node-d"}
                and c
            )
        )
        assert {d["nodeName"]: d["index"] for d in clique["daemons"]} == {
            "node-b": indices["node-b"],
            "node-d": indices["node-a"],
        }
        await eventually(lambda: (cluster.domain("cd1").get("status") or {}).get("status") == "Ready")


async def test_delete_tears_down_in_order_even_with_a_running_workload(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller()
        uid = cluster.create_domain("cd1", num_nodes=1)["metadata"]["uid"]
        await eventually(
            lambda: cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, f"computedomain-daemon-{uid}")
        )
        await eventually(
            lambda: cluster.get("resource.k8s.io", "resourceclaimtemplates", USER_NAMESPACE, "cd1-channel")
        )
        cluster.label_node("node-a", uid)
        cluster.run_daemon(uid, "node-a", "10.0.0.1", "cluster.7", ready=True)
        await eventually(
            lambda: cluster.get(
                "resource.nvidia.com", "computedomaincliques", DRIVER_NAMESPACE, f"{uid}.cluster.7"
            )
        )
        await eventually(lambda: (cluster.domain("cd1").get("status") or {}).get("status") == "Ready")
        cluster.delete_domain("cd1")
        await eventually(lambda: cluster.domain("cd1") is None)
        assert cluster.get("resource.k8s.io", "resourceclaimtemplates", USER_NAMESPACE, "cd1-channel") is None
        assert cluster.list("resource.k8s.io", "resourceclaimtemplates") == []
        assert cluster.list("apps", "daemonsets") == []
        assert cluster.list("resource.nvidia.com", "computedomaincliques") == []
        node = cluster.get("", "nodes", "", "node-a")
        assert "resource.nvidia.com/computeDomain" not in (node["metadata"].get("labels") or {})


async def test_objects_deleted_under_a_live_domain_are_recreated(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller()
        uid = cluster.create_domain("cd1")["metadata"]["uid"]
        name = f"computedomain-daemon-{uid}"
        first_ds = await eventually(lambda: cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, name))
        first_rct = await eventually(
            lambda: cluster.get("resource.k8s.io", "resourceclaimtemplates", USER_NAMESPACE, "cd1-channel")
        )
        cluster.server.store.delete(cluster.type_of("apps", "daemonsets"), DRIVER_NAMESPACE, name)
        cluster.server.store.delete(
            cluster.type_of("resource.k8s.io", "resourceclaimtemplates"), USER_NAMESPACE, "cd1-channel"
        )
        ds = await eventually(
            lambda: (
                (d := cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, name))
                and d["metadata"]["uid"] != first_ds["metadata"]["uid"]
                and d
            )
        )
        rct = await eventually(
            lambda: (
                (r := cluster.get("resource.k8s.io", "resourceclaimtemplates", USER_NAMESPACE, "cd1-channel"))
                and r["metadata"]["uid"] != first_rct["metadata"]["uid"]
                and r
            )
        )
        assert not ds["metadata"].get("deletionTimestamp") and not rct["metadata"].get("deletionTimestamp")
        assert ds["metadata"]["finalizers"] == [FINALIZER]


async def test_a_domain_lifecycle_makes_only_the_writes_it_needs(tmp_path: Path) -> None:
    """docs/controller-cost.md lists each write and why it is needed; nothing is written twice."""
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller()
        cluster.server.requests.reset()
        cluster.create_domain("cd1")
        await eventually(lambda: (d := cluster.domain("cd1")) and d.get("status"))
        await eventually(lambda: cluster.list("apps", "daemonsets"))
        cluster.delete_domain("cd1")
        await eventually(lambda: cluster.domain("cd1") is None)
        await eventually(lambda: not cluster.list("resource.k8s.io", "resourceclaimtemplates"))
        writes = {
            key: n
            for key, n in cluster.server.requests.by_verb_and_resource().items()
            if key.split(" ")[0] in ("create", "update", "patch", "delete")
        }
        assert writes == {
            "update resource.nvidia.com/computedomains": 2,  # its finalizer on, then off
            "update resource.nvidia.com/computedomains/status": 1,
            "create resource.k8s.io/resourceclaimtemplates": 2,  # workload and daemon templates
            "create apps/daemonsets": 1,
            "delete resource.k8s.io/resourceclaimtemplates": 2,
            "delete apps/daemonsets": 1,
            "update resource.k8s.io/resourceclaimtemplates": 2,  # their finalizers off
            "patch apps/daemonsets": 1,  # its finalizer off (the controller keeps no DaemonSet spec)
        }
        assert cluster.server.requests.failed() == {}


async def test_a_label_seen_only_after_the_teardown_is_still_removed(tmp_path: Path) -> None:
    """No node was known labelled for the domain, so its teardown listed none; a label the watch delivers
    afterwards (a prepare that raced the deletion) puts the node in the view of a domain that is gone."""
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller()
        uid = cluster.create_domain("cd1")["metadata"]["uid"]
        await eventually(lambda: (d := cluster.domain("cd1")) and d.get("status"))
        cluster.server.requests.reset()
        cluster.delete_domain("cd1")
        await eventually(lambda: cluster.domain("cd1") is None)
        assert "list nodes" not in cluster.server.requests.by_verb_and_resource()
        cluster.label_node("node-a", uid)
        await eventually(
            lambda: (
                "resource.nvidia.com/computeDomain"
                not in (cluster.get("", "nodes", "", "node-a")["metadata"].get("labels") or {})
            )
        )
