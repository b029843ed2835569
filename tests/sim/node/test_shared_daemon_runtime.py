"""The rack's daemon runtime and the shared IMEX daemon of channel isolation: it runs the chart's DaemonSet
pods (driver namespace, component imex-daemon) with the node's shared directory as /imexd, and lists that
daemon's event log with the others."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cdctl.api.shareddaemon import SHARED_DAEMON_LABELS, SHARED_DIR
from cdctl.domain.computedomains import DRIVER_NAME, LABEL_COMPUTE_DOMAIN
from cdctl.sim.node.daemonruntime import DaemonPodRuntime


def _pod(namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": namespace, "labels": labels}, "spec": {"nodeName": "n0"}}


def test_it_runs_the_shared_daemon_and_the_domain_daemons_and_nothing_else(tmp_path: Path) -> None:
    runtime = DaemonPodRuntime(
        tmp_path, "drv", selects=lambda _: True, cdi_dirs=lambda _: [], log_dir=tmp_path / "logs"
    )
    shared = _pod("drv", dict(SHARED_DAEMON_LABELS))
    assert runtime.is_shared_daemon_pod(shared) and runtime.runs(shared)
    assert not runtime.is_daemon_pod(shared)
    assert runtime.runs(_pod("drv", {LABEL_COMPUTE_DOMAIN: "d1"}))
    assert not runtime.runs(_pod("tenant", dict(SHARED_DAEMON_LABELS)))  # another namespace: a tenant's pod
    assert not runtime.runs(_pod("drv", {"app": "other"}))
    log = tmp_path / "n0" / "plugins" / DRIVER_NAME / SHARED_DIR / "events.db"
    log.parent.mkdir(parents=True)
    log.write_bytes(b"")
    assert runtime.daemon_logs() == [("n0", SHARED_DIR, log)]
