"""Rack domains on the simulated API server: racks join and get one domain each, leave and lose it, a claim in
use keeps it (with an Event), and every decision is an event in stream `rack/<name>` of the controller's log.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from cdctl.cli.main import cli
from cdctl.domain.racks import LABEL_RACK
from cdctl.store.memory import InMemoryEventStore
from tests.controller.harness import USER_NAMESPACE, Cluster, eventually, eventually_async

PROVIDER_LABEL = "ds.coreweave.com/nvlink.domain"
RACK_A = "s0-011-us-west-01a"
RACK_B = "s0-012-us-west-01a"
NODES_PER_RACK = 18
RACKS_ON = {
    "rack_domains": True,
    "rack_label": PROVIDER_LABEL,
    "rack_domain_namespace": USER_NAMESPACE,
}


def join(
    cluster: Cluster, rack: str, count: int = NODES_PER_RACK, label: str = PROVIDER_LABEL, prefix: str = ""
) -> list[str]:
    """Nodes of a rack join as the provider delivers them: labelled with the rack from the start."""
    names = [f"{prefix or rack.lower()}-n{slot:02d}" for slot in range(count)]
    for name in names:
        cluster.server.store.create(
            cluster.type_of("", "nodes"), "", {"metadata": {"name": name, "labels": {label: rack}}}
        )
    return names


def leave(cluster: Cluster, names: list[str]) -> None:
    for name in names:
        cluster.server.store.delete(cluster.type_of("", "nodes"), "", name)


def rack_domains(cluster: Cluster) -> list[dict[str, Any]]:
    domains = cluster.list("resource.nvidia.com", "computedomains", USER_NAMESPACE)
    return [d for d in domains if LABEL_RACK in (d["metadata"].get("labels") or {})]


def template(cluster: Cluster, name: str) -> dict[str, Any] | None:
    return cluster.get("resource.k8s.io", "resourceclaimtemplates", USER_NAMESPACE, name)


async def rack_events(store: InMemoryEventStore) -> list[tuple[str, str, dict[str, Any]]]:
    return [(e.stream, e.type, e.data) for e in await store.read_all() if e.stream.startswith("rack/")]


def kube_events(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    events = cluster.list("", "events", USER_NAMESPACE)
    return [e for e in events if e["involvedObject"]["name"] == name]


def in_use_claim(domain_uid: str, name: str = "worker-0-imex-channel-0") -> dict[str, Any]:
    """A workload's claim of the domain's channel, allocated and reserved for its pod."""
    config = {
        "requests": ["channel"],
        "opaque": {
            "driver": "compute-domain.nvidia.com",
            "parameters": {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "ComputeDomainChannelConfig",
                "domainID": domain_uid,
                "allocationMode": "Single",
            },
        },
    }
    return {
        "metadata": {"name": name, "namespace": USER_NAMESPACE},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "channel",
                        "exactly": {"deviceClassName": "compute-domain-default-channel.nvidia.com"},
                    }
                ],
                "config": [config],
            }
        },
    }


async def test_a_rack_that_joins_gets_one_domain_and_template_and_loses_it_when_it_leaves(
    tmp_path: Path,
) -> None:
    store = InMemoryEventStore()
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller(store=store, **RACKS_ON)
        nodes = join(cluster, RACK_A)
        domain = await eventually(lambda: cluster.domain(RACK_A))
        assert domain["spec"] == {
            "numNodes": 0,
            "channel": {
                "resourceClaimTemplate": {"name": f"imex-channel-{RACK_A}"},
                "allocationMode": "Single",
            },
        }
        assert domain["metadata"]["labels"] == {LABEL_RACK: RACK_A}
        uid = domain["metadata"]["uid"]
        rct = await eventually(lambda: template(cluster, f"imex-channel-{RACK_A}"))
        assert rct["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["domainID"] == uid
        await eventually(lambda: (cluster.domain(RACK_A) or {}).get("status"))  # the normal reconcile ran
        assert len(rack_domains(cluster)) == 1

        leave(cluster, nodes)
        await eventually(lambda: cluster.domain(RACK_A) is None)
        await eventually(lambda: template(cluster, f"imex-channel-{RACK_A}") is None)
        events = await rack_events(store)
        assert [(stream, kind) for stream, kind, _ in events] == [
            (f"rack/{RACK_A}", "RackDomainCreated"),
            (f"rack/{RACK_A}", "RackDomainDeleted"),
        ]
        created, deleted = events[0][2], events[1][2]
        assert created["nodes"] and set(created["nodes"]) <= set(nodes)  # the rack's nodes seen so far
        assert created["rack_label"] == PROVIDER_LABEL
        assert created["existed"] is False and created["uid"] == uid
        assert deleted["uid"] == uid and "no nodes left and no claim" in deleted["reason"]


async def test_each_rack_gets_its_own_domain_and_partial_departure_keeps_it(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        _, manager = await cluster.start_controller(**RACKS_ON)
        nodes_a = join(cluster, RACK_A)
        join(cluster, RACK_B)
        await eventually(lambda: len(rack_domains(cluster)) == 2)
        assert {d["metadata"]["name"] for d in rack_domains(cluster)} == {RACK_A, RACK_B}
        await eventually(lambda: template(cluster, f"imex-channel-{RACK_B}"))
        leave(cluster, nodes_a[:17])  # one node of rack A is still there
        assert manager.rack_domains is not None
        await eventually(lambda: len(manager.rack_domains.facts(RACK_A).nodes) == 1)
        await manager.rack_domains.queue.wait_idle()
        assert cluster.domain(RACK_A) is not None
        leave(cluster, nodes_a[17:])
        await eventually(lambda: cluster.domain(RACK_A) is None)
        assert [d["metadata"]["name"] for d in rack_domains(cluster)] == [RACK_B]


async def test_a_domain_whose_claim_is_in_use_stays_and_says_why_until_the_claim_goes(tmp_path: Path) -> None:
    store = InMemoryEventStore()
    async with Cluster(tmp_path) as cluster:
        await cluster.start_controller(store=store, **RACKS_ON)
        nodes = join(cluster, RACK_A, count=2)
        uid = (await eventually(lambda: cluster.domain(RACK_A)))["metadata"]["uid"]
        claims = cluster.type_of("resource.k8s.io", "resourceclaims")
        claim = cluster.server.store.create(claims, USER_NAMESPACE, in_use_claim(uid))
        claim["status"] = {"reservedFor": [{"resource": "pods", "name": "worker-0", "uid": "pod-uid"}]}
        cluster.server.store.update(
            claims, USER_NAMESPACE, claim["metadata"]["name"], claim, subresource="status"
        )

        leave(cluster, nodes)
        kept = await eventually(
            lambda: [e for e in kube_events(cluster, RACK_A) if e["reason"] == "RackDomainInUse"]
        )
        assert "worker-0-imex-channel-0" in kept[0]["message"]
        assert cluster.domain(RACK_A) is not None
        decisions = await eventually_async(lambda: _types(store, {"RackDomainCreated", "RackDomainKept"}))
        assert decisions == ["RackDomainCreated", "RackDomainKept"]

        cluster.server.store.delete(claims, USER_NAMESPACE, claim["metadata"]["name"])
        await eventually(lambda: cluster.domain(RACK_A) is None)
        assert [t for _, t, _ in await rack_events(store)] == [
            "RackDomainCreated",
            "RackDomainKept",
            "RackDomainDeleted",
        ]


async def _types(store: InMemoryEventStore, wanted: set[str]) -> list[str] | None:
    types = [t for _, t, _ in await rack_events(store)]
    return types if set(types) >= wanted else None


async def test_rack_decisions_are_in_the_log_file_for_cdctl_events_and_the_log_verifies(
    tmp_path: Path,
) -> None:
    db = tmp_path / "controller.db"
    async with Cluster(tmp_path) as cluster:
        task, _ = await cluster.start_controller(db_path=str(db), **RACKS_ON)
        nodes = join(cluster, RACK_A, count=2)
        await eventually(lambda: cluster.domain(RACK_A))
        leave(cluster, nodes)
        await eventually(lambda: cluster.domain(RACK_A) is None)
        await cluster.stop_controller(task)
    runner = CliRunner()
    listed = await asyncio.to_thread(
        runner.invoke, cli, ["events", "--db", str(db), "--stream", "rack/*", "--json"]
    )
    assert listed.exit_code == 0, listed.output
    lines = json.loads(listed.stdout)
    assert [(e["stream"], e["type"]) for e in lines] == [
        (f"rack/{RACK_A}", "RackDomainCreated"),
        (f"rack/{RACK_A}", "RackDomainDeleted"),
    ]
    verified = await asyncio.to_thread(runner.invoke, cli, ["verify", "--db", str(db)])
    assert verified.exit_code == 0, verified.output
