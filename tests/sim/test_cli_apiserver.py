"""`cdctl sim apiserver` serves until stopped and writes a kubeconfig that kubernetes_asyncio can use."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from pathlib import Path

from kubernetes_asyncio import client, config

from cdctl.sim.apiserver.server import FREE_PORT_RANGE, free_port


async def test_apiserver_command_serves_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    # The `sim` click group is what `cdctl sim` mounts; running it directly keeps this test to this command.
    kubeconfig = tmp_path / "kubeconfig"
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from cdctl.cli.sim import sim; sim()",
        "apiserver",
        "--port",
        str(port),
        "--kubeconfig-out",
        str(kubeconfig),
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        async with asyncio.timeout(30):
            banner = await process.stderr.readline()
        assert f"127.0.0.1:{port}" in banner.decode()
        api = await config.new_client_from_config(config_file=str(kubeconfig))
        async with api:
            namespaces = await client.CoreV1Api(api).list_namespace()
        assert "default" in {n.metadata.name for n in namespaces.items}
    finally:
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            code = await process.wait()
    assert code == 0


async def test_cluster_command_registers_a_node_per_simulated_node(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from cdctl.cli.sim import sim; sim()",
        "cluster",
        "--port",
        str(free_port()),
        "--kubeconfig-out",
        str(kubeconfig),
        "--nodes-per-rack",
        "3",
        "--work-dir",
        str(tmp_path / "work"),
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        async with asyncio.timeout(30):
            banner = await process.stderr.readline()
        assert b"3 GPU nodes and 1 CPU-only node" in banner
        api = await config.new_client_from_config(config_file=str(kubeconfig))
        async with api:
            nodes = await client.CoreV1Api(api).list_node()
        gpu = [n for n in nodes.items if (n.metadata.labels or {}).get("nvidia.com/gpu.present") == "true"]
        assert len(gpu) == 3
        assert [n.metadata.name for n in nodes.items if n not in gpu] == ["cpu-r00-n00"]
    finally:
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            code = await process.wait()
    assert code == 0


def test_a_free_port_lies_outside_the_kernels_ephemeral_range_and_can_be_bound() -> None:
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    for _ in range(20):
        port = free_port()
        assert FREE_PORT_RANGE[0] <= port <= FREE_PORT_RANGE[1]
        assert not low <= port <= high  # no client connection can hold it as its source port
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))


def test_a_free_port_is_never_handed_out_twice_by_one_process() -> None:
    """A rack picks some forty ports before its components bind them: a port picked twice failed its start."""
    picks = [free_port() for _ in range(500)]
    assert len(set(picks)) == len(picks)


def test_a_port_something_listens_on_is_skipped() -> None:
    with socket.socket() as holder:
        port = free_port()
        following = FREE_PORT_RANGE[0] if port == FREE_PORT_RANGE[1] else port + 1  # the walk's next pick
        holder.bind(("127.0.0.1", following))
        holder.listen()
        assert free_port() != following
