"""Peer changes in both modes: hosts file and SIGUSR1 (DNS names), node list and restart (IP), recorded."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cdctl.api.gates import parse_feature_gates
from cdctl.daemon.files import write_config, write_node_list
from cdctl.daemon.journal import Journal
from cdctl.daemon.peers import PeerUpdater
from cdctl.daemon.settings import DaemonSettings
from cdctl.daemon.supervisor import ImexSupervisor
from cdctl.domain.computedomains import DaemonEntry
from cdctl.domain.events import decode
from cdctl.domain.imex import HOSTS_HEADER, ImexPeersChanged, PeerListing, dns_node_list, hosts_mapping
from cdctl.sim.node.fakeimex import HOSTS_ENV, Registry
from tests.daemon.conftest import FakeImex, eventually

CLIQUE = "6a130f54-faaa-4b8f-847f-be44ab70f917.32766"
ME, PEER = "10.40.0.1", "10.40.0.2"
UNUSED = "192.0.2.1"


def _settings(imexd: Path, gates: str = "") -> DaemonSettings:
    return DaemonSettings(
        clique_id=CLIQUE,
        domain_uid="uid-1",
        domain_name="cd",
        domain_namespace="default",
        node_name="n1",
        pod_ip=ME,
        pod_uid="pod-uid",
        pod_name="daemon-n1",
        pod_namespace="nvidia-dra",
        max_nodes=4,
        gates=parse_feature_gates(gates),
        imexd_dir=imexd,
        hosts_file=imexd / "hosts",
        unused_address=UNUSED,
    )


def _listing(*entries: tuple[str, str, int], expected: int = 0) -> PeerListing:
    return PeerListing(tuple(DaemonEntry(node, ip, CLIQUE, index) for node, ip, index in entries), expected)


class Harness:
    def __init__(self, settings: DaemonSettings, journal: Journal) -> None:
        self.settings = settings
        self.journal = journal
        self.supervisor = ImexSupervisor(
            ["nvidia-imex", "-c", str(settings.config_path)], "n1", journal.record
        )
        self.updater = PeerUpdater(settings, self.supervisor, journal)

    async def changes(self) -> list[ImexPeersChanged]:
        events = [decode(e) for e in await self.journal.store.read_stream(self.journal.stream)]
        return [e for e in events if isinstance(e, ImexPeersChanged)]

    @property
    def pid(self) -> int | None:
        return self.supervisor.process.pid if self.supervisor.running and self.supervisor.process else None


async def _harness(imexd: Path, gates: str) -> AsyncIterator[Harness]:
    settings = _settings(imexd, gates)
    values = {"IMEXCmdBindInterfaceIP": ME, "IMEXDaemonNodesConfigPath": str(settings.nodes_path)}
    write_config(settings.template_path, settings.config_path, values)
    if settings.dns_names:  # as the daemon does at start (IP mode: the updater writes the peers' IPs)
        write_node_list(settings.nodes_path, dns_node_list(settings.max_nodes))
    (imexd / "hosts").write_text("127.0.0.1\tlocalhost\n")
    journal = await Journal.open(imexd / "events.db", "n1", "daemon-n1")
    harness = Harness(settings, journal)
    try:
        yield harness
    finally:
        await harness.supervisor.stop()
        await journal.close()


@pytest.fixture
async def dns(use_fake_imex: FakeImex, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Harness]:
    imexd = use_fake_imex.imexd("dns")
    monkeypatch.setenv(HOSTS_ENV, str(imexd / "hosts"))  # the pod's hosts file, where IMEX resolves names
    async for harness in _harness(imexd, ""):
        yield harness


@pytest.fixture
async def ip_mode(use_fake_imex: FakeImex) -> AsyncIterator[Harness]:
    gates = "IMEXDaemonsWithDNSNames=false,ComputeDomainCliques=false"
    async for harness in _harness(use_fake_imex.imexd("ip"), gates):
        yield harness


async def test_dns_mode_starts_once_listed_then_signals_on_changes(dns: Harness) -> None:
    hosts = dns.settings.hosts_file
    await dns.updater.apply(_listing(("n2", PEER, 1)))
    assert dns.pid is None and HOSTS_HEADER not in hosts.read_text(), "not listed yet: nothing happens"

    await dns.updater.apply(_listing(("n1", ME, 0), ("n2", PEER, 1)))
    first_pid = dns.pid
    assert first_pid is not None
    assert hosts_mapping(hosts.read_text()) == {
        "compute-domain-daemon-0000": ME,
        "compute-domain-daemon-0001": PEER,
        "compute-domain-daemon-0002": UNUSED,
        "compute-domain-daemon-0003": UNUSED,
    }
    assert hosts.read_text().startswith("127.0.0.1\tlocalhost\n")

    await dns.updater.apply(_listing(("n1", ME, 0), ("n2", PEER, 1)))
    assert len(await dns.changes()) == 1, "an unchanged clique changes nothing"

    await dns.updater.apply(_listing(("n1", ME, 0), ("n3", "10.40.0.3", 2)))
    assert dns.pid == first_pid, "DNS mode never restarts IMEX for a peer change"
    assert hosts_mapping(hosts.read_text())["compute-domain-daemon-0001"] == UNUSED
    assert hosts.read_text().count(HOSTS_HEADER) == 1
    first, second = await dns.changes()
    assert (first.added, first.action) == (
        [f"compute-domain-daemon-0000={ME}", f"compute-domain-daemon-0001={PEER}"],
        "started IMEX",
    )
    assert (second.added, second.removed, second.action) == (
        ["compute-domain-daemon-0002=10.40.0.3"],
        [f"compute-domain-daemon-0001={PEER}"],
        "sent SIGUSR1",
    )


async def test_ip_mode_waits_for_the_expected_daemons_then_restarts_on_changes(ip_mode: Harness) -> None:
    nodes = ip_mode.settings.nodes_path
    await ip_mode.updater.apply(_listing(("n1", ME, 0), expected=2))
    assert ip_mode.pid is None and not nodes.exists(), "waits until numNodes daemons registered"

    await ip_mode.updater.apply(_listing(("n1", ME, 0), ("n2", PEER, 1), expected=2))
    first_pid = ip_mode.pid
    assert first_pid is not None
    assert nodes.read_text() == f"{ME}\n{PEER}\n"

    await ip_mode.updater.apply(_listing(("n1", ME, 0), ("n2", "10.40.0.9", 1), expected=2))
    assert nodes.read_text() == f"{ME}\n10.40.0.9\n"
    assert ip_mode.pid not in (None, first_pid), "IP mode restarts IMEX with the new node list"
    started, restarted = await ip_mode.changes()
    assert (started.action, restarted.action) == ("started IMEX", "restarted IMEX")
    assert (restarted.added, restarted.removed) == (["10.40.0.9"], [PEER])
    assert not ip_mode.settings.hosts_file.read_text().count(HOSTS_HEADER), "IP mode leaves hosts alone"


def _node_id(fake: FakeImex) -> int | None:
    """The node id this daemon's IMEX runs as, per the fake IMEX (fixed when it started)."""
    entry = Registry(fake.root / "registry").entry(ME)
    return None if entry is None else int(entry["node_id"])


