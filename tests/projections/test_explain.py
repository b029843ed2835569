"""`cdctl explain`'s fold: the critical path of a domain, and each cause it knows traced to its origin, on
histories shaped as the components record them (one node's story per test, the cause staged in it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from cdctl.domain.events import RecordedEvent
from cdctl.projections.causes import CAUSES, History, classify
from cdctl.projections.explain import explain_claim, explain_domain, explain_node
from cdctl.projections.formation import formation_view
from cdctl.projections.timeline import Line

UID = "5a0f2a55-1111-4222-8333-444455556666"
T0 = datetime(2026, 11, 25, 6, 0, tzinfo=UTC)
CONTROLLER = "controller/cdctl-controller-0"


class Story:
    """A collected file's lines, in time order: each event from its component's source, as recorded."""

    def __init__(self) -> None:
        self.lines: list[Line] = []
        self.positions: dict[str, int] = {}

    def add(self, at: float, source: str, stream: str, type_: str, data: dict[str, Any]) -> Line:
        position = self.positions[source] = self.positions.get(source, 0) + 1
        event = RecordedEvent(position, stream, 1, type_, 1, data, {}, T0 + timedelta(seconds=at), "0" * 64)
        line = Line(source, event)
        self.lines.append(line)
        self.lines.sort(key=lambda ln: ln.event.recorded_at)
        return line

    def controller(self, at: float, type_: str, data: dict[str, Any]) -> Line:
        return self.add(at, CONTROLLER, f"domain/{UID}", type_, data)

    def plugin(self, at: float, node: str, claim: str, type_: str, data: dict[str, Any]) -> Line:
        return self.add(at, f"kubelet-plugin/{node}", f"claim/{claim}", type_, {"claim_uid": claim, **data})

    def daemon(self, at: float, node: str, type_: str, data: dict[str, Any]) -> Line:
        return self.add(at, f"daemon/{node}/{UID}", f"node/{node}", type_, {"node": node, **data})

    def node(
        self, node: str, ip: str, *, start: float = 0.0, ready: float = 1.0, worker: float = 1.2
    ) -> None:
        """One node's formation: labelled, daemon claim, daemon start, clique entry, Ready, worker."""
        self.controller(
            start + 0.1,
            "DomainObjectObserved",
            {"kind": "Node", "name": node, "change": "ADDED", "summary": {}},
        )
        self.plugin(
            start + 0.15,
            node,
            f"d-{node}",
            "ClaimPrepareStarted",
            {"kind": "daemon", "node": node, "domain_uid": UID, "namespace": "nvidia", "name": "d"},
        )
        self.plugin(start + 0.2, node, f"d-{node}", "ClaimPrepareCompleted", {})
        self.daemon(
            start + 0.3, node, "ImexDaemonStarted", {"domain_uid": UID, "pod_name": "p", "pod_ip": ip}
        )
        self.controller(
            start + 0.4, "CliqueIndexAssigned", {"node_name": node, "index": 0, "domain_uid": UID}
        )
        self.daemon(ready - 0.1, node, "ImexReadinessChanged", {"ready": True, "output": "READY"})
        self.controller(
            ready,
            "DomainObjectObserved",
            {"kind": "Pod", "change": "MODIFIED", "summary": {"node": node, "ready": True}},
        )
        self.worker_asked(node, start + 0.25)
        self.plugin(worker, node, f"w-{node}", "ClaimPrepareCompleted", {})

    def worker_asked(self, node: str, at: float) -> None:
        self.plugin(
            at,
            node,
            f"w-{node}",
            "ClaimPrepareStarted",
            {
                "kind": "channel",
                "node": node,
                "domain_uid": UID,
                "namespace": "team",
                "name": f"job-{node}-ch-x",
            },
        )

    def refused(self, at: float, node: str, reason: str, claim: str = "") -> Line:
        return self.plugin(
            at, node, claim or f"w-{node}", "ClaimPrepareFailed", {"reason": reason, "retriable": True}
        )

    def explain(self) -> Any:
        self.controller(
            0.0, "ComputeDomainObserved", {"uid": UID, "namespace": "team", "name": "cd", "num_nodes": 2}
        )
        view = formation_view(self.lines, UID, "computedomain/team/cd")
        return explain_domain(view, History(self.lines))


