"""The controller under `channel` isolation (docs/channel-isolation.md), on the simulated API server.

Each domain gets its own channel in the clique of the nodes its allocated claims are on, published on its
clique object; the workload template requests the shared channel class and labels its claims; no DaemonSet.
`--imex-channel-count 4` makes the fourth domain wait (the Event, the status reason, the metric) until a
release; a released channel is reused last; a restart rebuilds the assignments from the log; a claim in
another namespace wearing a domain's label counts for nothing. The tests play the scheduler (claims allocated
to nodes) and GPU Feature Discovery (the nodes' clique label).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from prometheus_client import generate_latest

from cdctl.api.isolation import CHANNEL_ISOLATION_DEVICE_CLASS, CLIQUE_NODE_LABEL, ImexIsolation
from cdctl.cli.main import cli
from cdctl.controller.manager import ControllerManager
from cdctl.controller.observations import allocated_node, kept_form
from cdctl.domain.channels import ImexChannelAssigned, ImexChannelReleased
from cdctl.domain.computedomains import LABEL_COMPUTE_DOMAIN
from cdctl.projections.collected import ensure_read_models, rebuild
from cdctl.store.collected import CollectedFile
from cdctl.store.export import LogRef
from cdctl.store.sqlite import SqliteEventStore
from tests.chart.conftest import chart_policies, chart_rbac
from tests.collect.harness import store_locally, write_log
from tests.controller.harness import DRIVER_NAMESPACE, USER_NAMESPACE, Cluster, eventually
from tests.controller.test_standby import LEASE, as_pod, read_log

CLIQUE = "7a0e3f1c-2b44-4c6e-8f11-000000000001.1"
OTHER_CLIQUE = "7a0e3f1c-2b44-4c6e-8f11-000000000002.1"
CLAIMS = ("resource.k8s.io", "resourceclaims")
CLIQUES = ("resource.nvidia.com", "computedomaincliques")
HOST_MANAGED = {"gates": "HostManagedIMEX=true", "imex_isolation": ImexIsolation.CHANNEL}


def gpu_node(cluster: Cluster, name: str, clique: str = CLIQUE) -> None:
    cluster.server.store.create(
        cluster.type_of("", "nodes"), "", {"metadata": {"name": name, "labels": {CLIQUE_NODE_LABEL: clique}}}
    )


def allocate(cluster: Cluster, uid: str, claim: str, node: str, namespace: str = USER_NAMESPACE) -> None:
    """A claim made from the domain's workload template (with the domain's label), allocated to `node`."""
    claims = cluster.type_of(*CLAIMS)
    body = {
        "metadata": {"name": claim, "namespace": namespace, "labels": {LABEL_COMPUTE_DOMAIN: uid}},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "channel", "exactly": {"deviceClassName": CHANNEL_ISOLATION_DEVICE_CLASS}}
                ]
            }
        },
    }
    created = cluster.server.store.create(claims, namespace, body)
    created["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "channel",
                        "driver": "compute-domain.nvidia.com",
                        "pool": node,
                        "device": "channel",
                    }
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
    }
    cluster.server.store.update(claims, namespace, claim, created, subresource="status")


def release_claim(cluster: Cluster, claim: str, namespace: str = USER_NAMESPACE) -> None:
    cluster.server.store.delete(cluster.type_of(*CLAIMS), namespace, claim)


def channel_of(cluster: Cluster, uid: str, clique: str = CLIQUE) -> int | None:
    obj = cluster.get(*CLIQUES, DRIVER_NAMESPACE, f"{uid}.{clique}")
    return None if obj is None else obj.get("imexChannel")


def status(cluster: Cluster, name: str) -> dict[str, Any]:
    return dict((cluster.domain(name) or {}).get("status") or {})


def waiting(cluster: Cluster, name: str) -> dict[str, Any]:
    """The domain's `Ready=False` condition (reason, message), or {} when it has none."""
    conditions = status(cluster, name).get("conditions") or []
    return next((dict(c) for c in conditions if c.get("type") == "Ready"), {})


def free_channels(manager: ControllerManager, clique: str = CLIQUE) -> float | None:
    return manager.metrics.registry.get_sample_value("cdctl_imex_channels_free", {"clique": clique})


