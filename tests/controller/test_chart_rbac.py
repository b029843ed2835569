"""The controller under the chart's own RBAC and admission policies: the simulated API server enforces the
rendered roles and policies for the controller's service account, so a request the chart does not grant fails
here as on a real cluster.

A domain's whole life (templates, DaemonSet, cliques with indices, status Ready, ordered teardown with the
node label removed) must be refused nothing.
"""

from __future__ import annotations

from pathlib import Path

from cdctl.sim.apiserver.rbac import service_account_token
from tests.chart.conftest import chart_policies, chart_rbac
from tests.controller.harness import DRIVER_NAMESPACE, USER_NAMESPACE, Cluster, eventually


async def test_a_domains_life_needs_nothing_the_chart_does_not_grant(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        cluster.server.rbac.load(chart_rbac(DRIVER_NAMESPACE))
        cluster.server.load_policies(chart_policies(DRIVER_NAMESPACE))
        token = service_account_token(
            DRIVER_NAMESPACE, "cdctl-controller", pod="cdctl-controller-0", node="cp"
        )
        cluster.server.write_kubeconfig(cluster.kubeconfig, token)  # the controller connects as its account
        _, manager = await cluster.start_controller(wait_synced=False)
        await eventually(manager.synced.is_set)  # a watch the chart refuses never syncs: fail, not hang
        uid = cluster.create_domain("cd1", num_nodes=2)["metadata"]["uid"]
        await eventually(
            lambda: cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, f"computedomain-daemon-{uid}")
        )
        await eventually(
            lambda: cluster.get("resource.k8s.io", "resourceclaimtemplates", USER_NAMESPACE, "cd1-channel")
        )
        for node, ip in (("node-a", "10.0.0.1"), ("node-b", "10.0.0.2")):
            cluster.label_node(node, uid)
            cluster.run_daemon(uid, node, ip, "cluster.7", ready=True)
        await eventually(lambda: (cluster.domain("cd1").get("status") or {}).get("status") == "Ready")
        cluster.delete_domain("cd1")
        await eventually(lambda: cluster.domain("cd1") is None)
        assert cluster.list("apps", "daemonsets") == []
        assert cluster.list("resource.nvidia.com", "computedomaincliques") == []
        node = cluster.get("", "nodes", "", "node-a")
        assert "resource.nvidia.com/computeDomain" not in (node["metadata"].get("labels") or {})
        assert cluster.server.rbac.denials == []
        assert cluster.server.store.policies.denials == []
