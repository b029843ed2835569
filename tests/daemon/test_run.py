"""`cdctl daemon run` processes against the simulated API server and the fake IMEX, the test as controller."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator

import pytest

from cdctl.domain.computedomains import DaemonEntry
from cdctl.domain.imex import hosts_mapping
from cdctl.sim.server import ApiServer
from tests.daemon.conftest import FakeImex, eventually
from tests.daemon.rig import CLIQUE, Rig, open_rig

UNUSED = "192.0.2.1"
SLOT0, SLOT1 = "compute-domain-daemon-0000", "compute-domain-daemon-0001"


@pytest.fixture
async def rig(fake_imex: FakeImex) -> AsyncIterator[Rig]:
    async with ApiServer() as server:
        rig = await open_rig(server, fake_imex)
        try:
            yield rig
        finally:
            await rig.close()


def _entry(daemon_node: str, ip: str, index: int) -> DaemonEntry:
    return DaemonEntry(daemon_node, ip, CLIQUE, index)


def _history(rig: Rig, daemon_name: str) -> list[str]:
    daemon = next(d for d in rig.daemons if d.name == daemon_name)
    done = daemon.cli("history", "--db", str(daemon.db), daemon.node, "--json")
    assert done.returncode == 0, done.stderr
    return [json.loads(line)["type"] for line in done.stdout.splitlines() if line.strip()]


async def test_without_the_cdi_edits_run_fails_with_one_clear_line(rig: Rig) -> None:
    daemon = rig.daemon("lost", "n1", "10.60.0.1", "", clique=CLIQUE)
    done = await asyncio.to_thread(daemon.cli, "daemon", "run")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "cdctl: error: CDI container edits did not apply -- is CDI enabled in your container runtime?"
    ]


async def test_an_empty_clique_id_labels_the_pod_and_idles_until_sigterm(rig: Rig) -> None:
    daemon = rig.daemon("loner", "n1", "10.60.0.1", "uid-x", clique="")
    await rig.start(daemon)
    await rig.wait_labelled(daemon)
    assert rig.label_of(daemon) == ""
    assert daemon.cli("daemon", "check").stdout.strip() == "check succeeded (noop, clique ID is empty)"
    assert await rig.stop(daemon) == 0
    assert not (daemon.imexd / "imexd.cfg").exists(), "no IMEX without a clique"
    assert _history(rig, "loner") == ["ImexDaemonStarted", "ImexDaemonStopped"]


async def test_two_domains_reusing_each_others_ips_never_dial_the_other_domain(rig: Rig) -> None:
    """Go issue 1447: a slot whose daemon left maps to an address that reaches no one, not to its old IP."""
    x, y, z, w = "10.60.0.1", "10.60.0.2", "10.60.0.3", "10.60.0.4"
    a0 = rig.daemon("a0", "n1", x, "uid-a")
    a1 = rig.daemon("a1", "n2", y, "uid-a")
    for daemon in (a0, a1):
        await rig.start(daemon)
    await rig.wait_labelled(a0, a1)
    assert rig.label_of(a0) == CLIQUE
    rig.write_clique("uid-a", [_entry("n1", x, 0), _entry("n2", y, 1)])
    await eventually(lambda: a0.ready() and a1.ready())  # the domain's daemons reach READY together

    assert await rig.stop(a1) == 0  # a1's node leaves domain A; the controller drops its entry
    rig.write_clique("uid-a", [_entry("n1", x, 0)])
    await eventually(lambda: hosts_mapping(a0.hosts.read_text()).get(SLOT1) == UNUSED)

    b0 = rig.daemon("b0", "n3", y, "uid-b")  # domain B's daemon is given a1's old address
    b1 = rig.daemon("b1", "n4", z, "uid-b")
    for daemon in (b0, b1):
        await rig.start(daemon)
    await rig.wait_labelled(b0, b1)
    rig.write_clique("uid-b", [_entry("n3", y, 0), _entry("n4", z, 1)])
    await eventually(lambda: b0.ready() and b1.ready())

    assert a0.peer_states() == {SLOT0: "UP", SLOT1: "DOWN"}, "A's empty slot does not reach B's daemon"
    assert not a0.ready()
    stale = a0.imexd / "hosts.stale"
    shutil.copy(a0.hosts, stale)
    stale.write_text(stale.read_text().replace(f"{UNUSED}\t{SLOT1}", f"{y}\t{SLOT1}"))
    assert a0.peer_states(stale)[SLOT1] == "UP", "a stale mapping would have dialled domain B's daemon"

    a2 = rig.daemon("a2", "n5", w, "uid-a")  # a new node joins A and takes the free slot
    await rig.start(a2)
    await rig.wait_labelled(a2)
    rig.write_clique("uid-a", [_entry("n1", x, 0), _entry("n5", w, 1)])
    await eventually(lambda: a0.ready() and a2.ready())
    assert b0.ready() and b1.ready()
    assert hosts_mapping(a0.hosts.read_text()) == {SLOT0: x, SLOT1: w}
    assert a0.hosts.read_text().startswith(f"127.0.0.1\tlocalhost\n{x}\ta0\n# Compute Domain")

    history = _history(rig, "a0")
    assert history.count("ImexStarted") == 1, "peer changes in DNS mode never restart IMEX"
    assert history.count("ImexPeersChanged") == 3
    assert "ImexReadinessChanged" in history
