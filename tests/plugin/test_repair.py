"""A repeated Prepare of a completed claim (the kubelet restarted) repairs what the first one wrote."""

from __future__ import annotations

import shutil

from cdctl.domain import claims as c
from cdctl.plugin import cdi
from cdctl.plugin.devices import parse_claim
from tests.plugin.conftest import Node
from tests.plugin.fakes import DOM1, channel_claim, daemon_claim

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
