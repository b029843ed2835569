"""The formation view: one row per node with its milestones, teardown, retries and failures, and a summary
that names the formation time and the slowest node with the step that made it slow."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cdctl.domain.events import RecordedEvent
from cdctl.projections.formation import MILESTONES, formation_view
from cdctl.projections.timeline import Line

UID = "5a0f2a55-1111-4222-8333-444455556666"
T0 = datetime(2026, 11, 25, 6, 0, tzinfo=UTC)


class Log:
    def __init__(self) -> None:
        self.lines: list[Line] = []

    def add(
        self, at: float, stream: str, type_: str, data: dict[str, Any], node: str = "", source: str = ""
    ) -> None:
        metadata = {"actor": {"component": "x", "node": node, "pod": ""}} if node else {}
        event = RecordedEvent(
            len(self.lines) + 1, stream, 1, type_, 1, data, metadata, T0 + timedelta(seconds=at), "0" * 64
        )
        self.lines.append(Line(source, event))


def _node(log: Log, node: str, worker_at: float, *, retry: bool = False) -> None:
    """One node's formation: the controller's view, its plugin's two claims and its daemon."""
    dom = f"domain/{UID}"
    daemon_claim, worker_claim = f"d-{node}", f"w-{node}"
    log.add(
        0.2, dom, "DomainObjectObserved", {"kind": "Node", "name": node, "change": "ADDED", "summary": {}}
    )
    log.add(
        0.25,
        f"claim/{worker_claim}",
        "ClaimPrepareStarted",
        {"claim_uid": worker_claim, "kind": "channel", "node": node, "domain_uid": UID},
        node,
    )
    if retry:
        log.add(
            0.26,
            f"claim/{worker_claim}",
            "ClaimPrepareFailed",
            {
                "claim_uid": worker_claim,
                "reason": "current node not ready in ComputeDomain",
                "retriable": True,
            },
            node,
        )
    log.add(
        0.3,
        f"claim/{daemon_claim}",
        "ClaimPrepareStarted",
        {"claim_uid": daemon_claim, "kind": "daemon", "node": node, "domain_uid": UID},
        node,
    )
    log.add(0.31, f"claim/{daemon_claim}", "ClaimPrepareCompleted", {"claim_uid": daemon_claim}, node)
    log.add(
        0.5, f"node/{node}", "ImexDaemonStarted", {"node": node, "domain_uid": UID, "pod_name": "p"}, node
    )
    log.add(0.6, dom, "CliqueIndexAssigned", {"node_name": node, "index": 0, "domain_uid": UID})
    log.add(
        worker_at - 0.2,
        dom,
        "DomainObjectObserved",
        {"kind": "Pod", "change": "MODIFIED", "summary": {"node": node, "ready": True}},
    )
    log.add(worker_at, f"claim/{worker_claim}", "ClaimPrepareCompleted", {"claim_uid": worker_claim}, node)
    log.add(
        worker_at + 0.01, f"claim/{worker_claim}", "ClaimPrepareCompleted", {"claim_uid": worker_claim}, node
    )
    log.add(
        5.0,
        f"claim/{worker_claim}",
        "ClaimUnprepared",
        {"claim_uid": worker_claim, "reason": "kubelet"},
        node,
    )
    log.add(5.1, dom, "CliqueEntryRemoved", {"node_name": node, "index": 0})


def _domain(log: Log) -> None:
    log.add(
        0.0,
        f"domain/{UID}",
        "ComputeDomainObserved",
        {"uid": UID, "namespace": "team-a", "name": "nvl", "num_nodes": 3, "change": "ADDED"},
    )


def test_every_node_gets_a_row_with_each_milestone_once_and_its_teardown() -> None:
    log = Log()
    _domain(log)
    for node, at in (("n1", 1.0), ("n2", 1.1), ("n3", 2.5)):
        _node(log, node, at)
    view = formation_view(
        sorted(log.lines, key=lambda ln: ln.event.recorded_at), UID, "computedomain/team-a/nvl"
    )
    assert [r.name for r in view.nodes] == ["n1", "n2", "n3"]
    for row in view.nodes:
        assert [m.key for m in row.marks if m.phase == "formation"] == [k for k, _ in MILESTONES]
        assert {m.key for m in row.marks if m.phase == "teardown"} == {"worker-unprepared", "unlisted"}
    assert view.missing == []
    assert view.domain_name == "team-a/nvl" and view.expected_nodes == 3 and view.origin_is_creation
    worker = view.nodes[0].first("worker")
    assert worker is not None and worker.offset_s == pytest.approx(1.0)
    assert "ClaimPrepareCompleted" in worker.event and "claim/w-n1" in worker.event


