"""`cdctl daemon run --shared`: the node's long-lived IMEX daemon of channel isolation, against the simulated
API server and the fake IMEX. Tied to no ComputeDomain, it takes its clique from the file the node's
kubelet plugin writes, labels its pod, and peers with its clique's shared daemon pods (IP node list)."""

from __future__ import annotations

from pathlib import Path

from cdctl.api.shareddaemon import SHARED_DAEMON_LABELS
from cdctl.k8s.daemonpods import shared_peer_entries
from cdctl.plugin.edits import write_shared_dir
from tests.daemon.conftest import eventually
from tests.daemon.rig import CLIQUE, DRIVER_NAMESPACE, Daemon, Rig

OTHER_CLIQUE = "6a130f54-faaa-4b8f-847f-be44ab70f917.1"


def shared_daemon(rig: Rig, name: str, node: str, ip: str, clique: str | None = CLIQUE) -> Daemon:
    """A pod of the chart's shared daemon DaemonSet on `node` (with its IP), and its container's env: no
    domain, no CLIQUE_ID; the plugin's directory holds the template and, unless `clique` is None, the
    clique ID."""
    daemon = rig.daemon(name, node, ip, "")
    for key in ("CLIQUE_ID", "COMPUTE_DOMAIN_UUID", "COMPUTE_DOMAIN_NAME", "COMPUTE_DOMAIN_NAMESPACE"):
        daemon.env.pop(key, None)
    daemon.env["IMEX_SHARED_DAEMON"] = "true"
    (daemon.imexd / "imexd.cfg.tmpl").unlink()
    if clique is not None:
        write_shared_dir(daemon.imexd, clique)
    pods = rig.store.type_of("", "pods")
    pod = rig.store.get(pods, DRIVER_NAMESPACE, name)
    pod["metadata"]["labels"] = dict(SHARED_DAEMON_LABELS)
    pod = rig.store.update(pods, DRIVER_NAMESPACE, name, pod)
    pod["status"] = {"podIP": ip}
    rig.store.update(pods, DRIVER_NAMESPACE, name, pod, subresource="status")
    return daemon


def nodes_file(daemon: Daemon) -> str:
    path = daemon.imexd / "nodes.cfg"
    return path.read_text() if path.exists() else ""


async def test_shared_daemons_of_a_clique_peer_with_each_other_only(rig: Rig) -> None:
    a = shared_daemon(rig, "imex-a", "n1", "10.70.0.1")
    b = shared_daemon(rig, "imex-b", "n2", "10.70.0.2")
    c = shared_daemon(rig, "imex-c", "n3", "10.70.0.3", clique=OTHER_CLIQUE)  # another rack
    for daemon in (a, b, c):
        await rig.start(daemon)
    await rig.wait_labelled(a, b, c)
    assert (rig.label_of(a), rig.label_of(c)) == (CLIQUE, OTHER_CLIQUE)
    await eventually(lambda: a.ready() and b.ready() and c.ready())
    assert nodes_file(a) == nodes_file(b) == "10.70.0.1\n10.70.0.2\n"
    assert nodes_file(c) == "10.70.0.3\n"
    # A node of the clique joins: every daemon of the clique lists it (and restarts its IMEX to read it).
    d = shared_daemon(rig, "imex-d", "n0", "10.70.0.4")
    await rig.start(d)
    await eventually(lambda: nodes_file(a) == "10.70.0.4\n10.70.0.1\n10.70.0.2\n" and d.ready())
    assert nodes_file(c) == "10.70.0.3\n"


async def test_the_shared_daemon_waits_for_the_plugin_to_write_the_clique(rig: Rig) -> None:
    a = shared_daemon(rig, "imex-a", "n1", "10.70.1.1", clique=None)
    await rig.start(a)
    await eventually(lambda: "waiting for the kubelet plugin" in rig.log_of(a))
    assert not a.ready()  # the probe: no clique yet, not ready
    assert rig.label_of(a) is None
    write_shared_dir(a.imexd, CLIQUE)
    await rig.wait_labelled(a)
    await eventually(a.ready)
    assert await rig.stop(a) == 0


def test_peer_entries_one_per_node_in_node_order() -> None:
    def pod(name: str, node: str, ip: str, clique: str = CLIQUE, deleting: bool = False) -> dict:
        meta: dict = {"name": name, "labels": {"resource.nvidia.com/computeDomain.cliqueID": clique}}
        if deleting:
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        return {"metadata": meta, "spec": {"nodeName": node}, "status": {"podIP": ip}}

    pods = [
        pod("p-b", "n2", "10.0.0.2"),
        pod("p-a", "n1", "10.0.0.1"),
        pod("p-a2", "n1", "10.0.0.9"),  # a second pod on n1 (a replacement): the first name wins
        pod("p-x", "n3", "10.0.0.3", clique=OTHER_CLIQUE),
        pod("p-gone", "n4", "10.0.0.4", deleting=True),
        pod("p-noip", "n5", ""),
    ]
    entries = shared_peer_entries(pods, CLIQUE)
    assert [(e.node_name, e.ip_address, e.index) for e in entries] == [
        ("n1", "10.0.0.1", 0),
        ("n2", "10.0.0.2", 1),
    ]


def test_check_without_a_clique_file_is_not_ready(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from cdctl.cli.main import cli

    result = CliRunner().invoke(cli, ["daemon", "check", "--shared", "--imexd-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "no clique ID" in result.output