async def test_dns_mode_restarts_imex_when_its_own_slot_moves_and_only_signals_otherwise(
    dns: Harness, use_fake_imex: FakeImex
) -> None:
    registry = Registry(use_fake_imex.root / "registry")
    await dns.updater.apply(_listing(("n1", ME, 0), ("n2", PEER, 1)))
    first_pid = dns.pid
    await eventually(lambda: _node_id(use_fake_imex) == 0)

    await dns.updater.apply(_listing(("n1", ME, 0), ("n2", PEER, 2)))  # a peer's slot moves
    await dns.updater.apply(_listing(("n1", ME, 0), ("n2", PEER, 2), ("n3", "10.40.0.3", 1)))  # one joins
    assert dns.pid == first_pid, "another daemon's change: IMEX keeps running, signalled"

    await dns.updater.apply(_listing(("n1", ME, 3), ("n2", PEER, 2), ("n3", "10.40.0.3", 1)))
    assert dns.pid not in (None, first_pid), "its own slot moved: IMEX fixed its node id at start"
    await eventually(lambda: _node_id(use_fake_imex) == 3)
    assert registry.start_counts(by="address") == {ME: 2}
    actions = [change.action for change in await dns.changes()]
    assert actions == [
        "started IMEX", "sent SIGUSR1", "sent SIGUSR1",
        "restarted IMEX: own slot moved from compute-domain-daemon-0000 to compute-domain-daemon-0003",
    ]  # fmt: skip

    await dns.updater.apply(_listing(("n2", PEER, 2), ("n3", "10.40.0.3", 1)))  # its entry is dropped
    assert dns.pid is not None and _node_id(use_fake_imex) == 3, "no slot to restart into: signalled"
    await dns.updater.apply(_listing(("n1", ME, 3), ("n2", PEER, 2), ("n3", "10.40.0.3", 1)))
    assert registry.start_counts(by="address") == {ME: 2}, "back in the slot its IMEX runs as"