def shared_daemon(cluster: Cluster, node: str) -> None:
    """The chart's shared IMEX daemon pod on `node`, Ready (driver-managed channel isolation)."""
    body = {
        "metadata": {
            "name": f"cdctl-imex-daemon-{node}",
            "labels": {"app.kubernetes.io/component": "imex-daemon"},
        },
        "spec": {"nodeName": node, "containers": [{"name": "imex", "image": "x"}]},
    }
    pod = cluster.server.store.create(cluster.type_of("", "pods"), DRIVER_NAMESPACE, body)
    cluster.set_pod(pod, ip="10.0.0.5", ready=True)


async def domain_with_claim(cluster: Cluster, name: str, node: str) -> str:
    uid = str(cluster.create_domain(name)["metadata"]["uid"])
    allocate(cluster, uid, f"{name}-worker-0", node)
    return uid


async def two_domains_on_one_node(cluster: Cluster, first: str, second: str) -> tuple[str, str]:
    """Two domains, a claim of each on node-a: channels 1 and 2."""
    gpu_node(cluster, "node-a")
    uids = (
        await domain_with_claim(cluster, first, "node-a"),
        await domain_with_claim(cluster, second, "node-a"),
    )
    await eventually(lambda: (channel_of(cluster, uids[0]), channel_of(cluster, uids[1])) == (1, 2))
    return uids


