"""Channel isolation on the simulated rack with the real controller, plugins and IMEX daemons.

- Four domains share one 18-node rack: single-GPU pods, several of a domain on one node, domains mixed on
  nodes. Every pod runs, each domain holds its own channel (the one published on its clique) and every pod of
  a domain the same one; inside the workers, imports within a domain succeed and across domains are refused
  (cdctl.sim.rack.isolation). Host-managed IMEX too, on a smaller rack.
- The controller deleted mid-formation (on its log, or with the log lost) and the leader of two replicas
  force-deleted mid-formation: the domains formed before keep their channels, the next domain gets another.
- `--imex-channel-count 4` (channels 1 to 3): a fourth domain waits, with the Event IMEXChannelsExhausted and
  its status saying why, and runs once another domain's channel is released.
- A pod force-deleted while its container still runs (it finishes a checkpoint after SIGTERM): its channel,
  released with its domain, goes to a new domain elsewhere only when no other is free, and a new domain given
  it on that node is fenced until the container is gone.
- A tenant that copies another namespace's workload template (domain uid, label) runs nothing with it: the
  plugin refuses the claim and the controller gives the copy no channel.
Seconds apiece but the 18-node case. Driver-managed unless a case says otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from cdctl.sim.apiserver.errors import AlreadyExists, NotFound
from cdctl.sim.rack.checks import CD_GROUP, leftovers, list_pods, log_rows, worker_states
from cdctl.sim.rack.faults import Restarter, delete_controller_pod
from cdctl.sim.rack.isolation import DomainWorkers, prove_isolation, published_channels
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.scenario import DomainPlan, run_scenario
from cdctl.sim.rack.settings import HOST_MANAGED, RackSettings
from cdctl.sim.rack.workload import compute_domain, worker_job
from tests.integration.support import domain_uid, until

pytestmark = pytest.mark.integration
HOSTNAME = "kubernetes.io/hostname"


def _settings(work_dir: Path, nodes: int, **extra: Any) -> RackSettings:
    return RackSettings(work_dir, nodes_per_rack=nodes, probe_period_s=0.5, isolation="channel", **extra)


def _plans(sizes: list[int]) -> list[DomainPlan]:
    letters = "abcdefgh"
    return [
        DomainPlan(f"cd-{letters[i]}", f"team-{letters[i]}", workers=size, gpus_per_pod=1)
        for i, size in enumerate(sizes)
    ]


@pytest.mark.parametrize(
    ("nodes", "sizes", "mode"),
    [(18, [5, 7, 6, 8], "driver-managed"), (4, [3, 5, 4], HOST_MANAGED)],
    ids=["four domains on 18 nodes", "host-managed"],
)
async def test_domains_share_a_rack_each_with_its_own_channel_and_import_only_within(
    work_dir: Path, nodes: int, sizes: list[int], mode: str
) -> None:
    plans = _plans(sizes)
    placed: dict[str, list[tuple[str, str]]] = {}  # node -> (domain, pod)

    async def look(rack: Rack) -> None:
        for plan in plans:
            for worker in worker_states(rack, plan.namespace, plan.job_names[0], channel_isolation=True):
                placed.setdefault(worker.node, []).append((plan.name, worker.name))

    async with Rack(_settings(work_dir, nodes, mode=mode)) as rack:
        report = await run_scenario(rack, plans, while_formed=look, timeout_s=120)
    assert report.problems == [] and report.ok
    proof = report.isolation
    assert proof is not None
    channels = {domain: set().union(*by_clique.values()) for domain, by_clique in proof.held.items()}
    assert all(len(held) == 1 and 0 not in held for held in channels.values()), channels
    assert len({min(held) for held in channels.values()}) == len(plans), "each domain its own channel"
    for domain, by_clique in proof.held.items():
        assert {c: min(held) for c, held in by_clique.items()} == proof.published[domain]
    assert proof.same_domain_imports == sum(sizes) and proof.cross_domain_imports == sum(sizes)
    assert sum(len(pods) for pods in placed.values()) == sum(sizes)
    assert any(len({d for d, _ in pods}) > 1 for pods in placed.values()), "domains mixed on a node"
    assert any(len(pods) > len({d for d, _ in pods}) for pods in placed.values()), (
        "several pods of one domain on a node"
    )


# ---- by hand: domains created one after another ----------------------------------------------------------
def _create(rack: Rack, plan: DomainPlan, *, node: str = "", linger_s: float = 0.0) -> None:
    """The domain and its job (pinned to `node` when given; `linger_s`: its workers stop that long after
    SIGTERM, holding their channel, within a grace period that lets them)."""
    store = rack.store
    with contextlib.suppress(AlreadyExists):
        store.create(store.type_of("", "namespaces"), "", {"metadata": {"name": plan.namespace}})
    store.create(
        store.type_of(CD_GROUP, "computedomains"),
        plan.namespace,
        compute_domain(plan.name, plan.namespace, plan.spec_num_nodes()),
    )
    job = worker_job(
        plan.job_names[0], plan.namespace, plan.workers, plan.template, 1, {HOSTNAME: node} if node else None
    )
    if linger_s:
        pod_spec = job["spec"]["template"]["spec"]
        pod_spec["terminationGracePeriodSeconds"] = int(linger_s * 3)
        pod_spec["containers"][0]["command"] += ["--linger", str(linger_s)]
    store.create(store.type_of("batch", "jobs"), plan.namespace, job)


def _delete(rack: Rack, plan: DomainPlan) -> None:
    store = rack.store
    store.delete(store.type_of("batch", "jobs"), plan.namespace, plan.job_names[0])
    store.delete(store.type_of(CD_GROUP, "computedomains"), plan.namespace, plan.name)


def _running(rack: Rack, plan: DomainPlan) -> list[Any]:
    workers = worker_states(rack, plan.namespace, plan.job_names[0], channel_isolation=True)
    return [w for w in workers if w.done] if len(workers) == plan.workers else []


async def _formed(rack: Rack, plan: DomainPlan, timeout_s: float = 60.0) -> int:
    """Until every worker of the domain runs with its channel; that channel."""

    def missing() -> str | None:
        running = _running(rack, plan)
        return None if len(running) == plan.workers else f"{len(running)} of {plan.workers} running"

    await until(f"{plan.name} formed", missing, timeout_s)
    (channel,) = {w.channel for w in _running(rack, plan)}
    return int(channel)


def _channel_of(rack: Rack, plan: DomainPlan) -> int | None:
    published = published_channels(rack, domain_uid(rack, plan.namespace, plan.name))
    return next(iter(published.values()), None)


async def _proof(rack: Rack, plans: list[DomainPlan]) -> None:
    domains = [
        DomainWorkers(p.name, p.namespace, domain_uid(rack, p.namespace, p.name), _running(rack, p))
        for p in plans
    ]
    proof = await prove_isolation(rack, domains)
    assert proof.problems == []


async def _torn_down(rack: Rack, plans: list[DomainPlan]) -> None:
    for plan in plans:
        _delete(rack, plan)
    namespaces, jobs = [p.namespace for p in plans], [p.job_names[0] for p in plans]

    def left() -> str | None:
        found = leftovers(rack, namespaces, jobs)
        return "; ".join(found[:3]) if found else None

    await until("nothing left", left, timeout_s=60)


def _log_channel_events(db: Path) -> list[tuple[str, str, int]]:
    rows = log_rows(
        db,
        "SELECT type, json_extract(data, '$.name'), json_extract(data, '$.channel') FROM events"
        " WHERE stream LIKE 'channels/%' ORDER BY position",
    )
    return [(str(t), str(n), int(c)) for t, n, c in rows if c is not None]


@pytest.mark.parametrize(
    ("replicas", "keep_log"),
    [(1, True), (1, False), (2, True)],
    ids=["controller restarted on its log", "controller restarted, log lost", "leader failover"],
)
async def test_assignments_survive_a_controller_restart_and_a_failover_mid_formation(
    work_dir: Path, replicas: int, keep_log: bool
) -> None:
    first, second, third = _plans([3, 3, 2])
    async with (
        Rack(_settings(work_dir, 2, controller_replicas=replicas)) as rack,
        Restarter(rack, delay_s=0.3),
    ):
        _create(rack, first)
        _create(rack, second)
        # Mid-formation: the first domain's channel is published; the fault comes before the rest forms.
        await until("a channel published", lambda: None if _channel_of(rack, first) else "none yet")
        before = _channel_of(rack, first)
        leader = next(iter(rack.controllers)) if replicas == 1 else await _leader_replica(rack)
        await delete_controller_pod(rack, leader, keep_log=keep_log)
        _create(rack, third)
        channels = [await _formed(rack, p) for p in (first, second, third)]
        assert channels[0] == before, "the first domain kept its channel"
        assert len(set(channels)) == 3 and 0 not in channels
        assert [_channel_of(rack, p) for p in (first, second, third)] == channels
        await _proof(rack, [first, second, third])
        await _torn_down(rack, [first, second, third])
    for db in rack.controller_dbs():
        assigned: dict[str, int] = {}
        for kind, name, channel in _log_channel_events(db):
            if kind == "ImexChannelAssigned":
                assert assigned.setdefault(name, channel) == channel, f"{name} reassigned in {db}"


async def _leader_replica(rack: Rack) -> int:
    lease_type = rack.store.type_of("coordination.k8s.io", "leases")

    def holder() -> str:
        leases, _ = rack.store.list_objects(lease_type, rack.settings.driver_namespace, copies=False)
        return next((str((lease.get("spec") or {}).get("holderIdentity") or "") for lease in leases), "")

    await until("a leader", lambda: None if holder() else "no Lease holder")
    return next(r for r in rack.controllers if holder().startswith(rack.controller_pod(r) + "-"))


def _events_for(rack: Rack, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for group in ("", "events.k8s.io"):
        try:
            events, _ = rack.store.list_objects(rack.store.type_of(group, "events"), namespace, copies=False)
        except NotFound:  # that API group is not served
            continue
        for event in events:
            regarding = event.get("regarding") or event.get("involvedObject") or {}
            if regarding.get("name") == name and event.get("reason") == reason:
                found.append(event)
    return found


async def test_with_four_channels_a_fourth_domain_waits_then_runs_when_one_is_released(
    work_dir: Path,
) -> None:
    plans = _plans([2, 2, 2, 2])
    async with Rack(_settings(work_dir, 2, imex_channel_count=4)) as rack:
        for plan in plans:
            _create(rack, plan)

        def formed() -> list[DomainPlan]:
            return [p for p in plans if len(_running(rack, p)) == p.workers]

        def three() -> str | None:
            return None if len(formed()) >= 3 else f"formed: {[p.name for p in formed()]}"

        # Domains created together are served in no promised order: whichever three come first.
        await until("three domains formed", three, 60)
        running = formed()
        (waiting,) = [p for p in plans if p not in running]
        first = running[0]
        held = [await _formed(rack, p) for p in running]
        assert sorted(held) == [1, 2, 3]
        cds = rack.store.type_of(CD_GROUP, "computedomains")

        def exhausted() -> str | None:
            status = rack.store.get(cds, waiting.namespace, waiting.name).get("status") or {}
            events = _events_for(rack, waiting.namespace, waiting.name, "IMEXChannelsExhausted")
            said = "IMEXChannelsExhausted" in str(status)
            return None if events and said and status.get("status") != "Ready" else f"status {status}"

        await until("the fourth domain waits, saying why", exhausted, timeout_s=30)
        assert _channel_of(rack, waiting) is None and _running(rack, waiting) == []
        released = _channel_of(rack, first)
        _delete(rack, first)
        assert await _formed(rack, waiting) == released
        rest = [p for p in plans if p is not first]
        await _proof(rack, rest)
        await _torn_down(rack, rest)


async def test_a_force_deleted_pods_channel_stays_fenced_on_its_node_and_is_reused_last(
    work_dir: Path,
) -> None:
    gone, kept, elsewhere, fenced = _plans([1, 1, 1, 1])
    # One multi-allocatable channel device per node: no device conflict stands in for the channel fence.
    settings = _settings(work_dir, 2, imex_channel_count=4, dra_consumable_capacity=True)
    async with Rack(settings) as rack:
        node, other = sorted(rack.topology.nodes)
        _create(rack, gone, node=node, linger_s=8)
        _create(rack, kept, node=other)
        channel = await _formed(rack, gone)
        await _formed(rack, kept)
        (container,) = [w.uid for w in _running(rack, gone)]
        process = rack.runtime.running[container].process
        _delete(rack, gone)
        # Force-deleted: its pod goes from the API at once; its container finishes its checkpoint.
        pods = rack.store.type_of("", "pods")
        for pod in list_pods(rack, gone.namespace):
            rack.store.delete(pods, gone.namespace, pod["metadata"]["name"], grace_period_s=0)
        await until("the channel released", lambda: None if _channel_of_gone(rack, gone) else "still held")
        assert process.returncode is None, "the container still runs"
        # Another channel is free: a new domain elsewhere does not get the one just released.
        _create(rack, elsewhere, node=other)
        assert await _formed(rack, elsewhere) != channel
        # Now it is the only one free: a domain on the node where it is still held must wait for the fence.
        _create(rack, fenced, node=node)
        await until("the channel assigned again", lambda: None if _channel_of(rack, fenced) else "not yet")
        assert _channel_of(rack, fenced) == channel
        assert process.returncode is None, "the old container still runs: the fence is what holds the new one"

        def old_container_gone() -> str | None:
            if process.returncode is None:
                assert _running(rack, fenced) == [], "a second domain ran on the channel still held here"
                return "the old container still runs"
            return None

        await until("the old container is gone", old_container_gone, timeout_s=40)
        assert await _formed(rack, fenced) == channel
        assert f"IMEX channel {channel} is still held on this node by claim {gone.namespace}/" in " ".join(
            _prepare_failures(rack.plugin_db(node))
        )
        await _proof(rack, [kept, elsewhere, fenced])
        await _torn_down(rack, [kept, elsewhere, fenced])


def _prepare_failures(db: Path) -> list[str]:
    """The reasons of every failed Prepare attempt in a plugin's log."""
    rows = log_rows(db, "SELECT json_extract(data, '$.reason') FROM events WHERE type = 'ClaimPrepareFailed'")
    return [str(reason) for (reason,) in rows]