def codes(explanation: Any) -> list[str]:
    return [cause.code for cause in explanation.chain]


def test_the_critical_path_is_the_slowest_nodes_steps_each_ending_in_the_event_that_ended_it() -> None:
    story = Story()
    story.node("n1", "10.0.0.1")
    story.node("n2", "10.0.0.2", ready=2.0, worker=2.4)
    out = story.explain()
    assert out.formation_s == 2.4 and out.path_node == "n2"
    assert [s.key for s in out.path] == [
        "labelled",
        "daemon-claim",
        "daemon-started",
        "listed",
        "ready",
        "worker",
    ]
    assert out.longest is not None and out.longest.key == "ready"
    assert round(out.longest.wait_s, 2) == 1.6  # listed at 0.4, Ready at 2.0
    assert all(s.evidence is not None for s in out.path)
    assert out.path[-1].evidence.source == "kubelet-plugin/n2"  # type: ignore[union-attr]
    assert out.path[-1].evidence.type == "ClaimPrepareCompleted"  # type: ignore[union-attr]
    text = "\n".join(out.text())
    assert "formed in 2.40 s" in text and "<- longest wait" in text
    assert "[kubelet-plugin/n2 #" in text


def test_imex_restarted_for_a_peer_change_is_traced_to_the_node_that_joined() -> None:
    story = Story()
    story.node("n1", "10.0.0.1", start=0.0, ready=3.0, worker=3.2)
    story.node("n2", "10.0.0.2", start=1.5, ready=2.0, worker=2.2)
    story.daemon(
        2.1, "n1", "ImexPeersChanged", {"mode": "ip", "added": ["10.0.0.2"], "action": "restarted IMEX"}
    )
    story.daemon(2.15, "n1", "ImexStarted", {"pid": 2, "reason": "peers changed (IP mode)", "attempt": 2})
    out = story.explain()
    assert out.path_node == "n1" and out.longest is not None and out.longest.key == "ready"
    assert codes(out) == ["daemon-not-ready", "imex-peer-change", "node-joined"]
    assert "IMEX restarted at 06:00:02.1" in out.chain[1].text
    assert "when n2 joined (its daemon started at 06:00:01.8)" in out.chain[2].text
    assert out.chain[2].evidence is not None and out.chain[2].evidence.source == f"daemon/n2/{UID}"


def test_a_worker_refused_while_its_node_was_not_ready_is_traced_through_its_daemon_to_imex() -> None:
    story = Story()
    story.node("n1", "10.0.0.1")
    story.node("n2", "10.0.0.2", ready=1.0, worker=4.0)
    for at in (0.3, 1.5, 2.5):
        story.refused(at, "n2", "current node not ready in ComputeDomain")
    out = story.explain()
    assert out.longest is not None and out.longest.key == "worker"
    assert codes(out)[:2] == ["node-not-ready", "daemon-not-ready"]
    assert "(3 refusals over 3.70 s)" in out.chain[0].text
    assert "its IMEX daemon turned Ready only at 06:00:01.0" in out.chain[1].text
    assert out.chain[1].evidence is not None and out.chain[1].evidence.source == CONTROLLER


def test_a_daemon_that_turns_ready_late_is_the_cause_when_no_restart_explains_it() -> None:
    story = Story()
    story.node("n1", "10.0.0.1")
    story.node("n2", "10.0.0.2", ready=3.0, worker=3.1)
    out = story.explain()
    assert codes(out) == ["daemon-not-ready"]
    assert "IMEX answered READY at 06:00:02.9" in out.chain[0].text


def test_imex_that_crashed_during_the_wait_is_named() -> None:
    story = Story()
    story.node("n1", "10.0.0.1", ready=3.0, worker=3.1)
    story.daemon(
        1.0,
        "n1",
        "ImexExited",
        {"pid": 1, "exit_code": 1, "signal": None, "expected": False, "reason": "boom"},
    )
    out = story.explain()
    assert "imex-crashed" in codes(out)


