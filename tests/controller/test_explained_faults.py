"""What `cdctl explain` finds in a real controller's log when the API server throttles and fails its writes:
the domain no node has joined yet is explained by the controller's failed actions (api-throttled, api-error),
each citing the DomainActionFailed the controller recorded."""

from __future__ import annotations

from pathlib import Path

from cdctl.projections.explainload import load_explanations
from cdctl.projections.timeline import EventSource
from cdctl.store.sqlite import SqliteEventStore
from tests.controller.harness import DRIVER_NAMESPACE, USER_NAMESPACE, Cluster, eventually


async def test_throttled_and_failed_writes_are_the_cause_explain_gives(tmp_path: Path) -> None:
    db = tmp_path / "controller.db"
    async with Cluster(tmp_path) as cluster:
        task, _ = await cluster.start_controller(db_path=str(db))
        cluster.server.faults.fail_next(429, 429, 500)
        uid = cluster.create_domain("cd1")["metadata"]["uid"]
        await eventually(
            lambda: cluster.get("apps", "daemonsets", DRIVER_NAMESPACE, f"computedomain-daemon-{uid}")
        )
        assert cluster.server.faults.injected == 3
        await cluster.stop_controller(task)
    async with await SqliteEventStore.open(db, read_only=True) as store:
        events = EventSource(lambda sql, params: store.query(sql, params), False, str(db))
        [explanation] = await load_explanations(events, f"computedomain/{USER_NAMESPACE}/cd1")
    codes = [cause.code for cause in explanation.chain]
    assert "api-throttled" in codes and "api-error" in codes, explanation.text()
    assert all(c.evidence is not None and c.evidence.type == "DomainActionFailed" for c in explanation.chain)
    assert any("no node has joined it in this file" in text for text, _ in explanation.facts)
