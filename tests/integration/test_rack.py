"""The rack end to end, as `cdctl sim rack` runs it: real controller, plugin and daemon processes.

A 4-node rack forms one ComputeDomain for a 4-worker job and tears it down with nothing left, every claim
and template having passed the chart's claim admission policy (the controller's templates, the
resource-claim controller's claims for the workers and daemons); the same rack carries two domains on
disjoint halves; host-managed mode through the command line runs no daemons and prints a summary whose
commands work on the logs it names, and the formation timeline it drew from the logs it collected.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from cdctl.domain.computedomains import LABEL_COMPUTE_DOMAIN
from cdctl.plugin.cdi import claim_spec_path
from cdctl.sim.controllers.claimtemplates import RESOURCE_CLAIM_CONTROLLER
from cdctl.sim.controllers.daemonsets import pod_is_ready
from cdctl.sim.controllers.jobs import JOB_NAME_LABEL
from cdctl.sim.rack.checks import has_channel0, leftovers, list_pods
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.scenario import DomainPlan, Progress, run_scenario
from cdctl.sim.rack.settings import RackSettings
from tests.integration.support import run_cdctl

pytestmark = pytest.mark.integration
NODES = 4


def _lifecycle(db: Path) -> list[tuple[str, str, str | None, str | None]]:
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return connection.execute(
            "SELECT kind, state, prepared_at, unprepared_at FROM claim_lifecycle ORDER BY kind"
        ).fetchall()
    finally:
        connection.close()


async def test_one_domain_forms_on_the_rack_and_leaves_nothing_behind(work_dir: Path) -> None:
    seen: list[Progress] = []
    async with Rack(RackSettings(work_dir, nodes_per_rack=NODES, probe_period_s=1.0)) as rack:
        report = await run_scenario(rack, [DomainPlan("nvl", "team-a", workers=NODES)], observe=seen.append)
        assert report.problems == []
        assert report.ok and report.formation_s is not None and report.teardown_s is not None
        # Formation ends at the last worker's Running write, which the poll of the step saw at or after it.
        until_formed = [seconds for _, seconds in report.steps[:3]]
        assert [name for name, _ in report.steps][2] == "workers Running and Ready with channel0"
        assert until_formed[1] < report.formation_s <= sum(until_formed) + 0.01
        formed = [p for p in seen if p.phase == "workers Running and Ready with channel0"][-1]
        workers = formed.workers["nvl-job"]
        assert sorted(w.node for w in workers) == sorted(rack.topology.nodes), "one worker per node"
        assert all(w.channel0 for w in workers)
        assert max(n.daemons for n in formed.nodes) == 1
        assert [name for name, _ in report.steps][-1] == "delete ComputeDomains: nothing left"
        for node in rack.topology.nodes:
            kinds = [(kind, state) for kind, state, prepared, unprepared in _lifecycle(rack.plugin_db(node))]
            assert sorted(kinds) == [("channel", "Unprepared"), ("daemon", "Unprepared")]
        assert len(rack.daemon_dbs()) == NODES
        assert rack.controller_db.stat().st_size > 0
        # The claim policy judged and passed both ways a daemon config is written.
        policies = rack.store.policies
        controller = f"system:serviceaccount:{rack.settings.driver_namespace}:cdctl-controller"
        assert policies.denials == []
        assert policies.admitted[("claims-policy-cdctl", controller)] == 2  # workload and daemon templates
        assert policies.admitted[("claims-policy-cdctl", RESOURCE_CLAIM_CONTROLLER.username)] == 2 * NODES

        # The checks see what a broken teardown would leave.
        node = next(iter(rack.topology.nodes))
        stale = claim_spec_path(rack.cdi_root(node), "0000-stale")
        stale.write_text("{}")
        nodes = rack.store.type_of("", "nodes")
        labelled = rack.store.get(nodes, "", node)
        labelled["metadata"]["labels"][LABEL_COMPUTE_DOMAIN] = report.domain_uids["nvl"]
        rack.store.update(nodes, "", node, labelled)
        found = leftovers(rack, ["team-a"], ["nvl-job"])
        assert f"CDI spec {stale} still exists" in found
        assert f"node {node} still has label {LABEL_COMPUTE_DOMAIN}" in found


async def test_two_domains_on_disjoint_halves_of_a_rack(work_dir: Path) -> None:
    seen: list[Progress] = []
    half = NODES // 2
    plans = [DomainPlan("left", "team-a", workers=half), DomainPlan("right", "team-b", workers=half)]
    async with Rack(RackSettings(work_dir, nodes_per_rack=NODES, probe_period_s=1.0)) as rack:
        report = await run_scenario(rack, plans, observe=seen.append)
        assert report.problems == []
        assert report.ok
        assert set(report.formation_by_domain) == {"left", "right"}
        formed = [p for p in seen if p.phase == "workers Running and Ready with channel0"][-1]
        left = {w.node for w in formed.workers["left-job"]}
        right = {w.node for w in formed.workers["right-job"]}
        assert len(left) == len(right) == half and not left & right
        assert all(w.channel0 for states in formed.workers.values() for w in states)
        assert all(n.daemons == 1 for n in formed.nodes), "each node runs only its own domain's daemon"
        assert len(rack.daemon_dbs()) == NODES
        assert {domain for _, domain, _ in rack.runtime.daemon_logs()} == set(report.domain_uids.values())


def _daemon_logs(work_dir: Path) -> list[Path]:
    return list(work_dir.glob("*/plugins/*/domains/*/events.db"))


async def test_the_command_runs_host_managed_and_its_summary_points_at_real_logs(work_dir: Path) -> None:
    code, output = await run_cdctl(
        "sim", "rack", "--nodes", "2", "--mode", "host-managed", "--keep", str(work_dir)
    )
    assert code == 0, output
    text = " ".join(output.split())
    assert "formation:" in text and "every check held" in text
    assert not _daemon_logs(work_dir), "no IMEX daemon runs in host-managed mode"
    plugin_db = work_dir / "gb200-r00-n00" / "plugins" / "compute-domain.nvidia.com" / "events.db"
    for command in ("cdctl events --db", "cdctl sql --db", "claim_lifecycle", "cdctl replay --db", "--at"):
        assert command in text
    assert _lifecycle(plugin_db)[0][:2] == ("channel", "Unprepared")
    code, rows = await run_cdctl("sql", "--db", str(plugin_db), "SELECT kind, state FROM claim_lifecycle")
    assert code == 0 and "Unprepared" in rows
    # it collected every log and drew the formation timeline from them: a row per node
    page = work_dir / "timeline-nvl72.html"
    assert f"formation timeline: {page}" in text and f"collected: {work_dir / 'collected.db'}" in text
    assert page.read_text().count('class="row node-row"') == 2
    png = work_dir / "formation.png"
    code, said = await run_cdctl(
        "timeline", "--db", str(work_dir / "collected.db"), "computedomain/team-a/nvl72", "-o", str(png)
    )
    assert code == 0 and "formation: " in said and "slowest node: gb200-r00-n0" in said, said
    assert png.read_bytes()[:4] == b"\x89PNG"


def _assert_repairs_recorded(db: Path, claims: list[str]) -> None:
    """The node's log holds one ClaimPrepareRepaired per claim whose lost spec was written again, no more."""
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = connection.execute("SELECT stream FROM events WHERE type = 'ClaimPrepareRepaired'").fetchall()
    finally:
        connection.close()
    assert sorted(stream for (stream,) in rows) == sorted(f"claim/{claim}" for claim in claims)


