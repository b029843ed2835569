"""Rack domains are created once: two controller replicas racing on one API server, a restart on the same log,
the default clique label with its hashed names, and a name already taken by a domain of no rack."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from cdctl.controller.rackdomains import RackDomains
from cdctl.domain.racks import LABEL_RACK, Decision, decide, rack_domain_name
from cdctl.k8s.informer import Change, Observation
from cdctl.k8s.resources import NODES
from cdctl.store.memory import InMemoryEventStore
from tests.controller.harness import USER_NAMESPACE, Cluster, eventually, eventually_async
from tests.controller.test_rackdomains import (
    PROVIDER_LABEL,
    RACK_A,
    RACKS_ON,
    join,
    kube_events,
    leave,
    rack_domains,
    rack_events,
    template,
)

CLIQUE_LABEL = "nvidia.com/gpu.clique"


async def test_two_replicas_racing_create_exactly_one_domain_per_rack(tmp_path: Path) -> None:
    stores = [InMemoryEventStore(), InMemoryEventStore()]
    racks = [f"s0-{number:03d}-us-west-01a" for number in range(6)]
    async with Cluster(tmp_path) as cluster:
        _, first = await cluster.start_controller(store=stores[0], pod_name="controller-a", **RACKS_ON)
        _, second = await cluster.start_controller(store=stores[1], pod_name="controller-b", **RACKS_ON)
        assert first.rack_domains is not None and second.rack_domains is not None
        await asyncio.gather(first.rack_domains.synced.wait(), second.rack_domains.synced.wait())
        for rack in racks:  # both replicas see every rack join at about the same moment
            join(cluster, rack, count=3)
        await eventually(lambda: len(rack_domains(cluster)) == len(racks))
        await asyncio.gather(first.rack_domains.queue.wait_idle(), second.rack_domains.queue.wait_idle())
        domains = rack_domains(cluster)
        assert sorted(d["metadata"]["name"] for d in domains) == racks
        created = [
            data
            for store in stores
            for _, kind, data in await rack_events(store)
            if kind == "RackDomainCreated"
        ]
        fresh = [data for data in created if not data["existed"]]
        assert sorted(data["rack"] for data in fresh) == racks  # each rack created by exactly one replica
        uids = {d["metadata"]["name"]: d["metadata"]["uid"] for d in domains}
        assert all(data["uid"] == uids[data["name"]] for data in created)

        # A replica whose view is stale (it has seen the nodes, not the domain) loses the create to the API
        # server, reads the winner back and records it as existing.
        stale = RackDomains(second.ctx)
        stale._node_changed(
            Observation(
                NODES, Change.ADDED, {"metadata": {"name": "n", "labels": {PROVIDER_LABEL: racks[0]}}}
            )
        )
        assert decide(stale.facts(racks[0])).decision == Decision.CREATE
        await stale.reconcile(racks[0])
        assert sorted(d["metadata"]["uid"] for d in rack_domains(cluster)) == sorted(uids.values())
        last = (await rack_events(stores[1]))[-1]
        assert last[1] == "RackDomainCreated" and last[2]["existed"] is True
        assert last[2]["uid"] == uids[racks[0]]


async def test_a_restart_and_a_relist_create_nothing_new(tmp_path: Path) -> None:
    store = InMemoryEventStore()
    async with Cluster(tmp_path) as cluster:
        task, manager = await cluster.start_controller(store=store, **RACKS_ON)
        join(cluster, RACK_A, count=4)
        uid = (await eventually(lambda: cluster.domain(RACK_A)))["metadata"]["uid"]
        await eventually(lambda: template(cluster, f"imex-channel-{RACK_A}"))
        await cluster.stop_controller(task)

        _, restarted = await cluster.start_controller(store=store, **RACKS_ON)
        assert restarted.rack_domains is not None
        await asyncio.wait_for(restarted.rack_domains.synced.wait(), 30)
        await restarted.rack_domains.queue.wait_idle()
        assert [d["metadata"]["uid"] for d in rack_domains(cluster)] == [uid]
        assert [kind for _, kind, _ in await rack_events(store)] == ["RackDomainCreated"]
        assert manager is not restarted


async def test_the_default_clique_label_gets_hashed_dns1123_names(tmp_path: Path) -> None:
    clique = "6a130f54-faaa-4b8f-847f-be44ab70f917.32766"
    settings = {
        "rack_domains": True,
        "rack_domain_namespace": USER_NAMESPACE,
        "rack_domain_name_pattern": "rack-{rack}",
    }
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller(**settings)
        nodes = join(cluster, clique, count=2, label=CLIQUE_LABEL)
        name = rack_domain_name(clique, "rack-{rack}")
        assert re.fullmatch(r"rack-6a130f54-faaa-4b8f-847f-be44ab70f917-32766-[0-9a-f]{8}", name)
        domain = await eventually(lambda: cluster.domain(name))
        assert domain["metadata"]["labels"] == {LABEL_RACK: clique}
        await eventually(lambda: template(cluster, f"imex-channel-{name}"))
        leave(cluster, nodes)
        await eventually(lambda: cluster.domain(name) is None)


async def test_a_name_taken_by_a_users_domain_is_a_conflict_and_that_domain_is_never_deleted(
    tmp_path: Path,
) -> None:
    store = InMemoryEventStore()
    async with Cluster(tmp_path) as cluster:
        _, manager = await cluster.start_controller(store=store, **RACKS_ON)
        users = cluster.create_domain(RACK_A, num_nodes=2)
        nodes = join(cluster, RACK_A, count=2)
        warned = await eventually(
            lambda: [e for e in kube_events(cluster, RACK_A) if e["reason"] == "RackDomainNameTaken"]
        )
        assert "not a rack domain" in warned[0]["message"]
        leave(cluster, nodes)
        assert manager.rack_domains is not None
        await eventually(lambda: not manager.rack_domains.facts(RACK_A).nodes)
        await manager.rack_domains.queue.wait_idle()
        assert (cluster.domain(RACK_A) or {}).get("metadata", {}).get("uid") == users["metadata"]["uid"]
        assert [kind for _, kind, _ in await rack_events(store)] == ["RackDomainConflict"]


async def test_the_seeds_upper_case_value_names_its_domain_in_lower_case_and_a_case_twin_conflicts(
    tmp_path: Path,
) -> None:
    store = InMemoryEventStore()
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller(store=store, **RACKS_ON)
        join(cluster, "S0-011-US-WEST-01A", count=2)
        domain = await eventually(lambda: cluster.domain("s0-011-us-west-01a"))
        assert domain["metadata"]["labels"] == {LABEL_RACK: "S0-011-US-WEST-01A"}
        assert domain["spec"]["channel"]["resourceClaimTemplate"]["name"] == "imex-channel-s0-011-us-west-01a"
        join(cluster, "s0-011-us-west-01a", count=1, prefix="twin")
        await eventually_async(lambda: _has(store, "RackDomainConflict"))
        assert len(rack_domains(cluster)) == 1
        assert (cluster.domain("s0-011-us-west-01a") or {})["metadata"]["uid"] == domain["metadata"]["uid"]
        conflict = [data for _, kind, data in await rack_events(store) if kind == "RackDomainConflict"]
        assert conflict[0]["rack"] == "s0-011-us-west-01a"
        assert "belongs to rack 'S0-011-US-WEST-01A'" in conflict[0]["reason"]


async def _has(store: InMemoryEventStore, kind: str) -> bool:
    return any(k == kind for _, k, _ in await rack_events(store))
