"""`cdctl sim apiserver` serves until stopped and writes a kubeconfig that kubernetes_asyncio can use."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from pathlib import Path

from kubernetes_asyncio import client, config


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_apiserver_command_serves_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    # The `sim` click group is what `cdctl sim` mounts; running it directly keeps this test to this command.
    kubeconfig = tmp_path / "kubeconfig"
    port = _free_port()
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
        str(_free_port()),
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
