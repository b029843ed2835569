"""A repeated Prepare of a completed claim (the kubelet restarted) repairs what the first one wrote."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from cdctl.api.refs import DomainInfo
from cdctl.cli.main import cli
from cdctl.domain import claims as c
from cdctl.plugin import cdi
from cdctl.plugin.checkpoint import ClaimBook
from cdctl.plugin.devices import parse_claim
from cdctl.plugin.prepare import DeviceState
from cdctl.plugin.preparesettings import FabricStatus
from cdctl.projections.lifecycle import lifecycle_projections
from cdctl.projections.runner import ProjectionRunner
from cdctl.store import SqliteEventStore
from tests.plugin.conftest import CLIQUE, Node, node_settings
from tests.plugin.fakes import C1, DOM1, FakeCluster, FakeGates, channel_claim, daemon_claim

D1 = "a0000000-0000-4000-8000-0000000000d1"


async def types(node: Node, uid: str) -> list[str]:
    return [e.type for e in await node.store.read_stream(f"claim/{uid}")]


async def test_a_missing_cdi_spec_is_rewritten_before_the_answer(node: Node) -> None:
    node.cluster.ready.add((DOM1, "node-a"))
    claim = parse_claim(channel_claim("c1", DOM1))
    first = await node.state.prepare(claim, 0)
    path = cdi.claim_spec_path(node.settings.cdi_root, "c1")
    written = cdi.read_spec(path)
    path.unlink()  # the CDI root was wiped while the kubelet restarted
    state = await node.restart()
    assert await state.prepare(claim, state.book.version("c1")) == first
    assert cdi.read_spec(path) == written
    assert (await types(node, "c1"))[-1] == "ClaimPrepareRepaired"
    [event] = [e for e in await node.store.read_stream("claim/c1") if e.type == "ClaimPrepareRepaired"]
    assert event.data["repaired"] == ["cdi-spec"] and event.data["reason"] == "CDI spec missing"
    rec = state.book.get("c1")
    assert rec is not None and rec.state is c.ClaimState.PREPARE_COMPLETED
    # nothing missing: the answer comes from the log and nothing is recorded
    assert await state.prepare(claim, state.book.version("c1")) == first
    assert (await types(node, "c1")).count("ClaimPrepareRepaired") == 1


async def test_a_changed_cdi_spec_is_rewritten(node: Node) -> None:
    node.cluster.ready.add((DOM1, "node-a"))
    claim = parse_claim(channel_claim("c1", DOM1))
    await node.state.prepare(claim, 0)
    path = cdi.claim_spec_path(node.settings.cdi_root, "c1")
    written = cdi.read_spec(path)
    path.write_text("---\nnot: a spec\n")
    await node.state.prepare(claim, node.state.book.version("c1"))
    assert cdi.read_spec(path) == written
    [event] = [e for e in await node.store.read_stream("claim/c1") if e.type == "ClaimPrepareRepaired"]
    assert event.data["reason"] == "CDI spec changed"


async def test_a_daemon_claims_missing_domain_directory_is_rewritten(node: Node) -> None:
    claim = parse_claim(daemon_claim(D1, DOM1))
    first = await node.state.prepare(claim, 0)
    root = node.settings.plugin_dir / "domains" / DOM1
    template = (root / "imexd.cfg.tmpl").read_text()
    shutil.rmtree(root)
    cdi.claim_spec_path(node.settings.cdi_root, D1).unlink()
    assert await node.state.prepare(claim, node.state.book.version(D1)) == first
    assert (root / "imexd.cfg.tmpl").read_text() == template
    assert cdi.claim_spec_path(node.settings.cdi_root, D1).exists()
    [event] = [e for e in await node.store.read_stream(f"claim/{D1}") if e.type == "ClaimPrepareRepaired"]
    assert event.data["repaired"] == ["cdi-spec", "domain-dir"]
    assert event.data["domain_dir"] == str(root)
    assert node.cluster.pod_reads == 1  # the repair does not ask for authorization again


async def _repair_on_a_sqlite_log(db: Path, tmp_path: Path) -> None:
    """A claim prepared, its CDI spec lost and prepared again, on the plugin's own log (SQLite, read models
    kept by the runner as in the plugin process)."""
    store = await SqliteEventStore.open(db)
    try:
        runner = ProjectionRunner(store, lifecycle_projections())
        await runner.start()
        cluster = FakeCluster()
        cluster.domains[DOM1] = DomainInfo(DOM1, "cd", "default")
        cluster.ready.add((DOM1, "node-a"))
        settings = node_settings(tmp_path)
        state = DeviceState(
            settings, await ClaimBook.load(store, "node-a"), cluster, FabricStatus(CLIQUE), FakeGates()
        )
        claim = parse_claim(channel_claim(C1, DOM1))
        await state.prepare(claim, 0)
        cdi.claim_spec_path(settings.cdi_root, C1).unlink()
        await state.prepare(claim, state.book.version(C1))
        await runner.catch_up()
    finally:
        await store.close()


def test_a_repair_shows_in_the_claims_history_and_its_checkpoint_transitions(tmp_path: Path) -> None:
    db = tmp_path / "events.db"
    asyncio.run(_repair_on_a_sqlite_log(db, tmp_path))  # the commands below run their own event loop
    history = CliRunner().invoke(cli, ["history", "--db", str(db), C1, "--json"])
    assert history.exit_code == 0
    types = [event["type"] for event in json.loads(history.stdout)]
    assert types[-2:] == ["ClaimPrepareCompleted", "ClaimPrepareRepaired"]
    query = f"SELECT from_state, to_state, reason FROM checkpoint_transitions WHERE claim_uid = '{C1}'"
    sql = CliRunner().invoke(cli, ["sql", "--db", str(db), "--json", query])
    assert json.loads(sql.stdout)[-1] == {
        "from_state": "PrepareCompleted", "to_state": "PrepareCompleted",
        "reason": "repaired cdi-spec: CDI spec missing",
    }  # fmt: skip
    verify = CliRunner().invoke(cli, ["verify", "--db", str(db)])
    assert verify.exit_code == 0 and verify.stdout.startswith("ok:")
