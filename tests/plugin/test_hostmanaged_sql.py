"""Every HostManagedIMEX refusal is an event in the plugin's log, so `cdctl sql` lists refused claims and why.

A host-managed device state on a real SQLite event log refuses claims (allocationMode All, an unknown mode,
a daemon claim, a node without a clique, a second channel claim on the node) and prepares one; the lifecycle
projections are brought up to date as the plugin does, and `cdctl sql` (click's runner over the real CLI)
lists each refused claim with its reason from `claim_lifecycle`, and whether it is permanent from `events`.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cdctl.api.refs import DomainInfo
from cdctl.cli.main import cli
from cdctl.domain.errors import CdctlError
from cdctl.domain.events import Actor
from cdctl.plugin.checkpoint import ClaimBook
from cdctl.plugin.devices import parse_claim
from cdctl.plugin.prepare import DeviceState
from cdctl.plugin.preparesettings import FabricStatus
from cdctl.projections.lifecycle import lifecycle_projections
from cdctl.projections.runner import ProjectionRunner
from cdctl.store import SqliteEventStore
from tests.plugin.conftest import CLIQUE, node_settings
from tests.plugin.fakes import DOM1, FakeCluster, channel_claim, daemon_claim


async def write_refusals(tmp_path: Path) -> Path:
    db = tmp_path / "events.db"
    store = await SqliteEventStore.open(db)
    try:
        cluster = FakeCluster()
        cluster.domains[DOM1] = DomainInfo(DOM1, "train-a", "default")
        fabric = FabricStatus(clique_id=CLIQUE)
        book = await ClaimBook.load(store, "node-a", Actor("kubelet-plugin", node="node-a"))
        state = DeviceState(node_settings(tmp_path, host_managed=True), book, cluster, fabric)
        refused = [
            channel_claim("u-all", DOM1, name="all", mode="All"),
            channel_claim("u-foo", DOM1, name="foo", mode="foo"),
            daemon_claim("u-daemon", DOM1, name="daemon", namespace="default"),
        ]
        for claim in refused:
            with pytest.raises(CdctlError):
                await state.prepare(parse_claim(claim), 0)
        fabric.clique_id = ""
        with pytest.raises(CdctlError):
            await state.prepare(parse_claim(channel_claim("u-noclique", DOM1, name="noclique")), 0)
        fabric.clique_id = CLIQUE
        assert await state.prepare(parse_claim(channel_claim("u-ok", DOM1, name="ok")), 0)
        with pytest.raises(CdctlError):
            await state.prepare(parse_claim(channel_claim("u-second", DOM1, name="second")), 0)
        runner = ProjectionRunner(store, lifecycle_projections())
        await runner.start()
        await runner.catch_up()
    finally:
        await store.close()
    return db


def sql(db: Path, statement: str) -> list[dict[str, object]]:
    result = CliRunner().invoke(cli, ["sql", "--db", str(db), "--json", statement])
    assert result.exit_code == 0, result.output + result.stderr
    rows: list[dict[str, object]] = json.loads(result.stdout)
    return rows


def test_cdctl_sql_lists_refused_claims_and_why(tmp_path: Path) -> None:
    db = asyncio.run(write_refusals(tmp_path))  # the CLI runs its own event loop: this test has none
    refused = sql(
        db,
        "SELECT name, kind, state, last_error FROM claim_lifecycle WHERE outcome = 'failed' ORDER BY name",
    )
    reasons = {row["name"]: str(row["last_error"]) for row in refused}
    assert sorted(reasons) == ["all", "daemon", "foo", "noclique", "second"]
    assert all(row["state"] == "PrepareFailed" for row in refused)
    assert "allocationMode All is not supported with HostManagedIMEX" in reasons["all"]
    assert "allocationMode foo is not supported with HostManagedIMEX" in reasons["foo"]
    assert "daemon claims are disabled under HostManagedIMEX" in reasons["daemon"]
    assert "requires an NVLink clique on this node; NVML reports none" in reasons["noclique"]
    assert "already allocated to different claim u-ok" in reasons["second"]
    prepared = sql(db, "SELECT name FROM claim_lifecycle WHERE outcome = 'prepared'")
    assert prepared == [{"name": "ok"}]
    permanence = sql(
        db,
        "SELECT json_extract(data, '$.claim_uid') AS claim, json_extract(data, '$.retriable') AS retriable"
        " FROM events WHERE type = 'ClaimPrepareFailed' ORDER BY claim",
    )
    assert {row["claim"]: row["retriable"] for row in permanence} == {
        "u-all": 0,
        "u-daemon": 0,
        "u-foo": 0,
        "u-noclique": 0,
        "u-second": 1,  # the checkpoint conflict stays retriable (the first claim may be unprepared)
    }
