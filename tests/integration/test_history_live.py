"""A post-mortem from one collected file, after a rough life on the full simulated rack (18 nodes).

Two controller replicas; mid-formation the leader is killed (`kill -9`), its log compacted while its pod is
gone (the domain live at the horizon: compaction as its retention loop runs it, on the real file, with the
projections the controller resumes from), and its StatefulSet pod comes back on that log as a standby while
the other replica takes the Lease. Once formed, the kubelet plugin of worker 0's node is killed and started
again, and the plugin of worker 1's node is killed, its log compacted past worker 1's prepared claim, and
started again. After the teardown, one `cdctl collect` through the pod proxy gathers both controller replicas,
all 18 plugins and the 18 IMEX daemon logs the plugins kept; from that file alone `cdctl history` tells the
domain's life in time order (both replicas' observations, the leader's actions and teardown, every node's
claim, every daemon's IMEX) and worker 0's claim's (prepared before its plugin's restart, unprepared by the
restarted plugin), `cdctl verify` passes for every source, compacted ones included, and worker 1's claim,
whose prepare only the compacted plugin's horizon snapshot remembers, is in the file's claim_lifecycle.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cdctl.cli.main import cli
from cdctl.controller.view import DomainProjection
from cdctl.plugin.checkpoint import ClaimBookProjection
from cdctl.projections.lifecycle import DomainHistory, lifecycle_projections
from cdctl.projections.runner import ProjectionRunner
from cdctl.sim.rack.checks import list_pods, worker_states
from cdctl.sim.rack.faults import kill_controller, kill_plugin
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.scenario import DomainPlan, run_scenario
from cdctl.sim.rack.settings import RackSettings
from cdctl.store import SqliteEventStore
from cdctl.store.collected import CollectedFile
from tests.integration.support import at_mid_formation, beyond_faults, leader, until
from tests.store.compacting import compact_through

pytestmark = pytest.mark.integration
NODES = 18
NAMESPACE, DOMAIN = "team-a", "nvl"
JOB = f"{DOMAIN}-job"


async def cdctl(*argv: str) -> tuple[int, str, str]:
    """A cdctl command as the operator runs it, in a thread (its own event loop) beside the rack's: its exit
    code, stdout and stderr."""
    result = await asyncio.to_thread(CliRunner().invoke, cli, list(argv))
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.stdout, result.stderr


async def compacted(path: Path, upto: int | None, projections: list[Any], folded: list[Any]) -> int:
    """Compact the (stopped) component's log through `upto` (default: all but its last commit), as its
    retention loop does: with the projections it resumes from, once its read models (`folded`) are current
    (compaction never removes what they have not folded). Returns the horizon."""
    async with await SqliteEventStore.open(path) as store:
        runner = ProjectionRunner(store, folded)
        await runner.start()
        await runner.catch_up()
        report = await compact_through(store, upto if upto is not None else store.head() - 1, projections)
        assert report is not None, f"{path}: nothing compacted"
        horizon = await store.horizon()
        assert horizon is not None
        return horizon.position


def worker_claim(rack: Rack, index: int) -> tuple[str, str, str]:
    """Worker `index`'s node, and its channel claim's name and uid."""
    pods = {p["metadata"]["name"]: p for p in list_pods(rack, NAMESPACE)}
    pod = pods[f"{JOB}-{index}"]
    [status] = pod["status"]["resourceClaimStatuses"]
    claim = rack.store.get(
        rack.store.type_of("resource.k8s.io", "resourceclaims"), NAMESPACE, status["resourceClaimName"]
    )
    return pod["spec"]["nodeName"], claim["metadata"]["name"], claim["metadata"]["uid"]


async def history(out: Path, subject: str) -> list[dict[str, Any]]:
    code, stdout, stderr = await cdctl("history", "--db", str(out), subject, "-o", "json")
    assert code == 0, stderr
    events: list[dict[str, Any]] = json.loads(stdout)
    return events


def types_by_source(story: list[dict[str, Any]]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for event in story:
        found.setdefault(event["source"], set()).add(event["type"])
    return found


async def test_one_collected_file_tells_the_whole_life_of_a_domain_and_a_claim(work_dir: Path) -> None:
    settings = RackSettings(work_dir, nodes_per_rack=NODES, probe_period_s=0.5, controller_replicas=2)
    facts: dict[str, Any] = {}

    async def while_forming(rack: Rack) -> None:
        await at_mid_formation(rack, lambda: any(w.done for w in worker_states(rack, NAMESPACE, JOB)))
        holder = leader(rack)
        replica = next(r for r in rack.controllers if holder.startswith(rack.controller_pod(r) + "-"))
        await kill_controller(rack, replica)  # kill -9 of the leader
        generation = rack.controller_generations.get(replica, 0)
        facts["controller horizon"] = await compacted(
            rack.controller_db_for(replica, generation), None, [DomainHistory(), DomainProjection()],
            [DomainHistory()],
        )  # fmt: skip
        facts["killed leader"] = rack.controller_pod(replica)
        await rack.launch_controller(replica, generation, new_pod=True)  # its StatefulSet's pod, same log
        await until(
            "another replica takes the Lease", lambda: None if leader(rack) not in ("", holder) else "no"
        )

    async def while_formed(rack: Rack) -> None:
        facts["claim"] = node, _, _ = worker_claim(rack, 0)
        await kill_plugin(rack, node)
        await asyncio.wait_for(rack.plugins[node].process.wait(), 60)
        facts["restarted at"] = datetime.now(UTC).isoformat()
        await rack.launch_plugin(node)
        facts["compacted claim"] = other, _, other_uid = worker_claim(rack, 1)
        await kill_plugin(rack, other)
        await asyncio.wait_for(rack.plugins[other].process.wait(), 60)
        async with await SqliteEventStore.open(rack.plugin_db(other), read_only=True) as store:
            [(facts["claim began"],)] = await store.query(
                "SELECT MIN(position) FROM events WHERE stream = ?", (f"claim/{other_uid}",)
            )
        facts["plugin horizon"] = await compacted(
            rack.plugin_db(other), None, [*lifecycle_projections(), ClaimBookProjection(other)],
            lifecycle_projections(),
        )  # fmt: skip
        await rack.launch_plugin(other)
        await rack.wait_until_registered({node, other})

    async with Rack(settings) as rack:
        fault = asyncio.create_task(while_forming(rack))
        report = await run_scenario(
            rack, [DomainPlan(DOMAIN, NAMESPACE, workers=NODES)], while_formed=while_formed, timeout_s=120
        )
        await fault
        restarted = {facts["claim"][0], facts["compacted claim"][0]}
        assert beyond_faults(report.problems, restarted) == [], report.problems
        assert report.formation_s is not None and report.teardown_s is not None
        out = work_dir / "incident.db"
        code, output, errors = await cdctl(
            "collect", "-o", str(out), "-n", rack.settings.driver_namespace, "--kubeconfig",
            str(rack.kubeconfig), "--json",
        )  # fmt: skip
        domain_uid = report.domain_uids[DOMAIN]
        plugin_db = rack.plugin_db(facts["compacted claim"][0])
    assert code == 0, errors

    # One file: both controller replicas, all 18 plugins, the 18 daemon logs they kept.
    summary = json.loads(output)
    nodes = [f"gb200-r00-n{index:02d}" for index in range(NODES)]
    expected = {"controller/cdctl-controller-0", "controller/cdctl-controller-1"}
    expected |= {f"kubelet-plugin/{n}" for n in nodes} | {f"daemon/{n}/{domain_uid}" for n in nodes}
    assert {s["name"]: s["status"] for s in summary["sources"]} == dict.fromkeys(expected, "ok")

    # The domain's whole life, in time order, from every source.
    story = await history(out, f"computedomain/{NAMESPACE}/{DOMAIN}")
    assert [e["recorded_at"] for e in story] == sorted(e["recorded_at"] for e in story)
    seen = types_by_source(story)
    for replica in ("controller/cdctl-controller-0", "controller/cdctl-controller-1"):
        assert "ComputeDomainObserved" in seen[replica], replica  # a standby follows the cluster too
    controllers = seen["controller/cdctl-controller-0"] | seen["controller/cdctl-controller-1"]
    assert {"DomainActionSucceeded", "ComputeDomainStatusChanged", "ComputeDomainTornDown"} <= controllers
    compacted_node = facts["compacted claim"][0]
    for n in nodes:
        milestones = (
            {"ClaimUnprepared"} if n == compacted_node else {"ChannelAllocated", "ClaimPrepareCompleted"}
        )
        assert milestones <= seen[f"kubelet-plugin/{n}"], n
        assert {"ImexStarted", "ImexDaemonStopped"} <= seen[f"daemon/{n}/{domain_uid}"], n
    killed = f"controller/{facts['killed leader']}"
    assert min(e["position"] for e in story if e["source"] == killed) > facts["controller horizon"]
    with CollectedFile.open(out, read_only=True) as file:
        [source] = [s for s in file.sources() if s.name == killed]
        [horizon] = file.horizons(source.id)  # served with its log, the domain live in it
    assert horizon.position == facts["controller horizon"]
    assert domain_uid in horizon.snapshots[DomainProjection().name]

    # Worker 0's claim: prepared, its plugin restarted, unprepared by the restarted plugin.
    node, claim_name, _ = facts["claim"]
    claim_story = await history(out, f"resourceclaim/{NAMESPACE}/{claim_name}")
    assert {e["source"] for e in claim_story} == {f"kubelet-plugin/{node}"}
    types = [e["type"] for e in claim_story]
    for milestone in ("ClaimPrepareStarted", "ChannelAllocated", "ClaimPrepareCompleted", "ClaimUnprepared"):
        assert milestone in types, (milestone, types)
    assert types.index("ClaimPrepareCompleted") < types.index("ClaimUnprepared")
    prepared = max(e["recorded_at"] for e in claim_story if e["type"] == "ClaimPrepareCompleted")
    unprepared = [e["recorded_at"] for e in claim_story if e["type"] == "ClaimUnprepared"]
    assert prepared < facts["restarted at"] < min(unprepared)

    # Every source verifies, the compacted controller and plugin included.
    code, verified, errors = await cdctl("verify", "--db", str(out))
    assert code == 0, verified + errors
    assert all(name in verified for name in expected)

    # Worker 1's claim began before its plugin's horizon, so the file holds none of its first events: its
    # row comes from the horizon snapshot its plugin served, and equals the plugin's own.
    other, _, other_uid = facts["compacted claim"]
    assert facts["claim began"] <= facts["plugin horizon"]
    with CollectedFile.open(out, read_only=True) as file:
        source = f"kubelet-plugin/{other}"
        [(first_held,)] = file.query("SELECT MIN(position) FROM events WHERE source = ?", (source,))
        [row] = file.query(
            "SELECT * FROM claim_lifecycle WHERE source = ? AND claim_uid = ?", (source, other_uid)
        )
    assert first_held > facts["plugin horizon"]
    own = sqlite3.connect(f"file:{plugin_db}?mode=ro", uri=True)
    try:
        [own_row] = own.execute("SELECT * FROM claim_lifecycle WHERE claim_uid = ?", (other_uid,)).fetchall()
    finally:
        own.close()
    assert row[1:] == own_row and "Unprepared" in own_row
