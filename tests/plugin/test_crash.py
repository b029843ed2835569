"""Kill the plugin at each prepare step, restart it, repeat the Prepare: one completed claim, one CDI file,
no leaked channel."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cdctl.api.refs import DomainInfo
from cdctl.domain import claims as c
from cdctl.plugin import cdi
from cdctl.plugin.checkpoint import ClaimBook
from cdctl.plugin.devices import ClaimRef, parse_claim
from cdctl.plugin.prepare import DeviceState
from cdctl.plugin.preparesettings import FabricStatus
from cdctl.store import SqliteEventStore
from tests.plugin.conftest import CLIQUE, node_settings
from tests.plugin.crashchild import KILLED
from tests.plugin.fakes import C1, DOM1, FakeCluster, FakeGates, channel_claim

ROOT = Path(__file__).resolve().parents[2]


def run_child(base: Path, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "tests.plugin.crashchild", str(base)] + ([crash_at] if crash_at else [])
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(
    "crash_at", ["ClaimPrepareStarted", "ChannelAllocated", "label", "cdi-file", "ClaimPrepareCompleted"]
)
async def test_crash_at_each_step_then_repeat(tmp_path: Path, crash_at: str) -> None:
    crashed = run_child(tmp_path, crash_at)
    assert crashed.returncode == KILLED, crashed.stderr
    again = run_child(tmp_path)
    assert again.returncode == 0, again.stderr
    answer = json.loads(again.stdout.strip().splitlines()[-1])
    assert answer["error"] == ""
    assert answer["devices"][0]["cdi_device_ids"] == [f"k8s.compute-domain.nvidia.com/claim={C1}-channel-0"]

    settings = node_settings(tmp_path)
    specs = sorted(p.name for p in settings.cdi_root.iterdir())
    assert specs == [f"k8s.compute-domain.nvidia.com-claim_{C1}.yaml"]  # one file, no temp left behind
    store = await SqliteEventStore.open(tmp_path / "events.db")
    try:
        book = await ClaimBook.load(store, settings.node)
        rec = book.get(C1)
        assert rec is not None and rec.completed and rec.channels == (0,)
        assert [r.claim_uid for r in book.active()] == [C1]
        types = [e.type for e in await store.read_stream(f"claim/{C1}")]
        assert types.count("ClaimPrepareCompleted") == 1
        # no leaked channel: once c1 is unprepared, another claim gets channel 0
        cluster = FakeCluster()
        cluster.domains[DOM1] = DomainInfo(DOM1, "cd", "default")
        cluster.ready.add((DOM1, settings.node))
        state = DeviceState(settings, book, cluster, FabricStatus(clique_id=CLIQUE), FakeGates())
        assert await state.unprepare(ClaimRef(C1, "default", "rc"))
        assert book.get(C1).channels == ()  # type: ignore[union-attr]
        assert await state.prepare(parse_claim(channel_claim("c2", DOM1, name="rc2")), 0)
        assert book.get("c2").state is c.ClaimState.PREPARE_COMPLETED  # type: ignore[union-attr]
        assert sorted(p.name for p in settings.cdi_root.iterdir()) == [cdi.claim_spec_path("", "c2").name]
    finally:
        await store.close()
