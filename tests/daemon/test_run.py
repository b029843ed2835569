"""`cdctl daemon run` processes against the simulated API server and the fake IMEX, the test as controller."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
from typing import Any

from cdctl.domain.computedomains import DaemonEntry
from cdctl.domain.imex import HOSTS_HEADER, hosts_mapping
from cdctl.sim.node.fakeimex import Registry
from tests.daemon.conftest import eventually
from tests.daemon.rig import CLIQUE, Daemon, Rig

UNUSED = "192.0.2.1"
SLOT0, SLOT1 = "compute-domain-daemon-0000", "compute-domain-daemon-0001"


def _entry(daemon_node: str, ip: str, index: int) -> DaemonEntry:
    return DaemonEntry(daemon_node, ip, CLIQUE, index)


def _history(rig: Rig, daemon_name: str) -> list[str]:
    daemon = next(d for d in rig.daemons if d.name == daemon_name)
    done = daemon.cli("history", "--db", str(daemon.db), daemon.node, "--json")
    assert done.returncode == 0, done.stderr
    return [event["type"] for event in json.loads(done.stdout)]


async def test_without_the_cdi_edits_run_fails_with_one_clear_line(rig: Rig) -> None:
    daemon = rig.daemon("lost", "n1", "10.60.0.1", "", clique=CLIQUE)
    done = await asyncio.to_thread(daemon.cli, "daemon", "run")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "cdctl: error: CDI container edits did not apply -- is CDI enabled in your container runtime?"
    ]


async def test_inconsistent_feature_gates_are_bad_input(rig: Rig) -> None:
    gates = "ComputeDomainCliques=true,IMEXDaemonsWithDNSNames=false"
    daemon = rig.daemon("gated", "n1", "10.60.0.1", "uid-x", FEATURE_GATES=gates)
    done = await asyncio.to_thread(daemon.cli, "daemon", "run")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert "feature gate ComputeDomainCliques requires IMEXDaemonsWithDNSNames to also be enabled" in line


async def test_without_cluster_access_run_fails_with_one_line(rig: Rig) -> None:
    daemon = rig.daemon("outside", "n1", "10.60.0.1", "uid-x", KUBECONFIG="")
    done = await asyncio.to_thread(daemon.cli, "daemon", "run")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("cdctl: error:")]
    assert len(errors) == 1, "the start-up settings are logged before, the error is one line"
    assert errors[0].startswith("cdctl: error: cannot configure the Kubernetes client from the in-cluster")


async def test_gate_overrides_are_logged_at_start(rig: Rig) -> None:
    daemon = rig.daemon(
        "hosted", "n1", "10.60.0.1", "uid-x", KUBECONFIG="", FEATURE_GATES="HostManagedIMEX=true"
    )
    done = await asyncio.to_thread(daemon.cli, "daemon", "run")
    assert "HostManagedIMEX is enabled; forcing IMEXDaemonsWithDNSNames=false" in done.stderr
    assert "HostManagedIMEX is enabled; forcing ComputeDomainCliques=false" in done.stderr


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

    assert a0.peer_states() == {SLOT0: "UP", SLOT1: "UNUSED"}, "A's empty slot does not reach B's daemon"
    stale = a0.imexd / "hosts.stale"
    shutil.copy(a0.hosts, stale)
    stale.write_text(stale.read_text().replace(f"{UNUSED}\t{SLOT1}", f"{y}\t{SLOT1}"))
    # a stale mapping would have dialled domain B's daemon, which answers as node 0 of its own domain
    assert a0.peer_states(stale)[SLOT1] == "MISMATCH", "a stale mapping would have dialled domain B's daemon"

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


async def test_ip_mode_follows_the_domain_status_and_restarts_a_crashed_imex(rig: Rig) -> None:
    domains = rig.store.type_of("resource.nvidia.com", "computedomains")
    channel = {"resourceClaimTemplate": {"name": "legacy-channel"}}
    cd = rig.store.create(
        domains, "default", {"metadata": {"name": "legacy"}, "spec": {"numNodes": 2, "channel": channel}}
    )
    uid = cd["metadata"]["uid"]
    gates = {"FEATURE_GATES": "IMEXDaemonsWithDNSNames=false,ComputeDomainCliques=false"}
    x, y = "10.61.0.1", "10.61.0.2"
    i0 = rig.daemon("i0", "n1", x, uid, COMPUTE_DOMAIN_NAME="legacy", **gates)
    i1 = rig.daemon("i1", "n2", y, uid, COMPUTE_DOMAIN_NAME="legacy", **gates)
    for daemon in (i0, i1):
        await rig.start(daemon)
    await rig.wait_labelled(i0, i1)

    def set_nodes(*entries: DaemonEntry) -> None:
        current = rig.store.get(domains, "default", "legacy")
        current["status"] = {"status": "NotReady", "nodes": [e.to_status_json() for e in entries]}
        rig.store.update(domains, "default", "legacy", current, subresource="status")

    set_nodes(_entry("n1", x, 0))
    await eventually(lambda: '"numNodes": 2' in rig.log_of(i0) or "numNodes=2" in rig.log_of(i0))
    assert not (i0.imexd / "nodes.cfg").exists(), "IMEX waits until numNodes daemons registered"
    set_nodes(_entry("n1", x, 0), _entry("n2", y, 1))
    await eventually(lambda: i0.ready() and i1.ready())
    assert (i0.imexd / "nodes.cfg").read_text() == f"{x}\n{y}\n"
    assert HOSTS_HEADER not in i0.hosts.read_text()

    registry = Registry(rig.fake.root / "registry")
    first = (registry.entry(x) or {})["pid"]
    os.kill(first, signal.SIGKILL)
    await eventually(lambda: (registry.entry(x) or {}).get("pid") not in (None, first))
    await eventually(i0.ready)

    assert await rig.stop(i0) == 0
    assert registry.entry(x) is None, "SIGTERM stopped the daemon's IMEX too"
    history = _history(rig, "i0")
    assert history.count("ImexStarted") == 2
    assert history[-2:] == ["ImexExited", "ImexDaemonStopped"]
    crash = _events(i0, "ImexExited")[0]
    assert (crash["signal"], crash["exit_code"], crash["expected"]) == ("SIGKILL", None, False)


def _events(daemon: Daemon, kind: str) -> list[dict[str, Any]]:
    done = daemon.cli("history", "--db", str(daemon.db), daemon.node, "--json")
    rows = json.loads(done.stdout)
    return [row["data"] for row in rows if row["type"] == kind]


async def test_a_daemon_whose_slot_moves_restarts_its_imex_and_the_others_keep_theirs(rig: Rig) -> None:
    """DNS mode: IMEX fixes its node id at start (the Go driver's issue 1418), so only a daemon whose own
    slot changed restarts it; every other daemon of the clique only re-reads its peers."""
    x, y, z = "10.60.0.1", "10.60.0.2", "10.60.0.3"
    a, b = (rig.daemon(n, node, ip, "uid-a", MAX_NODES_PER_IMEX_DOMAIN="3") for n, node, ip in
            (("a", "n1", x), ("b", "n2", y)))  # fmt: skip
    for daemon in (a, b):
        await rig.start(daemon)
    await rig.wait_labelled(a, b)
    rig.write_clique("uid-a", [_entry("n1", x, 0), _entry("n2", y, 1)])
    await eventually(lambda: a.ready() and b.ready())
    registry = Registry(rig.fake.root / "registry")
    assert registry.start_counts() == {"n1": 1, "n2": 1}

    c = rig.daemon("c", "n3", z, "uid-a", MAX_NODES_PER_IMEX_DOMAIN="3")
    await rig.start(c)
    await rig.wait_labelled(c)
    rig.write_clique("uid-a", [_entry("n1", x, 0), _entry("n3", z, 1), _entry("n2", y, 2)])  # b moves
    await eventually(lambda: a.ready() and b.ready() and c.ready())
    assert registry.start_counts() == {"n1": 1, "n2": 2, "n3": 1}, "only the daemon whose slot moved"
    assert [s["node_id"] for s in registry.starts() if s["node"] == "n2"] == [1, 2]
