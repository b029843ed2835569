"""`cdctl collect` on the simulated rack, as an operator whose only grant is the chart's collector Role.

A 4-node rack under the chart's RBAC forms a domain; while it is formed the operator collects every log
(controller, plugins, live IMEX daemons) through the API server's pod proxy, and every source verifies;
after the teardown a second collection fetches only what is new; with a plugin stopped, a third reports it
skipped and exits 4, and records it in the file. The collected file answers across nodes: the claim
lifecycle of every node, a domain's story from controller, plugins and daemons, kubectl-style names.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cdctl.cli.main import cli
from cdctl.sim.apiserver.identity import user_token
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.scenario import DomainPlan, run_scenario
from cdctl.sim.rack.settings import RackSettings
from cdctl.store.collected import CollectedFile
from tests.chart.conftest import chart_rbac

pytestmark = pytest.mark.integration
NODES = 4
OPERATOR = "alice"


async def _run(*argv: str) -> tuple[int, str]:
    """A cdctl command as the operator runs it, in a thread (its own event loop) beside the rack's."""
    result = await asyncio.to_thread(CliRunner().invoke, cli, list(argv))
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


async def _json(*argv: str) -> tuple[int, Any]:
    """A reading command's `-o json` document (stdout only: stderr says what SUBJECT resolved to)."""
    result = await asyncio.to_thread(CliRunner().invoke, cli, [*argv, "-o", "json"])
    assert result.exit_code == 0, result.output
    return result.exit_code, json.loads(result.stdout)


@pytest.fixture
def work_dir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="cdcollect-", dir="/tmp"))  # short: unix socket paths
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


async def collect(rack: Rack, kubeconfig: Path, out: Path, *more: str) -> tuple[int, dict[str, object], str]:
    code, output = await _run(
        "collect", "-o", str(out), "-n", rack.settings.driver_namespace, "--kubeconfig", str(kubeconfig),
        "--json", *more,
    )  # fmt: skip
    summary = next((json.loads(line) for line in output.splitlines() if line.startswith("{")), {})
    return code, summary, output


async def test_an_operator_with_only_the_collector_role_collects_the_rack(work_dir: Path) -> None:
    settings = RackSettings(work_dir, nodes_per_rack=NODES, probe_period_s=1.0)
    rack = Rack(settings)
    subjects = [{"kind": "User", "name": OPERATOR}]
    rack.cluster.apiserver.rbac.load(
        chart_rbac(settings.driver_namespace, {"collector": {"subjects": subjects}})
    )
    out = work_dir / "collected.db"
    formed: list[tuple[int, dict[str, object], str]] = []
    async with rack:
        operator = rack.cluster.apiserver.write_kubeconfig(work_dir / "operator", user_token(OPERATOR))

        async def while_formed(rack: Rack) -> None:
            formed.append(await collect(rack, operator, out))

        report = await run_scenario(
            rack, [DomainPlan("nvl", "team-a", workers=NODES)], while_formed=while_formed
        )
        assert report.ok, report.problems
        [(code, first, output)] = formed
        assert code == 0, output
        sources = {s["name"]: s for s in first["sources"]}  # type: ignore[union-attr]
        domain = report.domain_uids["nvl"]
        plugins = [f"kubelet-plugin/{node}" for node in rack.topology.nodes]
        daemons = [f"daemon/{node}/{domain}" for node in rack.topology.nodes]
        assert set(sources) == {"controller/cdctl-controller-0", *plugins, *daemons}
        assert all(s["status"] == "ok" and s["events"] > 0 for s in sources.values())

        code, second, output = await collect(rack, operator, out, "--progress")  # the bar, though not a TTY
        assert code == 0, output
        with CollectedFile.open(out, read_only=True) as file:
            fetched = file.query(
                "SELECT s.name, f.after_position, f.events, f.head_position FROM fetches f"
                " JOIN sources s ON s.id = f.source_id WHERE f.collection_id = 2"
            )
            events_after_first = {name: after for name, after, _, _ in fetched}
            held = dict(
                file.query(
                    "SELECT s.name, COUNT(*) FROM source_events e JOIN sources s ON s.id = e.source_id"
                    " GROUP BY s.name"
                )
            )
        for name, after, new, head in fetched:
            assert after + new == head == held[name], (name, after, new, head)  # only what was new, all of it
        assert sum(new for _, _, new, _ in fetched) == second["events"] > 0
        assert events_after_first.keys() == sources.keys()

        plugin = next(iter(rack.topology.nodes))
        await rack.plugins[plugin].stop()
        code, third, output = await collect(rack, operator, out)
        assert code == 4, output
        [skipped] = [s for s in third["sources"] if s["status"] != "ok"]  # type: ignore[union-attr]
        assert (
            skipped["pod"] == f"cdctl-kubelet-plugin-{plugin}"
            and "error trying to reach service" in skipped["error"]
        )
        assert f"cdctl-kubelet-plugin-{plugin}" in output and "skipped" in output
        code, _, output = await collect(rack, operator, out, "--allow-partial")
        assert code == 0, output

    code, output = await _run("verify", "--db", str(out))
    assert code == 0 and f"ok: {2 * NODES + 1} sources" in output, output
    with CollectedFile.open(out, read_only=True) as file:
        assert file.query("SELECT outcome FROM collections ORDER BY id") == [
            ("complete",),
            ("complete",),
            ("partial",),
            ("partial",),
        ]
        assert file.query("SELECT COUNT(*) FROM fetches WHERE status = 'skipped' AND error <> ''") == [(2,)]
    query = "SELECT node, kind, state FROM claim_lifecycle ORDER BY node, kind"
    code, rows = await _json("sql", "--db", str(out), query)
    assert code == 0 and rows == [
        {"node": node, "kind": kind, "state": "Unprepared"}
        for node in rack.topology.nodes
        for kind in ("channel", "daemon")
    ]
    code, story = await _json("history", "--db", str(out), "computedomain/team-a/nvl")
    assert {e["source"] for e in story} == {"controller/cdctl-controller-0", *plugins, *daemons}
    assert [e["recorded_at"] for e in story] == sorted(e["recorded_at"] for e in story)
    worker = next(
        e["data"] for e in story if e["type"] == "ClaimPrepareStarted" and e["data"]["kind"] == "channel"
    )
    code, story = await _json("history", "--db", str(out), f"resourceclaim/team-a/{worker['name']}")
    assert {e["source"] for e in story} == {f"kubelet-plugin/{worker['node']}"}
    code, story = await _json("history", "--db", str(out), f"node/{worker['node']}")
    assert {e["source"] for e in story} >= {
        f"kubelet-plugin/{worker['node']}",
        f"daemon/{worker['node']}/{domain}",
        "controller/cdctl-controller-0",
    }