async def test_each_domain_gets_its_own_channel_published_on_its_clique_object(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller(**HOST_MANAGED)
        for node in ("node-a", "node-b"):
            gpu_node(cluster, node)
        gpu_node(cluster, "node-c", OTHER_CLIQUE)
        uid1 = await domain_with_claim(cluster, "train-1", "node-a")
        allocate(cluster, uid1, "train-1-worker-1", "node-a")  # two pods of one domain on one node
        allocate(cluster, uid1, "train-1-worker-2", "node-c")  # and one in another clique
        uid2 = await domain_with_claim(cluster, "train-2", "node-a")  # two domains on one node
        allocate(cluster, uid2, "train-2-worker-1", "node-b")
        await eventually(lambda: status(cluster, "train-1").get("status") == "Ready")
        await eventually(lambda: status(cluster, "train-2").get("status") == "Ready")
        assert (
            channel_of(cluster, uid1),
            channel_of(cluster, uid1, OTHER_CLIQUE),
            channel_of(cluster, uid2),
        ) == (
            1,
            1,
            2,
        )
        assert status(cluster, "train-1")["channels"] == f"{CLIQUE}:1,{OTHER_CLIQUE}:1"
        assert [(n["name"], n["cliqueID"]) for n in status(cluster, "train-2")["nodes"]] == [
            ("node-a", CLIQUE),
            ("node-b", CLIQUE),
        ]
        template = cluster.get("resource.k8s.io", "resourceclaimtemplates", USER_NAMESPACE, "train-1-channel")
        assert template is not None
        (request,) = template["spec"]["spec"]["devices"]["requests"]
        assert request["exactly"]["deviceClassName"] == CHANNEL_ISOLATION_DEVICE_CLASS
        assert template["spec"]["metadata"]["labels"] == {LABEL_COMPUTE_DOMAIN: uid1}
        assert cluster.list("apps", "daemonsets") == []


async def test_the_fourth_domain_waits_for_a_release_and_a_released_channel_is_reused_last(
    tmp_path: Path,
) -> None:
    async with Cluster(tmp_path) as cluster:
        _, manager = await cluster.start_controller(imex_channel_count=4, **HOST_MANAGED)
        gpu_node(cluster, "node-a")
        uids = [await domain_with_claim(cluster, f"job-{i}", "node-a") for i in range(3)]
        await eventually(lambda: [channel_of(cluster, uid) for uid in uids] == [1, 2, 3])
        await eventually(lambda: free_channels(manager) == 0.0)
        fourth = await domain_with_claim(cluster, "job-3", "node-a")
        await eventually(lambda: waiting(cluster, "job-3").get("reason") == "IMEXChannelsExhausted")
        assert status(cluster, "job-3")["status"] == "NotReady"
        assert (
            CLIQUE in waiting(cluster, "job-3")["message"] and waiting(cluster, "job-3")["status"] == "False"
        )
        reasons = {(e.get("reason"), e["involvedObject"]["name"]) for e in cluster.list("", "events")}
        assert ("IMEXChannelsExhausted", "job-3") in reasons
        assert channel_of(cluster, fourth) is None

        # job-1 is deleted while its pod still holds the claim: its channel stays held.
        cluster.delete_domain("job-1")
        await eventually(lambda: cluster.domain("job-1") is None)
        assert channel_of(cluster, uids[1]) == 2 and channel_of(cluster, fourth) is None
        release_claim(cluster, "job-1-worker-0")  # the pod is gone: now the channel is free
        await eventually(lambda: channel_of(cluster, fourth) == 2)
        await eventually(lambda: status(cluster, "job-3").get("status") == "Ready")
        assert waiting(cluster, "job-3") == {}
        assert cluster.get(*CLIQUES, DRIVER_NAMESPACE, f"{uids[1]}.{CLIQUE}") is None

        # Released in the order 1 then 3: a new domain gets 1 (released longest ago), not 3.
        for i in (0, 2):
            cluster.delete_domain(f"job-{i}")
            release_claim(cluster, f"job-{i}-worker-0")
            await eventually(lambda uid=uids[i]: manager.journal.channels.of_domain(uid) == {})  # type: ignore[misc]
        late = await domain_with_claim(cluster, "job-4", "node-a")
        await eventually(lambda: channel_of(cluster, late) == 1)


async def test_a_restart_rebuilds_the_assignments_from_the_log(tmp_path: Path) -> None:
    db = tmp_path / "controller.db"
    async with Cluster(tmp_path) as cluster:
        task, manager = await cluster.start_controller(db_path=str(db), **HOST_MANAGED)
        first, second = await two_domains_on_one_node(cluster, "a", "b")
        cluster.delete_domain("a")
        release_claim(cluster, "a-worker-0")
        await eventually(lambda: channel_of(cluster, first) is None)
        # The API shows the release before the controller's log may hold it: stop only once it is recorded.
        await eventually(lambda: manager.journal.channels.clique(CLIQUE).released == (1,))
        await cluster.stop_controller(task)

        _, restarted = await cluster.start_controller(db_path=str(db), **HOST_MANAGED)
        assert restarted.journal.channels.of_domain(second) == {
            CLIQUE: 2
        }  # from the log, before any reconcile
        assert restarted.journal.channels.clique(CLIQUE).released == (1,)
        third = await domain_with_claim(cluster, "c", "node-a")
        await eventually(lambda: channel_of(cluster, third) == 3)  # 1 was released: reused last
        assert channel_of(cluster, second) == 2

    events = await read_log(db)
    types = [(e.type, e.data["channel"]) for e in events if e.stream == f"channels/{CLIQUE}"]
    assert types == [
        ("ImexChannelAssigned", 1),
        ("ImexChannelAssigned", 2),
        ("ImexChannelReleased", 1),
        ("ImexChannelAssigned", 3),
    ]
    reader = await SqliteEventStore.open(db, read_only=True)
    try:
        rows = await reader.query(
            "SELECT channel, domain_uid, name, node, released_at IS NOT NULL FROM channel_assignments"
            " ORDER BY assigned_position"
        )
    finally:
        await reader.close()
    assert [tuple(r) for r in rows] == [
        (1, first, "a", "node-a", 1),
        (2, second, "b", "node-a", 0),
        (3, third, "c", "node-a", 0),
    ]


async def test_a_claim_in_another_namespace_wearing_the_label_counts_for_nothing(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller(**HOST_MANAGED)
        gpu_node(cluster, "node-a")
        gpu_node(cluster, "node-x", OTHER_CLIQUE)
        cluster.server.store.create(cluster.type_of("", "namespaces"), "", {"metadata": {"name": "tenant-b"}})
        uid = await domain_with_claim(cluster, "victim", "node-a")
        await eventually(lambda: channel_of(cluster, uid) == 1)
        # Another tenant labels its own claims with the domain's uid: one in a clique the domain is not in,
        # one on the domain's node (to keep its channel from being released).
        allocate(cluster, uid, "intruder-x", "node-x", namespace="tenant-b")
        allocate(cluster, uid, "intruder-a", "node-a", namespace="tenant-b")
        await eventually(lambda: status(cluster, "victim").get("status") == "Ready")
        assert channel_of(cluster, uid, OTHER_CLIQUE) is None
        assert [n["name"] for n in status(cluster, "victim")["nodes"]] == ["node-a"]
        cluster.delete_domain("victim")
        release_claim(cluster, "victim-worker-0")
        await eventually(lambda: channel_of(cluster, uid) is None)


async def test_driver_managed_ready_waits_for_the_shared_daemon_of_each_node(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller(imex_isolation=ImexIsolation.CHANNEL)
        gpu_node(cluster, "node-a")
        await domain_with_claim(cluster, "job", "node-a")
        await eventually(lambda: status(cluster, "job").get("channels") == f"{CLIQUE}:1")
        assert status(cluster, "job")["status"] == "NotReady"
        assert [n["status"] for n in status(cluster, "job")["nodes"]] == ["NotReady"]  # its daemon is not up
        shared_daemon(cluster, "node-a")
        await eventually(lambda: status(cluster, "job").get("status") == "Ready")
        assert cluster.list("apps", "daemonsets") == []
        metrics = generate_latest(cluster.controllers[0][1][0].metrics.registry).decode()
        assert f'cdctl_imex_channels_free{{clique="{CLIQUE}"}} 2046.0' in metrics


async def run_cli(args: list[str]) -> Result:
    """`cdctl ARGS` (in a thread: the command runs its own event loop)."""
    return await asyncio.to_thread(CliRunner().invoke, cli, args)


async def test_history_and_sql_show_who_held_which_channel(tmp_path: Path) -> None:
    db = tmp_path / "controller.db"
    async with Cluster(tmp_path) as cluster:
        task, _ = await cluster.start_controller(db_path=str(db), **HOST_MANAGED)
        mine, theirs = await two_domains_on_one_node(cluster, "mine", "theirs")
        await cluster.stop_controller(task)

    history = await run_cli(["history", "--db", str(db), f"computedomain/{USER_NAMESPACE}/mine"])
    assert history.exit_code == 0, history.output
    assert "ImexChannelAssigned" in history.output and mine in history.output
    assert theirs not in history.output  # the clique's stream is shared: only this domain's events
    stream = await run_cli(["history", "--db", str(db), f"channels/{CLIQUE}"])
    assert stream.output.count("ImexChannelAssigned") == 2
    query = "SELECT name, channel, clique, node, how FROM channel_assignments ORDER BY channel"
    sql = await run_cli(["sql", "--db", str(db), "--json", query])
    assert sql.exit_code == 0, sql.output
    rows = json.loads(sql.output)
    assert rows == [
        {"name": "mine", "channel": 1, "clique": CLIQUE, "node": "node-a", "how": "picked"},
        {"name": "theirs", "channel": 2, "clique": CLIQUE, "node": "node-a", "how": "picked"},
    ]


# Longer than test_standby's 1 s: on a loaded machine a late renewal must not hand the Lease over early.
STEADY_LEASE = {**LEASE, "lease_duration_s": 4.0, "renew_deadline_s": 3.0, "retry_period_s": 0.2}


@pytest.mark.parametrize("host_managed", [True, False], ids=["host-managed", "driver-managed"])
async def test_a_new_leader_keeps_every_assignment_made_before_it_mid_formation(
    tmp_path: Path, host_managed: bool
) -> None:
    """Both replicas run under the chart's RBAC and policies for channel isolation, in each IMEX mode. The
    standby records the channel the leader published; the leader dies while a second domain forms; the new
    leader keeps the first domain's number (recorded as observed) and gives the second another one."""
    chart = {
        "controller": {"leaderElection": {"enabled": True}},
        "featureGates": {"HostManagedIMEX": host_managed},
        "resources": {"computeDomains": {"imex": {"isolation": "channel"}}},
    }
    settings = HOST_MANAGED if host_managed else {"imex_isolation": ImexIsolation.CHANNEL}
    async with Cluster(tmp_path) as cluster:
        cluster.server.rbac.load(chart_rbac(DRIVER_NAMESPACE, chart))
        cluster.server.load_policies(chart_policies(DRIVER_NAMESPACE, chart))
        if not host_managed:
            shared_daemon(cluster, "node-a")

        async def replica(pod: str) -> tuple[asyncio.Task[None], ControllerManager]:
            return await cluster.start_controller(
                pod_name=pod, kubeconfig=as_pod(cluster, pod), db_path=str(tmp_path / f"{pod}.db"),
                leader_election=STEADY_LEASE, wait_synced=False, **settings,
            )  # fmt: skip

        leader_task, leader = await replica("controller-a")
        await eventually(lambda: leader.leading)
        _, standby = await replica("controller-b")
        await asyncio.wait_for(standby.synced.wait(), 30)
        gpu_node(cluster, "node-a")
        first = await domain_with_claim(cluster, "first", "node-a")
        await eventually(lambda: channel_of(cluster, first) == 1)
        await eventually(lambda: standby.journal.channels.of_domain(first) == {CLIQUE: 1})
        assert cluster.server.audit.writes(pod="controller-b") == []

        assert leader.elector is not None
        leader.elector.is_leader = False  # killed: the Lease is not released
        await cluster.stop_controller(leader_task)
        second = await domain_with_claim(cluster, "second", "node-a")  # forming while nobody leads
        await eventually(lambda: standby.leading)
        await eventually(lambda: channel_of(cluster, second) == 2)
        await eventually(lambda: status(cluster, "first").get("status") == "Ready")
        assert channel_of(cluster, first) == 1
        assert cluster.server.rbac.denials == [] and cluster.server.store.policies.denials == []

    events = await read_log(tmp_path / "controller-b.db")
    acquired = next(e.position for e in events if e.type == "LeadershipAcquired")
    decisions = [
        (e.data["domain_uid"], e.data["channel"], e.data["source"], e.position > acquired)
        for e in events
        if e.type == "ImexChannelAssigned"
    ]
    assert decisions == [(first, 1, "observed", True), (second, 2, "picked", True)]


async def test_a_node_without_a_clique_label_waits_until_it_gets_one(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller(**HOST_MANAGED)
        nodes = cluster.type_of("", "nodes")
        cluster.server.store.create(nodes, "", {"metadata": {"name": "node-a", "labels": {}}})
        uid = await domain_with_claim(cluster, "job", "node-a")
        await eventually(lambda: waiting(cluster, "job").get("reason") == "NodeWithoutClique")
        assert "node-a" in waiting(cluster, "job")["message"] and channel_of(cluster, uid) is None
        node = cluster.get("", "nodes", "", "node-a")
        assert node is not None
        node["metadata"]["labels"] = {CLIQUE_NODE_LABEL: CLIQUE}  # GPU Feature Discovery catches up
        cluster.server.store.update(nodes, "", "node-a", node)
        await eventually(lambda: channel_of(cluster, uid) == 1)
        await eventually(lambda: status(cluster, "job").get("status") == "Ready")


def test_a_claims_node_is_read_from_its_allocation_and_little_else_is_kept() -> None:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
    claim = {
        "metadata": {"name": "c", "namespace": USER_NAMESPACE, "managedFields": [{"big": 1}]},
        "spec": {"devices": {"requests": [{"name": "channel"}]}},
        "status": {
            "allocation": {
                "devices": {"results": [{"pool": "node-a"}]},
                "nodeSelector": {"nodeSelectorTerms": [term]},
            }
        },
    }
    kept = kept_form("ResourceClaim", claim)
    assert allocated_node(kept) == allocated_node(claim) == "node-a"
    assert "spec" not in kept and "managedFields" not in kept["metadata"]
    assert (
        allocated_node({"status": {}}) == allocated_node(kept_form("ResourceClaim", {"metadata": {}})) == ""
    )
    two = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}
    assert allocated_node({"status": {"allocation": {"nodeSelector": {"nodeSelectorTerms": [two]}}}}) == ""


async def test_a_collected_file_shows_the_assignments_per_source(tmp_path: Path) -> None:
    """`cdctl collect` of two controller replicas' logs: the same view, with the log each row came from."""
    a, b = "3b9f6a2e-1c4d-4e8f-9a0b-7c6d5e4f3a21", "9c1e0d4b-2a3f-4b5c-8d7e-6f5a4b3c2d10"
    stream = f"channels/{CLIQUE}"
    await write_log(
        tmp_path / "c0.db",
        [
            (stream, ImexChannelAssigned(CLIQUE, 1, a, USER_NAMESPACE, "a", "node-a", "team-a/w0")),
            (stream, ImexChannelReleased(CLIQUE, 1, a, USER_NAMESPACE, "a", "gone")),
        ],
    )
    await write_log(tmp_path / "c1.db", [(stream, ImexChannelAssigned(CLIQUE, 2, b, USER_NAMESPACE, "b"))])
    path = tmp_path / "collected.db"
    with CollectedFile.open(path, create=True) as file:
        ensure_read_models(file)
        for pod in ("c0", "c1"):
            await store_locally(file, LogRef("controller", "controller", tmp_path / f"{pod}.db"), pod=pod)
        rebuild(file, file.sources())
    query = "SELECT source, channel, name, node, released_at IS NOT NULL AS released FROM channel_assignments"
    result = await run_cli(["sql", "--db", str(path), "--json", f"{query} ORDER BY channel"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [(r["channel"], r["name"], r["node"], r["released"]) for r in rows] == [
        (1, "a", "node-a", 1),
        (2, "b", "", 0),
    ]
    assert rows[0]["source"] != rows[1]["source"]
