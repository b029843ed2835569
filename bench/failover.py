"""Failover phase of the controller benchmark (bench/controller.py --phases failover): what a `kill -9` of the
leading controller costs, with the chart's default lease settings unless told otherwise.

Two `cdctl controller` processes (pods controller-0 and controller-1, each with its own SQLite event log and a
token bound to its pod) run against the in-process simulated API server with `domains` ComputeDomains
converged. Over a steady window the server's audit log counts each replica's Lease requests (the leader's
renewals, the standby's polls) and reports them per minute beside the formula (60 / retryPeriod each). Then
`rounds` times: SIGKILL the leader and create a new ComputeDomain at once; measure from the kill to the Lease
naming the standby (seen in the server's store), from the Lease won to the new leader's first reconcile (its
own log line), and from the kill to the new domain's workload ResourceClaimTemplate (failover, end to end).
The killed replica is restarted on its own log as a standby before the next round.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from cdctl.cli.controller import parse_duration
from cdctl.sim.apiserver.identity import service_account_token
from cdctl.sim.apiserver.server import ApiServer
from cdctl.sim.rack.chart import merged_values

LEASE_NAME = "cdctl-controller"
CHART_LEASE: dict[str, str] = {
    k: str(v) for k, v in merged_values()["controller"]["leaderElection"].items() if k != "enabled"
}


class Replica:
    def __init__(
        self, server: ApiServer, workdir: Path, pod: str, namespace: str, lease: dict[str, str]
    ) -> None:
        self.pod, self.namespace, self.lease = pod, namespace, lease
        self.db = workdir / f"{pod}.db"
        self.stderr = workdir / f"{pod}.log"
        token = service_account_token(namespace, "cdctl-controller", pod=pod)
        self.kubeconfig = server.write_kubeconfig(workdir / f"{pod}.kubeconfig", token)
        self.process: asyncio.subprocess.Process | None = None
        self._out: IO[str] | None = None

    async def start(self) -> None:
        env = {
            "POD_NAME": self.pod,
            "NAMESPACE": self.namespace,
            "IMAGE_NAME": "example.com/cdctl:bench",
            "LOG_VERBOSITY_CD_DAEMON": "0",
            "KUBECONFIG": str(self.kubeconfig),
            "KUBE_API_QPS": "0",
            "LEADER_ELECTION_ENABLED": "true",
            "LEADER_ELECTION_LEASE_LOCK_NAMESPACE": self.namespace,
            "LEADER_ELECTION_LEASE_LOCK_NAME": LEASE_NAME,
            "LEADER_ELECTION_LEASE_DURATION": self.lease["leaseDuration"],
            "LEADER_ELECTION_RENEW_DEADLINE": self.lease["renewDeadline"],
            "LEADER_ELECTION_RETRY_PERIOD": self.lease["retryPeriod"],
            "CDCTL_DB": str(self.db),
            "LOG_FORMAT": "json",
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        }
        if self._out is not None:
            self._out.close()
        self._out = self.stderr.open("a")
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cdctl", "controller", env=env, stdout=asyncio.subprocess.DEVNULL,
            stderr=self._out,
        )  # fmt: skip

    async def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        await self.process.wait()

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            await asyncio.wait_for(self.process.wait(), 30)
        if self._out is not None:
            self._out.close()

    def logged(self, event: str) -> list[dict[str, Any]]:
        entries = []
        for line in self.stderr.read_text().splitlines():
            if line.startswith("{"):
                entry = json.loads(line)
                if entry.get("event") == event:
                    entries.append(entry)
        return entries


async def until(condition: Callable[[], Any], give_up_s: float = 300.0, poll_s: float = 0.005) -> Any:
    deadline = time.monotonic() + give_up_s
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"failover benchmark: {getattr(condition, '__name__', 'condition')} never held"
            )
        await asyncio.sleep(poll_s)
    return value


async def kill_the_leader(
    leader: Replica,
    standby: Replica,
    name: str,
    bench: Any,
    holder: Callable[[], str],
    template: Callable[[str], bool],
) -> dict[str, Any]:
    """One round: SIGKILL the leader, create domain `name`, time the takeover; restart the killed replica."""
    reconciles_before = len(standby.logged("first reconcile"))
    killed_at = time.time()
    await leader.kill()
    bench.create_domain(name)
    await until(lambda: holder().startswith(f"{standby.pod}-"))
    lease_at = time.time()
    await until(lambda: template(name))
    acted_at = time.time()
    first = (await until(lambda: standby.logged("first reconcile")[reconciles_before:], poll_s=0.05))[0]
    populated = len(leader.logged("caches populated"))
    await leader.start()  # the same pod, the same log: back as a standby
    await until(lambda: len(leader.logged("caches populated")) > populated, poll_s=0.05)
    return {
        "killed": leader.pod,
        "lease_taken_after_kill_s": round(lease_at - killed_at, 3),
        "first_reconcile_after_lease_s": first["since_lease_acquired_s"],
        "new_domain_template_after_kill_s": round(acted_at - killed_at, 3),
    }


def summary(values: list[float]) -> dict[str, float]:
    return {
        "min": round(min(values), 3),
        "median": round(statistics.median(values), 3),
        "max": round(max(values), 3),
    }


async def failover_phase(
    server: ApiServer,
    bench: Any,
    *,
    namespace: str,
    user_namespace: str,
    workdir: Path,
    domains: int,
    rounds: int,
    window_s: float,
    lease: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run the phase; `bench` is bench.controller.Bench (domains, counts) over the same server."""
    lease = lease or CHART_LEASE
    retry_s = parse_duration(lease["retryPeriod"])
    leases = server.store.type_of("coordination.k8s.io", "leases")

    def holder() -> str:
        try:
            lease_object = server.store.get(leases, namespace, LEASE_NAME)
        except Exception:  # not created yet
            return ""
        return str((lease_object.get("spec") or {}).get("holderIdentity") or "")

    def template(name: str) -> bool:
        return bool(
            bench.exists("resource.k8s.io", "resourceclaimtemplates", user_namespace, f"{name}-channel")
        )

    replicas = {
        pod: Replica(server, workdir, pod, namespace, lease) for pod in ("controller-0", "controller-1")
    }
    try:
        await replicas["controller-0"].start()
        await until(lambda: holder().startswith("controller-0-"))
        for index in range(domains):
            bench.create_domain(f"fo-{index:04d}")
        await until(lambda: bench.count("apps", "daemonsets", namespace) >= domains, poll_s=0.1)
        await replicas["controller-1"].start()
        await until(lambda: replicas["controller-1"].logged("caches populated"), poll_s=0.05)

        started = time.time()
        await asyncio.sleep(window_s)
        ended = time.time()
        minutes = (ended - started) / 60
        in_window = [e for e in server.audit.select(resource="leases", since=started) if e.timestamp < ended]
        cost: dict[str, Any] = {
            role: {
                "requests_per_minute": round(sum(e.pod == pod for e in in_window) / minutes, 1),
                "verbs": sorted({e.verb for e in in_window if e.pod == pod}),
            }
            for role, pod in (("leader", "controller-0"), ("standby", "controller-1"))
        }
        cost["expected_per_minute_each"] = round(60 / retry_s, 1)  # one request per retry period

        results = []
        for round_ in range(rounds):
            leader_pod = next(pod for pod in replicas if holder().startswith(f"{pod}-"))
            standby_pod = next(pod for pod in replicas if pod != leader_pod)
            results.append(
                await kill_the_leader(
                    replicas[leader_pod],
                    replicas[standby_pod],
                    f"after-kill-{round_}",
                    bench,
                    holder,
                    template,
                )
            )
    finally:
        for replica in replicas.values():
            await replica.stop()
    return {
        "lease": lease,
        "domains": domains,
        "lease_requests": {"window_s": round(ended - started, 1), **cost},
        "rounds": results,
        "lease_taken_after_kill_s": summary([r["lease_taken_after_kill_s"] for r in results]),
        "first_reconcile_after_lease_s": summary([r["first_reconcile_after_lease_s"] for r in results]),
        "new_domain_template_after_kill_s": summary([r["new_domain_template_after_kill_s"] for r in results]),
    }
