"""The IMEX daemon keeps its own event log under its retention policy while it runs (in process, against the
simulated API server: a daemon without a clique idles, and its log is compacted meanwhile)."""

from __future__ import annotations

import asyncio
import contextlib

from cdctl.api.gates import parse_feature_gates
from cdctl.daemon.app import DaemonApp
from cdctl.daemon.settings import DaemonSettings
from cdctl.domain.errors import StoreError
from cdctl.domain.retention import RetentionPolicy
from cdctl.projections.replay import VerifyReport, verify_chain
from cdctl.store import SqliteEventStore
from tests.daemon.rig import Rig


async def test_a_running_daemon_compacts_its_log(rig: Rig) -> None:
    daemon = rig.daemon("keeper", "n1", "10.60.0.1", "uid-k", clique="")
    settings = DaemonSettings(
        clique_id="", domain_uid="uid-k", domain_name="cd-uid-k", domain_namespace="default",
        node_name="n1", pod_ip="10.60.0.1", pod_uid="uid-keeper", pod_name="keeper",
        pod_namespace=daemon.env["POD_NAMESPACE"], max_nodes=2, gates=parse_feature_gates(""),
        imexd_dir=daemon.imexd, kubeconfig=str(rig.kubeconfig), retention=RetentionPolicy(0, 1),
        retention_interval_s=0.05, retention_first_delay_s=0.0,
    )  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.create_task(DaemonApp(settings).run(stop))
    try:
        async with asyncio.timeout(30):
            while True:
                assert not task.done(), task.result()
                horizon = None
                with contextlib.suppress(StoreError):  # not there yet, or being created
                    async with await SqliteEventStore.open(daemon.db, read_only=True) as store:
                        horizon = await store.horizon()
                if horizon is not None and not horizon.pending and horizon.position >= 1:
                    break
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        await task
    report = VerifyReport()
    async with await SqliteEventStore.open(daemon.db, read_only=True) as store:
        await verify_chain(store, report)
        types = [e.type for e in await store.read_all()]
        assert await store.stream_version("node/n1") == 2  # started (compacted away), stopped
    assert report.ok and types[-1] == "ImexDaemonStopped"
