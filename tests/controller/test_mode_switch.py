"""Domains that outlive a switch of mode (`helm upgrade` of isolation or HostManagedIMEX) are torn down whole.

A domain made with per-domain daemons (`domain` isolation, driver-managed) owns a DaemonSet, a daemon
ResourceClaimTemplate, clique objects and node labels; after a restart under `channel` isolation or
HostManagedIMEX its deletion still removes all of them (the view rebuilt from the log knows them). A domain
made under `channel` isolation holds channels; torn down after a restart under `domain` isolation it releases
them. The restart keeps the event log (`db_path`), as the controller's PersistentVolumeClaim does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdctl.api.isolation import CLIQUE_NODE_LABEL, ImexIsolation
from cdctl.domain.computedomains import LABEL_COMPUTE_DOMAIN
from cdctl.sim.apiserver.rbac import service_account_token
from tests.chart.conftest import chart_policies, chart_rbac
from tests.controller.harness import DRIVER_NAMESPACE, USER_NAMESPACE, Cluster, eventually
from tests.controller.test_channels import CLIQUE, channel_of, domain_with_claim, gpu_node, release_claim

RCT = ("resource.k8s.io", "resourceclaimtemplates")
CLIQUES = ("resource.nvidia.com", "computedomaincliques")
CHANNEL = {"imex_isolation": ImexIsolation.CHANNEL}
HOST_MANAGED = {"gates": "HostManagedIMEX=true"}
# The same modes as chart values (`helm upgrade --set ...`).
CHANNEL_CHART: dict[str, Any] = {"resources": {"computeDomains": {"imex": {"isolation": "channel"}}}}
HOST_MANAGED_CHART: dict[str, Any] = {"featureGates": {"HostManagedIMEX": True}}


def labelled_nodes(cluster: Cluster, uid: str) -> list[str]:
    nodes = cluster.list("", "nodes")
    return [n["metadata"]["name"] for n in nodes if n["metadata"]["labels"].get(LABEL_COMPUTE_DOMAIN) == uid]


def under_the_charts_rbac(cluster: Cluster, values: dict[str, Any]) -> None:
    """From now on the controller connects as its service account, held to the roles and admission policies
    the chart renders for `values` (the mode switched to), as on a real cluster after `helm upgrade`."""
    cluster.server.rbac.load(chart_rbac(DRIVER_NAMESPACE, values))
    cluster.server.load_policies(chart_policies(DRIVER_NAMESPACE, values))
    token = service_account_token(DRIVER_NAMESPACE, "cdctl-controller", pod="cdctl-controller-0", node="cp")
    cluster.server.write_kubeconfig(cluster.kubeconfig, token)


@pytest.mark.parametrize(
    ("after", "chart_values"),
    [(CHANNEL, CHANNEL_CHART), (HOST_MANAGED, HOST_MANAGED_CHART)],
    ids=["to-channel", "to-host-managed"],
)
async def test_a_domain_with_its_own_daemons_is_torn_down_whole_after_a_switch(
    tmp_path: Path, after: dict[str, Any], chart_values: dict[str, Any]
) -> None:
    db = str(tmp_path / "controller.db")
    async with Cluster(tmp_path) as cluster:
        task, _ = await cluster.start_controller(db_path=db)
        uid = cluster.create_domain("cd1", num_nodes=2)["metadata"]["uid"]
        daemon = f"computedomain-daemon-{uid}"
        await eventually(lambda: cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, daemon))
        await eventually(lambda: cluster.get(*RCT, USER_NAMESPACE, "cd1-channel"))
        for node, ip in (("node-a", "10.0.0.1"), ("node-b", "10.0.0.2")):
            gpu_node(cluster, node)  # a GPU node of the rack, which the plugin labelled for the domain
            cluster.label_node(node, uid)
            cluster.run_daemon(uid, node, ip, CLIQUE, ready=True)
        await eventually(lambda: (cluster.domain("cd1") or {}).get("status", {}).get("status") == "Ready")
        await cluster.stop_controller(task)

        under_the_charts_rbac(cluster, chart_values)
        _, manager = await cluster.start_controller(db_path=db, wait_synced=False, **after)
        await eventually(manager.synced.is_set)  # a watch the chart refuses never syncs: fail, not hang
        cluster.delete_domain("cd1")
        await eventually(lambda: cluster.domain("cd1") is None)
        assert cluster.server.rbac.denials == []
        assert cluster.server.store.policies.denials == []
        assert cluster.list("apps", "daemonsets") == []
        assert cluster.list(*RCT) == []  # the workload template and the daemon template
        assert cluster.list(*CLIQUES) == []
        assert labelled_nodes(cluster, uid) == []
        assert cluster.get("", "nodes", "", "node-a")["metadata"]["labels"][CLIQUE_NODE_LABEL] == CLIQUE
        # The gone domain's view keeps none of them: a sweep has nothing to tear down again.
        left = manager.view.domain(uid)
        assert [
            o.kind for o in left.objects.values() if o.kind in ("DaemonSet", "ResourceClaimTemplate", "Node")
        ] == []


@pytest.mark.parametrize(
    ("before", "after"),
    [(CHANNEL, {}), ({**CHANNEL, **HOST_MANAGED}, HOST_MANAGED)],
    ids=["driver-managed", "host-managed"],
)
async def test_a_domain_made_under_channel_isolation_releases_its_channels_under_domain_isolation(
    tmp_path: Path, before: dict[str, Any], after: dict[str, Any]
) -> None:
    db = str(tmp_path / "controller.db")
    async with Cluster(tmp_path) as cluster:
        task, _ = await cluster.start_controller(db_path=db, **before)
        gpu_node(cluster, "node-a")
        uid = await domain_with_claim(cluster, "job", "node-a")
        await eventually(lambda: channel_of(cluster, uid) == 1)
        await cluster.stop_controller(task)

        _, manager = await cluster.start_controller(db_path=db, **after)
        assert manager.journal.channels.of_domain(uid) == {CLIQUE: 1}  # from the log
        release_claim(cluster, "job-worker-0")  # drained, as docs/channel-isolation.md asks
        cluster.delete_domain("job")
        await eventually(lambda: cluster.domain("job") is None)
        await eventually(lambda: manager.journal.channels.of_domain(uid) == {})
        assert manager.journal.channels.clique(CLIQUE).released == (1,)
        assert cluster.list(*CLIQUES) == []
        assert cluster.list(*RCT) == []


async def domain_made_with_its_own_daemons(cluster: Cluster, db: str) -> str:
    """Domain cd1 made by a controller in the default mode (its DaemonSet, status), that controller stopped
    with its log kept in `db`; the DaemonSet's name."""
    task, _ = await cluster.start_controller(db_path=db)
    uid = cluster.create_domain("cd1")["metadata"]["uid"]
    daemon = f"computedomain-daemon-{uid}"
    await eventually(lambda: cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, daemon))
    await eventually(lambda: (cluster.domain("cd1") or {}).get("status"))
    await cluster.stop_controller(task)
    return daemon


