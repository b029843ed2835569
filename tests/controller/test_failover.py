"""Two `cdctl controller` processes with the chart's default lease settings and a keyed log each.

The leader is killed with SIGKILL: its warm standby takes the Lease once it has expired, records the takeover
(LeadershipAcquired) before its first action, and had written nothing to the API before. The killed replica,
restarted on its own log file as a StatefulSet restarts a pod on its volume, appends to the same chain as a
standby; `cdctl verify --key-file` passes on both logs, the killed one still holding the head it had before.
The audit log measures what leader election costs: one PUT per retry period from the leader, one GET per
retry period from the standby. Behaviour is asserted; bounds on time are loose (bench/controller.py measures).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import sys
import time
from pathlib import Path
from typing import IO, Any

from cdctl.cli.controller import parse_duration
from cdctl.domain.errors import StoreError
from cdctl.domain.events import RecordedEvent
from cdctl.sim.rack.chart import merged_values
from tests.controller.harness import DRIVER_NAMESPACE, Cluster, eventually, eventually_async
from tests.controller.test_standby import LEASE_NAME, as_pod, enforce_chart, first, read_log

CHART_LEASE: dict[str, Any] = merged_values()["controller"]["leaderElection"]
LEASE_S = parse_duration(CHART_LEASE["leaseDuration"])
RETRY_S = parse_duration(CHART_LEASE["retryPeriod"])


class Replica:
    """One controller pod: its name, its log file on its own volume, and the running process."""

    def __init__(self, cluster: Cluster, pod: str, key: Path) -> None:
        self.cluster, self.pod, self.key = cluster, pod, key
        self.db = cluster.tmp_path / f"{pod}.db"
        self.stderr = cluster.tmp_path / f"{pod}.log"
        self.process: asyncio.subprocess.Process | None = None
        self._stderr: IO[str] | None = None

    async def start(self) -> None:
        env = {
            "POD_NAME": self.pod,
            "NAMESPACE": DRIVER_NAMESPACE,
            "IMAGE_NAME": "example.com/cdctl:test",
            "LOG_VERBOSITY_CD_DAEMON": "4",
            "KUBECONFIG": as_pod(self.cluster, self.pod),
            "LEADER_ELECTION_ENABLED": "true",
            "LEADER_ELECTION_LEASE_LOCK_NAMESPACE": DRIVER_NAMESPACE,
            "LEADER_ELECTION_LEASE_LOCK_NAME": LEASE_NAME,
            "LEADER_ELECTION_LEASE_DURATION": CHART_LEASE["leaseDuration"],
            "LEADER_ELECTION_RENEW_DEADLINE": CHART_LEASE["renewDeadline"],
            "LEADER_ELECTION_RETRY_PERIOD": CHART_LEASE["retryPeriod"],
            "CDCTL_DB": str(self.db),
            "CDCTL_LOG_KEY_FILE": str(self.key),
            "LOG_FORMAT": "json",
            "PATH": "/usr/bin:/bin",
        }
        if self._stderr is not None:
            self._stderr.close()  # the previous run's (a killed process is not stopped)
        self._stderr = self.stderr.open("a")
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cdctl", "controller", env=env, stdout=asyncio.subprocess.DEVNULL,
            stderr=self._stderr,
        )  # fmt: skip

    async def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.process is not None and self._stderr is not None
        self.process.send_signal(sig)
        code = await asyncio.wait_for(self.process.wait(), 30)
        self._stderr.close()
        return code

    def logged(self, event: str) -> list[dict[str, Any]]:
        lines = self.stderr.read_text().splitlines()
        return [
            entry for line in lines if line.startswith("{") and (entry := json.loads(line))["event"] == event
        ]

    async def log_with(self, type_: str, **data: object) -> RecordedEvent:
        async def found() -> RecordedEvent | None:
            try:
                return first(await read_log(self.db), type_, **data)
            except StoreError:
                return None  # the process has not created its log yet
            except StopIteration:
                return None

        result: RecordedEvent = await eventually_async(found)
        return result


def holder(cluster: Cluster) -> str:
    lease = cluster.get("coordination.k8s.io", "leases", DRIVER_NAMESPACE, LEASE_NAME) or {}
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


async def verify(db: Path, key: Path, *heads: str) -> tuple[int, str]:
    expect = [arg for head in heads for arg in ("--expect-head", head)]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cdctl", "verify", "--db", str(db), "--key-file", str(key), *expect,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env={**os.environ},
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode or 0, out.decode()


async def test_a_killed_leader_is_replaced_and_both_logs_stay_continuous_and_verified(tmp_path: Path) -> None:
    key = tmp_path / "event-log-key"
    key.write_text(secrets.token_hex(32))
    async with Cluster(tmp_path) as cluster:
        enforce_chart(cluster)
        a, b = Replica(cluster, "controller-0", key), Replica(cluster, "controller-1", key)
        try:
            await a.start()
            await eventually(lambda: holder(cluster).startswith("controller-0-"))
            uid = cluster.create_domain("cd1")["metadata"]["uid"]
            daemon_set = f"computedomain-daemon-{uid}"
            await eventually(lambda: cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, daemon_set))
            await b.start()
            await b.log_with("DomainObjectObserved", kind="DaemonSet", name=daemon_set)  # b follows
            watched_from = time.time()
            await asyncio.sleep(2 * RETRY_S)  # a few more renewals and polls to count

            before = await read_log(a.db)
            head = f"{before[-1].position}:{before[-1].hash}"
            assert a.process is not None
            a.process.kill()  # SIGKILL: no release, no last event
            killed_at = time.time()
            await asyncio.wait_for(a.process.wait(), 60)
            uid2 = cluster.create_domain("cd2")["metadata"]["uid"]
            acquired = await b.log_with("LeadershipAcquired")
            await eventually(
                lambda: cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, f"computedomain-daemon-{uid2}")
            )
            audit = cluster.server.audit
            b_writes = audit.writes(pod="controller-1")
            assert (b_writes[0].resource, b_writes[0].verb) == ("leases", "update")
            assert b_writes[0].timestamp > killed_at  # nothing written while it stood by

            await a.start()  # the same pod name, the same log file: a StatefulSet's restart on its volume
            restarted_at = time.time()
            seen = await a.log_with("ComputeDomainObserved", uid=uid2)
            assert seen.position > before[-1].position
            assert audit.writes(pod="controller-0", since=restarted_at) == []  # a standby now
            assert holder(cluster).startswith("controller-1-")
        finally:
            codes = [await replica.stop() for replica in (a, b) if replica.process is not None]
        assert codes == [0, 0]

    # Cost of leader election while both ran: the leader's renewals are single PUTs, the standby's polls GETs.
    window = killed_at - watched_from
    leases = [e for e in audit.select(resource="leases", since=watched_from) if e.timestamp < killed_at]
    renewals = [e.verb for e in leases if e.pod == "controller-0"]
    polls = [e.verb for e in leases if e.pod == "controller-1"]
    assert renewals and set(renewals) == {"update"} and len(renewals) <= window / RETRY_S + 2
    assert polls and set(polls) == {"get"} and len(polls) <= window / RETRY_S + 2

    events = await read_log(b.db)
    acquired = first(events, "LeadershipAcquired")
    assert acquired.data["how"] == "expired" and acquired.data["previous_holder"].startswith("controller-0-")
    assert acquired.data["view_synced"] is True and acquired.data["silent_s"] >= LEASE_S
    assert acquired.data["lease_duration_s"] == LEASE_S
    actions = [e for e in events if e.type == "DomainActionIntended"]
    assert actions and min(e.position for e in actions) > acquired.position
    (reconciled,) = b.logged("first reconcile")
    assert reconciled["since_lease_acquired_s"] >= 0
    failover_s = acquired.recorded_at.timestamp() - killed_at
    assert failover_s < LEASE_S + 2 * RETRY_S + 5  # loose: the figures are bench/controller.py's

    for replica, heads in ((a, [head]), (b, [])):
        code, out = await verify(replica.db, key, *heads)
        assert code == 0, out
        assert "keyed hash chain (HMAC-SHA256) intact" in out
