"""`cdctl controller` as its own process: converges a domain, serves metrics, exits 0 on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import sys
from pathlib import Path

import aiohttp

from tests.controller.harness import DRIVER_NAMESPACE, USER_NAMESPACE, Cluster, eventually


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_the_command_reconciles_serves_metrics_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    async with Cluster(tmp_path) as cluster:
        port = free_port()
        env = {
            "POD_NAME": "controller-0",
            "NAMESPACE": DRIVER_NAMESPACE,
            "IMAGE_NAME": "example.com/cdctl:test",
            "LOG_VERBOSITY_CD_DAEMON": "4",
            "KUBECONFIG": str(cluster.kubeconfig),
            "HTTP_ENDPOINT": f"127.0.0.1:{port}",
            "LEADER_ELECTION_ENABLED": "true",
            "LEADER_ELECTION_LEASE_LOCK_NAMESPACE": DRIVER_NAMESPACE,
            "CDCTL_DB": str(tmp_path / "controller.db"),
            "LOG_FORMAT": "json",
            "PATH": "/usr/bin:/bin",
        }
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "cdctl",
            "controller",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            cluster.create_domain("cd1")
            await eventually(
                lambda: cluster.get(
                    "resource.k8s.io", "resourceclaimtemplates", USER_NAMESPACE, "cd1-channel"
                )
            )
            async with aiohttp.ClientSession() as session:
                metrics = ""
                for _ in range(600):  # the status is written just after the template; a bound, not a timing
                    async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                        metrics = await response.text()
                    if 'nvidia_dra_compute_domain_info{status="Ready"} 1.0' in metrics:
                        break
                    await asyncio.sleep(0.05)
            assert 'nvidia_dra_compute_domain_info{status="Ready"} 1.0' in metrics
            lease = cluster.get(
                "coordination.k8s.io", "leases", DRIVER_NAMESPACE, "nvidia-compute-domain-controller"
            )
            assert lease["spec"]["holderIdentity"].startswith("controller-0-")
        finally:
            process.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode == 0, stderr.decode()[-2000:]
        lines = stderr.decode().splitlines()
        assert any('"event": "controller manager config"' in line for line in lines)
        # One line per reconcile that wrote, naming the domain and each write.
        reconciled = [json.loads(line) for line in lines if '"event": "ComputeDomain reconciled"' in line]
        writes = [write.split(" ")[:2] for entry in reconciled for write in entry["writes"]]
        assert ["create", "DaemonSet"] in writes and ["create", "ResourceClaimTemplate"] in writes
        assert all((e["namespace"], e["name"]) == (USER_NAMESPACE, "cd1") and e["uid"] for e in reconciled)
        lease = cluster.get(
            "coordination.k8s.io", "leases", DRIVER_NAMESPACE, "nvidia-compute-domain-controller"
        )
        assert not lease["spec"].get("holderIdentity")