async def test_a_daemon_set_deleted_by_someone_else_after_a_switch_does_not_hold_the_teardown(
    tmp_path: Path,
) -> None:
    """No DaemonSet watch runs after the switch: the one the log knows, already gone, is not waited for."""
    db = str(tmp_path / "controller.db")
    async with Cluster(tmp_path) as cluster:
        daemon = await domain_made_with_its_own_daemons(cluster, db)
        daemon_sets = cluster.type_of("apps", "daemonsets")
        found = cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, daemon)
        found["metadata"]["finalizers"] = []  # an administrator cleared it by hand
        cluster.server.store.update(daemon_sets, DRIVER_NAMESPACE, daemon, found)
        cluster.server.store.delete(daemon_sets, DRIVER_NAMESPACE, daemon)

        await cluster.start_controller(db_path=db, **HOST_MANAGED)
        cluster.delete_domain("cd1")
        await eventually(lambda: cluster.domain("cd1") is None)
        assert cluster.list(*RCT) == []


async def test_without_the_cleanup_rights_the_domain_waits_and_says_which_object_holds_it(
    tmp_path: Path,
) -> None:
    """controller.cleanupAfterModeSwitch=false: the chart grants nothing on the old DaemonSet, so the
    domain's deletion waits (nothing is left behind half torn down) and a Warning Event names the refusal."""
    db = str(tmp_path / "controller.db")
    async with Cluster(tmp_path) as cluster:
        daemon = await domain_made_with_its_own_daemons(cluster, db)

        no_cleanup = {**HOST_MANAGED_CHART, "controller": {"cleanupAfterModeSwitch": False}}
        under_the_charts_rbac(cluster, no_cleanup)
        await cluster.start_controller(db_path=db, wait_synced=False, **HOST_MANAGED)
        cluster.delete_domain("cd1")

        def refusal() -> list[str]:
            events = cluster.list("", "events", USER_NAMESPACE)
            return [str(e.get("message")) for e in events if e.get("type") == "Warning" and daemon in str(e)]

        await eventually(refusal)
        assert cluster.domain("cd1") is not None  # its finalizer holds it: the DaemonSet is still there
        assert cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, daemon) is not None
        assert [d for d in cluster.server.rbac.denials if "daemonsets" in str(d)]