def _restart_a_workers_kubelet(lose_spec: bool) -> Callable[[Rack], Awaitable[None]]:
    """Restart the kubelet of the first worker's node (deleting the worker's claim CDI spec while it is down
    if `lose_spec`); then it must prepare the worker's claim again and the worker's CDI devices must still
    resolve to channel0, with the pod Ready."""

    async def restart(rack: Rack) -> None:
        workers = [p for p in list_pods(rack, "team-a") if JOB_NAME_LABEL in p["metadata"].get("labels", {})]
        worker = workers[0]
        uid, node = worker["metadata"]["uid"], worker["spec"]["nodeName"]
        kubelet = rack.cluster.kubelets[node]
        claims = [ref.uid for refs in kubelet.claim_refs[uid].values() for ref in refs]
        specs = [claim_spec_path(rack.cdi_root(node), claim) for claim in claims]
        assert all(spec.exists() for spec in specs)
        calls = len(kubelet.prepare_calls)

        def lose() -> None:
            for spec in specs if lose_spec else []:
                spec.unlink()

        await rack.cluster.restart_kubelet(node, while_down=lose)
        async with asyncio.timeout(60):  # the restarted kubelet calls NodePrepareResources for them again
            while True:
                if any(set(claims) <= set(call[2]) for call in kubelet.prepare_calls[calls:]):
                    break
                await asyncio.sleep(0.1)
        deadline = asyncio.get_running_loop().time() + 10
        while asyncio.get_running_loop().time() < deadline:
            pods = rack.store.type_of("", "pods")
            ready = pod_is_ready(rack.store.get(pods, "team-a", worker["metadata"]["name"]))
            if ready and has_channel0(rack, node, kubelet.cdi_devices(uid)):
                _assert_repairs_recorded(rack.plugin_db(node), claims if lose_spec else [])
                return
            await asyncio.sleep(0.2)
        raise AssertionError(
            f"after its kubelet restarted, worker {worker['metadata']['name']} does not resolve channel0: "
            f"{kubelet.last_errors.get(uid, 'no error recorded')}"
        )

    return restart


async def test_a_restarted_kubelet_prepares_its_running_workers_again(work_dir: Path) -> None:
    async with Rack(RackSettings(work_dir, nodes_per_rack=2, probe_period_s=1.0)) as rack:
        plans = [DomainPlan("nvl", "team-a", workers=2)]
        report = await run_scenario(rack, plans, while_formed=_restart_a_workers_kubelet(lose_spec=False))
        assert report.problems == [] and report.ok


async def test_a_restarted_kubelet_finds_a_lost_cdi_spec_written_again(work_dir: Path) -> None:
    async with Rack(RackSettings(work_dir, nodes_per_rack=2, probe_period_s=1.0)) as rack:
        plans = [DomainPlan("nvl", "team-a", workers=2)]
        report = await run_scenario(rack, plans, while_formed=_restart_a_workers_kubelet(lose_spec=True))
        assert report.problems == [] and report.ok