def _channel_of_gone(rack: Rack, plan: DomainPlan) -> bool:
    """Whether the deleted domain's channel was released (its clique object gone)."""
    cliques, _ = rack.store.list_objects(rack.store.type_of(CD_GROUP, "computedomaincliques"), copies=False)
    return not any(plan.name in c["metadata"]["name"] for c in cliques) and not list_pods(
        rack, plan.namespace
    )


async def test_a_tenant_copying_another_namespaces_template_gets_neither_its_channel_nor_a_pod(
    work_dir: Path,
) -> None:
    """The attack: a tenant copies team-a's workload template (its domain's uid in the opaque config and the
    domain label) into its own namespace and runs a pod with it on a node where team-a's workers run."""
    (victim,) = _plans([1])
    thief = DomainPlan("cd-a", "team-evil", workers=1, gpus_per_pod=1)
    async with Rack(_settings(work_dir, 2, mode=HOST_MANAGED)) as rack:
        node = sorted(rack.topology.nodes)[0]
        _create(rack, victim, node=node)
        channel = await _formed(rack, victim)
        store = rack.store
        templates = store.type_of("resource.k8s.io", "resourceclaimtemplates")
        stolen = store.get(templates, victim.namespace, victim.template)
        with contextlib.suppress(AlreadyExists):
            store.create(store.type_of("", "namespaces"), "", {"metadata": {"name": thief.namespace}})
        store.create(
            templates,
            thief.namespace,
            {"metadata": {"name": thief.template, "labels": stolen["metadata"].get("labels") or {}},
             "spec": stolen["spec"]},
        )  # fmt: skip
        job = worker_job(thief.job_names[0], thief.namespace, 1, thief.template, 1, {HOSTNAME: node})
        store.create(store.type_of("batch", "jobs"), thief.namespace, job)
        refusal = "the ResourceClaim's namespace is different than the ComputeDomain's namespace"

        def refused() -> str | None:
            return None if any(refusal in r for r in _prepare_failures(rack.plugin_db(node))) else "not yet"

        await until("the plugin refuses the copied claim", refused)
        await asyncio.sleep(1.0)  # whatever else would happen has had its time
        assert _running(rack, thief) == [] and _running(rack, victim) != []
        assigned = [e for e in _log_channel_events(rack.controller_db) if e[0] == "ImexChannelAssigned"]
        assert assigned == [("ImexChannelAssigned", victim.name, channel)], "no channel for the copy"
        assert _channel_of(rack, victim) == channel
        store.delete(store.type_of("batch", "jobs"), thief.namespace, thief.job_names[0])
        store.delete(templates, thief.namespace, thief.template)
        await _torn_down(rack, [victim])