def test_exhausted_channels_are_traced_to_the_controllers_record() -> None:
    story = Story()
    story.node("n1", "10.0.0.1", worker=5.0)
    story.refused(1.5, "n1", "waiting for an IMEX channel for ComputeDomain team/cd in clique c1")
    story.controller(
        0.5,
        "ImexChannelsExhausted",
        {"clique_id": "c1", "domain_uid": UID, "namespace": "team", "name": "cd", "channel_count": 4},
    )
    out = story.explain()
    assert codes(out)[:2] == ["channels-exhausted", "channels-exhausted"]
    assert "every channel of clique c1 (1 to 3; 0 is never handed out) was held by other domains" in (
        out.chain[1].text
    )


def test_the_refusals_that_held_a_claim_longest_come_first_and_the_last_ones_after() -> None:
    """Waiting 2 s for a channel, then refused once more because the shared daemon was not ready yet: the
    channel is the cause, and the last refusal is told after it."""
    story = Story()
    story.node("n1", "10.0.0.1", worker=3.0)
    for at in (0.5, 1.0, 1.5, 2.0):
        story.refused(at, "n1", "waiting for an IMEX channel for ComputeDomain team/cd in clique c1")
    story.refused(2.6, "n1", "the shared IMEX daemon on this node is not ready (clique c1)")
    out = story.explain()
    assert codes(out)[0] == "channels-exhausted"
    assert "(4 refusals over 2.10 s)" in out.chain[0].text
    assert out.chain[-1].code == "daemon-not-ready"
    assert "shared IMEX daemon on this node is not ready" in out.chain[-1].text


def test_a_fenced_stale_prepare_is_named() -> None:
    story = Story()
    story.node("n1", "10.0.0.1", worker=3.0)
    story.plugin(1.5, "n1", "w-n1", "ClaimPrepareFenced", {"reason": "the claim was unprepared meanwhile"})
    assert codes(story.explain())[0] == "prepare-fenced"


def test_a_controller_failover_during_a_controller_step_is_named() -> None:
    story = Story()
    story.node("n1", "10.0.0.1", start=2.0, ready=3.0, worker=3.1)
    story.add(
        1.0,
        "controller/cdctl-controller-1",
        "lease/nvidia/cdctl-controller",
        "LeadershipAcquired",
        {"identity": "b", "previous_holder": "a", "how": "expired", "silent_s": 1.5},
    )
    out = story.explain()
    assert out.longest is not None and out.longest.key == "labelled"
    assert "controller-failover" in codes(out)
    assert "b took the Lease from a (expired, 1.5 s" in next(
        c.text for c in out.chain if c.code == "controller-failover"
    )


def test_api_errors_throttling_and_admission_refusals_of_the_controller_are_told_apart() -> None:
    story = Story()
    story.node("n1", "10.0.0.1", start=3.0, ready=4.0, worker=4.1)
    for at, error in (
        (0.5, "429 Too Many Requests"),
        (1.0, "admission denied the request: ValidatingAdmissionPolicy x"),
        (1.5, "(500) Internal Server Error"),
    ):
        story.controller(
            at, "DomainActionFailed", {"action": "create", "kind": "DaemonSet", "name": "ds", "error": error}
        )
    assert codes(story.explain()) == ["api-throttled", "admission-refused", "api-error"]


def test_a_node_whose_plugin_started_again_mid_formation_is_a_node_lost() -> None:
    story = Story()
    story.node("n1", "10.0.0.1", worker=4.0)
    story.add(0.0, "kubelet-plugin/n1", "plugin/n1", "PluginStarted", {"node": "n1"})
    story.add(2.0, "kubelet-plugin/n1", "plugin/n1", "PluginStarted", {"node": "n1"})
    assert "node-lost" in codes(story.explain())


def test_fabric_and_clique_refusals_are_classified() -> None:
    assert classify("NVLink fabric not ready on this node: state IN_PROGRESS") == "fabric-degraded"
    assert classify("the shared IMEX daemon on this node is not ready (clique c1)") == "daemon-not-ready"
    assert classify("claim belongs to clique c2, node is in clique c1") == "clique-mismatch"
    assert (
        classify("IMEX channel 3 is still held on this node by claim a/b (u) of ComputeDomain d")
        == "channel-held"
    )
    assert classify("nothing known") == ""
    assert set(code for code in CAUSES) >= {"imex-peer-change", "node-lost", "prepare-late"}


