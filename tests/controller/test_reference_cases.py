"""The Go driver's ComputeDomain cases that need no GPU (reference section 8), and the modes and versions."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from tests.controller.harness import DRIVER_NAMESPACE, USER_NAMESPACE, Cluster, eventually

RCT = ("resource.k8s.io", "resourceclaimtemplates")
CLIQUES = ("resource.nvidia.com", "computedomaincliques")


def status_of(cluster: Cluster, name: str) -> dict:
    return (cluster.domain(name) or {}).get("status") or {}


async def test_global_status_is_ready_while_the_daemon_runs_and_not_ready_after_it_leaves(
    tmp_path: Path,
) -> None:
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller()
        uid = cluster.create_domain("imex-channel-injection", num_nodes=1)["metadata"]["uid"]
        await eventually(
            lambda: cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, f"computedomain-daemon-{uid}")
        )
        cluster.label_node("node-a", uid)  # the plugin prepared the workload's channel here
        pod = cluster.run_daemon(uid, "node-a", "10.0.0.1", "c.1", ready=True)
        await eventually(lambda: status_of(cluster, "imex-channel-injection").get("status") == "Ready")
        nodes = status_of(cluster, "imex-channel-injection")["nodes"]
        assert nodes == [
            {"name": "node-a", "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": 0, "status": "Ready"}
        ]
        # Workload deleted: the plugin unlabels the node and the DaemonSet removes the daemon.
        cluster.label_node("node-a", None)
        cluster.delete_pod(pod)
        await eventually(lambda: status_of(cluster, "imex-channel-injection").get("status") == "NotReady")
        assert status_of(cluster, "imex-channel-injection")["nodes"] == []
        clique = cluster.get(*CLIQUES, DRIVER_NAMESPACE, f"{uid}.c.1")
        assert clique is not None and clique["daemons"] == []


async def test_non_fabric_daemons_are_reported_from_their_pods(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller()
        uid = cluster.create_domain("cd1", num_nodes=2)["metadata"]["uid"]
        unlabelled = cluster.run_daemon(uid, "node-x", "10.0.0.9", None, ready=True)
        cluster.run_daemon(uid, "node-a", "10.0.0.1", "", ready=True)
        cluster.run_daemon(uid, "node-b", "10.0.0.2", "", ready=False)
        await eventually(lambda: len(status_of(cluster, "cd1").get("nodes") or []) == 2)
        assert {
            (n["name"], n["cliqueID"], n["index"], n["status"]) for n in status_of(cluster, "cd1")["nodes"]
        } == {
            ("node-a", "", -1, "Ready"),
            ("node-b", "", -1, "NotReady"),
        }
        assert status_of(cluster, "cd1")["status"] == "NotReady"
        assert cluster.list(*CLIQUES) == []
        assert unlabelled["metadata"]["name"] not in str(status_of(cluster, "cd1"))


async def test_host_managed_imex_creates_no_daemons(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller(gates="HostManagedIMEX=true")
        cluster.create_domain("cd1")
        await eventually(lambda: cluster.get(*RCT, USER_NAMESPACE, "cd1-channel"))
        await eventually(lambda: status_of(cluster, "cd1").get("status") == "Ready")
        assert cluster.list("apps", "daemonsets") == []
        assert [t["metadata"]["name"] for t in cluster.list(*RCT)] == ["cd1-channel"]


async def test_without_the_cliques_gate_indices_live_in_status_nodes(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller(gates="ComputeDomainCliques=false")
        uid = cluster.create_domain("cd1", num_nodes=2)["metadata"]["uid"]
        cluster.run_daemon(uid, "node-a", "10.0.0.1", "c.1", ready=True)
        await eventually(lambda: len(status_of(cluster, "cd1").get("nodes") or []) == 1)
        cluster.run_daemon(uid, "node-b", "10.0.0.2", "c.1", ready=True)
        await eventually(lambda: status_of(cluster, "cd1").get("status") == "Ready")
        assert {(n["name"], n["index"]) for n in status_of(cluster, "cd1")["nodes"]} == {
            ("node-a", 0),
            ("node-b", 1),
        }
        assert cluster.list(*CLIQUES) == []


async def test_a_v1beta1_cluster_gets_flat_requests(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        _, manager = await cluster.start_controller(resource_api_version="v1beta1")
        assert manager.ctx.claim_templates.api_version == "resource.k8s.io/v1beta1"
        cluster.create_domain("cd1")
        stored = await eventually(lambda: cluster.get(*RCT, USER_NAMESPACE, "cd1-channel"))
        # The server converts to its storage version: the flat v1beta1 request arrives as `exactly`.
        request = stored["spec"]["spec"]["devices"]["requests"][0]
        assert request["exactly"]["deviceClassName"] == "compute-domain-default-channel.nvidia.com"


async def test_an_existing_daemonset_in_an_additional_namespace_is_kept_and_torn_down_there(
    tmp_path: Path,
) -> None:
    async with Cluster(tmp_path) as cluster:
        store = cluster.server.store
        store.create(store.type_of("", "namespaces"), "", {"metadata": {"name": "old-dra"}})
        cd = cluster.create_domain("cd1")
        uid = cd["metadata"]["uid"]
        label = {"resource.nvidia.com/computeDomain": uid}
        store.create(
            cluster.type_of("apps", "daemonsets"),
            "old-dra",
            {
                "metadata": {
                    "name": f"computedomain-daemon-{uid}",
                    "labels": label,
                    "finalizers": ["resource.nvidia.com/computeDomain"],
                },
                "spec": {
                    "selector": {"matchLabels": label},
                    "template": {
                        "metadata": {"labels": label},
                        "spec": {"containers": [{"name": "c", "image": "i"}]},
                    },
                },
            },
        )
        await cluster.start_controller(additional_namespaces=("old-dra",))
        await eventually(lambda: cluster.get(*RCT, "old-dra", f"computedomain-daemon-{uid}"))
        await eventually(lambda: cluster.get(*RCT, USER_NAMESPACE, "cd1-channel"))
        assert [ds["metadata"]["namespace"] for ds in cluster.list("apps", "daemonsets")] == ["old-dra"]
        cluster.delete_domain("cd1")
        await eventually(lambda: cluster.domain("cd1") is None)
        assert cluster.list("apps", "daemonsets") == []
        assert cluster.list(*RCT) == []


async def test_changes_during_a_watch_gap_longer_than_the_history_are_recovered_by_relisting(
    tmp_path: Path,
) -> None:
    async with Cluster(tmp_path, history_window=5) as cluster:
        _, manager = await cluster.start_controller()
        uid = cluster.create_domain("cd1", num_nodes=1)["metadata"]["uid"]
        pod = cluster.run_daemon(uid, "node-a", "10.0.0.1", "c.1", ready=False)
        await eventually(lambda: len(status_of(cluster, "cd1").get("nodes") or []) == 1)
        relists_before = sum(informer.relists for informer in manager.informers)
        await cluster.server.stop()  # the controller's watches break; meanwhile the cluster moves on
        cluster.set_pod(pod, ready=True)
        for index in range(10):
            cluster.server.store.create(
                cluster.type_of("", "configmaps"), "default", {"metadata": {"name": f"noise-{index}"}}
            )
        await cluster.server.start()
        await eventually(lambda: status_of(cluster, "cd1").get("status") == "Ready")
        assert sum(informer.relists for informer in manager.informers) > relists_before


async def test_metrics_health_and_readiness_are_served(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        _, manager = await cluster.start_controller(http_endpoint="127.0.0.1:0", pprof_path="/debug")
        cluster.create_domain("cd1", num_nodes=1)
        cluster.create_domain("cd2")
        await eventually(lambda: status_of(cluster, "cd2").get("status") == "Ready")
        await eventually(lambda: status_of(cluster, "cd1").get("status") == "NotReady")
        assert manager.http is not None
        base = f"http://127.0.0.1:{manager.http.port}"
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/metrics") as response:
                assert response.status == 200
                text = await response.text()
            async with session.get(f"{base}/healthz") as response:
                assert response.status == 200
            async with session.get(f"{base}/readyz") as response:
                assert response.status == 200
            async with session.get(f"{base}/debug/tasks") as response:
                tasks = await response.text()
        assert "Journal.run" in tasks and "KeyedQueue._work" in tasks
        assert 'nvidia_dra_compute_domain_info{status="Ready"} 1.0' in text
        assert 'nvidia_dra_compute_domain_info{status="NotReady"} 1.0' in text
        assert 'cdctl_controller_reconcile_total{result="success"}' in text
        assert "cdctl_controller_reconcile_duration_seconds_bucket" in text
        assert "cdctl_controller_queue_depth" in text


async def test_a_full_clique_is_reported_and_never_shares_an_index(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller(max_nodes_per_imex_domain=2)
        cd = cluster.create_domain("cd1")
        uid = cd["metadata"]["uid"]
        for index, node in enumerate(("node-a", "node-b", "node-c")):
            cluster.run_daemon(uid, node, f"10.0.0.{index + 1}", "c.1", ready=True)
        event = await eventually(
            lambda: next(
                (e for e in cluster.list("", "events", USER_NAMESPACE) if e.get("reason") == "CliqueFull"),
                None,
            )
        )
        assert "maxNodesPerIMEXDomain (2)" in event["message"]
        clique = await eventually(
            lambda: (
                (c := cluster.get(*CLIQUES, DRIVER_NAMESPACE, f"{uid}.c.1")) and len(c["daemons"]) == 2 and c
            )
        )
        assert sorted(d["index"] for d in clique["daemons"]) == [0, 1]


async def test_force_deleting_every_daemon_recovers_with_one_index_per_node(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller()
        uid = cluster.create_domain("cd1", num_nodes=4)["metadata"]["uid"]
        nodes = [f"node-{n}" for n in "abcd"]
        pods = [
            cluster.run_daemon(uid, node, f"10.0.0.{i}", "c.1", ready=True) for i, node in enumerate(nodes)
        ]
        await eventually(lambda: status_of(cluster, "cd1").get("status") == "Ready")
        for pod in pods:  # test_cd_failover: force-delete all IMEX daemons; the DaemonSet brings them back
            cluster.delete_pod(pod)
        for i, node in enumerate(nodes):
            cluster.run_daemon(uid, node, f"10.0.1.{i}", "c.1", ready=True)
        await eventually(
            lambda: (
                status_of(cluster, "cd1").get("status") == "Ready"
                and {n["ipAddress"] for n in status_of(cluster, "cd1")["nodes"]}
                == {f"10.0.1.{i}" for i in range(4)}
            )
        )
        clique = cluster.get(*CLIQUES, DRIVER_NAMESPACE, f"{uid}.c.1")
        assert sorted(d["nodeName"] for d in clique["daemons"]) == nodes
        assert sorted(d["index"] for d in clique["daemons"]) == [0, 1, 2, 3]
