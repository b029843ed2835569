"""What `cdctl explain` finds in the real plugin's log when the kubelet gives up on a Prepare and the old
call's retry comes after its Unprepare: the plugin fences the stale Prepare (cdctl.plugin.prepare), and
explain names the fence (cause `prepare-fenced`) for the claim and among the node's problems, citing
ClaimPrepareFenced."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdctl.api.refs import DomainInfo
from cdctl.domain.errors import RetriableError
from cdctl.plugin.checkpoint import ClaimBook
from cdctl.plugin.devices import parse_claim
from cdctl.plugin.prepare import DeviceState
from cdctl.plugin.preparesettings import FabricStatus, PrepareFenced
from cdctl.store.sqlite import SqliteEventStore
from tests.plugin.conftest import CLIQUE, node_settings
from tests.plugin.explained import explained, node_problems
from tests.plugin.fakes import DOM1, FakeCluster, FakeGates, channel_claim, daemon_pod


async def test_a_stale_prepare_fenced_by_the_plugin_is_what_explain_names(tmp_path: Path) -> None:
    db = tmp_path / "plugin.db"
    settings = node_settings(tmp_path)
    cluster = FakeCluster()
    cluster.domains[DOM1] = DomainInfo(DOM1, "cd", "default")
    cluster.add_pod(daemon_pod(DOM1))
    async with await SqliteEventStore.open(db) as store:
        state = DeviceState(
            settings, await ClaimBook.load(store, settings.node), cluster, FabricStatus(clique_id=CLIQUE),
            FakeGates(),
        )  # fmt: skip
        claim = parse_claim(channel_claim("c1", DOM1))
        fence = state.book.version("c1")  # the kubelet's call begins
        with pytest.raises(RetriableError):
            await state.prepare(claim, fence)  # its node is not ready in the domain yet
        assert await state.unprepare(claim.ref)  # the kubelet gives up on the pod and unprepares
        cluster.ready.add((DOM1, settings.node))
        with pytest.raises(PrepareFenced):
            await state.prepare(claim, fence)  # the old call's retry
        assert await state.prepare(claim, state.book.version("c1"))  # a new call is served
    for_claim = await explained(db, "claim/c1")
    fenced = [cause for cause in for_claim.chain if cause.code == "prepare-fenced"]
    assert fenced, for_claim.text()
    assert "unprepared after this prepare began; refusing a stale prepare" in fenced[0].text
    assert fenced[0].evidence is not None and fenced[0].evidence.type == "ClaimPrepareFenced"
    problems = await node_problems(db, settings.node)
    assert any(
        p.startswith("a stale Prepare was fenced: claim default/rc:c1 was unprepared") for p in problems
    )