def test_a_domain_not_formed_says_what_the_node_furthest_behind_waits_for() -> None:
    story = Story()
    story.node("n1", "10.0.0.1")
    story.controller(
        0.1, "DomainObjectObserved", {"kind": "Node", "name": "n2", "change": "ADDED", "summary": {}}
    )
    story.worker_asked("n2", 0.3)
    story.refused(0.4, "n2", "NVLink fabric not ready on this node: IN_PROGRESS", claim="w-n2")
    story.refused(5.0, "n2", "NVLink fabric not ready on this node: IN_PROGRESS", claim="w-n2")
    out = story.explain()
    assert out.formation_s is None and out.path_node == "n2"
    assert any("n2 waits for: daemon claim prepared" in text for text, _ in out.facts)


def test_a_claim_still_waiting_says_its_last_error_how_long_and_for_what() -> None:
    story = Story()
    story.worker_asked("n1", 1.0)
    story.refused(1.1, "n1", "current node not ready in ComputeDomain")
    last = story.refused(4.0, "n1", "current node not ready in ComputeDomain")
    out = explain_claim(story.lines, "w-n1", "resourceclaim/team/x", History(story.lines))
    assert out.waiting_for == "node-not-ready"
    text = "\n".join(out.text())
    assert "still waiting after 3.00 s and 2 refusals" in text
    assert (
        "last error at 06:00:04.0: current node not ready in ComputeDomain"
        f"  [kubelet-plugin/n1 #{last.event.position} ClaimPrepareFailed]" in text
    )
    assert out.to_json()["waiting_for"] == "node-not-ready"


def test_a_node_lists_what_it_served_and_what_went_wrong_there() -> None:
    story = Story()
    story.node("n1", "10.0.0.1")
    story.daemon(
        0.9,
        "n1",
        "ImexExited",
        {"pid": 1, "exit_code": 137, "signal": "SIGKILL", "expected": False, "reason": "x"},
    )
    out = explain_node(story.lines, "n1", "node/n1")
    text = "\n".join(out.text())
    assert "node n1: 1 ComputeDomain, 2 claims" in text
    assert "IMEX exited (killed by SIGKILL): x" in text
    assert "claim team/job-n1-ch-x (channel): prepared at" in text


def test_a_fabric_not_ready_during_the_wait_is_named_with_when_it_began_and_ended() -> None:
    story = Story()
    story.node("n1", "10.0.0.1", worker=3.0)
    fabric = "kubelet-plugin/n1"
    story.add(
        0.0,
        fabric,
        "plugin/n1",
        "FabricStateChanged",
        {"node": "n1", "ready": False, "pending": "GPU 0: IN_PROGRESS"},
    )
    story.add(
        2.5, fabric, "plugin/n1", "FabricStateChanged", {"node": "n1", "ready": True, "clique_id": "c1"}
    )
    out = story.explain()
    [cause] = [c for c in out.chain if c.code == "fabric-degraded"]
    assert "not ready from 06:00:00.0 until 06:00:02.5: GPU 0: IN_PROGRESS" in cause.text


def test_a_plugin_that_restarted_for_a_new_clique_is_a_clique_change_not_a_lost_node() -> None:
    story = Story()
    story.node("n1", "10.0.0.1", worker=4.0)
    story.add(0.0, "kubelet-plugin/n1", "plugin/n1", "PluginStarted", {"node": "n1", "clique_id": "c1"})
    story.add(2.0, "kubelet-plugin/n1", "plugin/n1", "PluginStarted", {"node": "n1", "clique_id": "c2"})
    out = story.explain()
    assert "clique-mismatch" in codes(out) and "node-lost" not in codes(out)
    assert "changed from c1 to c2: its plugin restarted at 06:00:02.0" in " ".join(c.text for c in out.chain)
    node = "\n".join(explain_node(story.lines, "n1", "node/n1").text())
    assert "the NVLink clique of n1 changed from c1 to c2" in node