def test_the_summary_names_the_formation_time_and_the_slowest_node_and_why() -> None:
    log = Log()
    _domain(log)
    for node, at, retry in (("n1", 1.0, False), ("n2", 1.1, False), ("n3", 2.5, True)):
        _node(log, node, at, retry=retry)
    view = formation_view(sorted(log.lines, key=lambda ln: ln.event.recorded_at), UID, "cd")
    assert view.formation_s == pytest.approx(2.5)
    assert view.slowest == "n3"
    # its Ready came 1.7 s after it was listed; the others' took 0.2 and 0.3 s
    assert (
        "its longest step: listed in its clique -> daemon Ready, 1.70 s (the other nodes' median 0.25 s)"
        in (view.why)
    )
    assert "1 retry (current node not ready in ComputeDomain)" in view.why
    text = "\n".join(view.summary_lines())
    assert "formation: 2.50 s" in text and "slowest node: n3" in text and "retries: 1, failures: 0" in text
    [retry] = view.nodes[2].retries
    assert retry.phase == "retry" and retry.detail == "current node not ready in ComputeDomain"


def test_failures_are_marks_of_their_own() -> None:
    log = Log()
    _domain(log)
    _node(log, "n1", 1.0)
    log.add(
        1.5,
        "node/n1",
        "ImexExited",
        {"node": "n1", "expected": False, "exit_code": 1, "reason": "crash"},
        "n1",
    )
    log.add(
        1.6, "node/n1", "ImexStarted", {"node": "n1", "attempt": 2, "reason": "restart after a crash"}, "n1"
    )
    log.add(1.7, "claim/x", "ClaimPrepareStarted", {"claim_uid": "x", "kind": "channel", "node": "n1"}, "n1")
    log.add(
        1.8,
        "claim/x",
        "ClaimPrepareFailed",
        {"claim_uid": "x", "reason": "bad config", "retriable": False},
        "n1",
    )
    view = formation_view(sorted(log.lines, key=lambda ln: ln.event.recorded_at), UID, "cd")
    [row] = view.nodes
    assert [m.label for m in row.failures] == ["IMEX exited", "channel claim Prepare failed"]
    assert [m.label for m in row.retries] == ["IMEX restarted"]


def test_a_file_without_the_plugins_says_formation_is_not_in_it() -> None:
    log = Log()
    _domain(log)
    _node(log, "n1", 1.0)
    controller = [ln for ln in log.lines if ln.event.stream.startswith("domain/")]
    view = formation_view(controller, UID, "cd")
    assert set(view.missing) == {"daemon-claim", "daemon-started", "worker"}
    assert view.formation_s is None
    lines = view.summary_lines()
    assert any("not in this file, which holds no worker Prepare" in line for line in lines)
    assert any(line.startswith("the node furthest behind: n1") for line in lines)
    assert not any("slowest" in line for line in lines)


def test_without_the_controller_times_count_from_the_first_event() -> None:
    log = Log()
    _node(log, "n1", 1.0)
    plugin = [ln for ln in log.lines if not ln.event.stream.startswith("domain/")]
    view = formation_view(sorted(plugin, key=lambda ln: ln.event.recorded_at), UID, "cd")
    assert not view.origin_is_creation
    assert view.formation_s == pytest.approx(0.75)  # the first event is the worker's Prepare at 0.25 s
    assert "the first event in this file" in view.summary_lines()[1]


def test_a_compromised_daemon_cannot_put_marks_on_another_nodes_row() -> None:
    """In a collected file a daemon's events belong to the node its source was collected from."""
    log = Log()
    _domain(log)
    log.add(
        0.5,
        "node/n1",
        "ImexDaemonStarted",
        {"node": "n1", "domain_uid": UID},
        "n1",
        source=f"daemon/n1/{UID}",
    )
    # n2's daemon says it is n1, and that n1's IMEX crashed
    log.add(
        0.6,
        "node/n1",
        "ImexDaemonStarted",
        {"node": "n1", "domain_uid": UID},
        "n1",
        source=f"daemon/n2/{UID}",
    )
    log.add(0.7, "node/n1", "ImexExited", {"node": "n1", "expected": False}, "n1", source=f"daemon/n2/{UID}")
    view = formation_view(log.lines, UID, "cd")
    rows = {r.name: r for r in view.nodes}
    assert [m.key for m in rows["n1"].marks] == ["daemon-started"]
    assert [m.key for m in rows["n2"].marks] == ["daemon-started", "imex-exited"]


def test_not_formed_the_node_furthest_behind_is_the_one_with_the_fewest_milestones() -> None:
    log = Log()
    _domain(log)
    _node(log, "n1", 1.0)
    log.add(
        0.2,
        f"domain/{UID}",
        "DomainObjectObserved",
        {"kind": "Node", "name": "n2", "change": "ADDED", "summary": {}},
    )
    view = formation_view(sorted(log.lines, key=lambda ln: ln.event.recorded_at), UID, "cd")
    assert view.formation_s is None
    assert view.slowest == "n2"
