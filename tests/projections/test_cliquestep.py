"""The clique step of a formation (cdctl.projections.cliquestep): per node, listed after its daemon started
and Ready after IMEX answered READY (the last answer before the Ready seen), with medians and maxima; a node
without both marks counts in neither."""

from __future__ import annotations

from cdctl.projections.cliquestep import clique_step
from cdctl.projections.formation import formation_view
from tests.projections.test_explain import UID, Story


def test_listed_after_start_and_ready_after_imex_per_node_with_median_and_maximum() -> None:
    story = Story()
    story.node("n1", "10.0.0.1", start=0.0, ready=1.0)  # started 0.3, listed 0.4; READY 0.9, Ready 1.0
    story.node("n2", "10.0.0.2", start=1.0, ready=2.5)  # started 1.3, listed 1.4; READY 2.4, Ready 2.5
    story.node("n3", "10.0.0.3", start=2.0, ready=3.2)
    story.daemon(
        3.15, "n3", "ImexReadinessChanged", {"ready": True, "output": "READY"}
    )  # READY again: counts
    story.controller(0.0, "ComputeDomainObserved", {"uid": UID, "namespace": "team", "name": "cd"})
    view = formation_view(story.lines, UID, "computedomain/team/cd")
    step = clique_step(view, story.lines)
    assert {n: round(s, 3) for n, s in step.listed_after_start_s.items()} == {"n1": 0.1, "n2": 0.1, "n3": 0.1}
    assert {n: round(s, 3) for n, s in step.ready_after_imex_s.items()} == {"n1": 0.1, "n2": 0.1, "n3": 0.05}
    summary = step.summary()
    assert summary["ready_after_imex_median_ms"] == 100.0 and summary["ready_after_imex_max_ms"] == 100.0
    assert summary["listed_after_start_nodes"] == 3


def test_a_node_without_both_marks_is_left_out() -> None:
    story = Story()
    story.node("n1", "10.0.0.1")
    story.controller(0.0, "ComputeDomainObserved", {"uid": UID, "namespace": "team", "name": "cd"})
    lines = [ln for ln in story.lines if ln.event.type != "ImexReadinessChanged"]
    step = clique_step(formation_view(lines, UID, "computedomain/team/cd"), lines)
    assert step.ready_after_imex_s == {} and "n1" in step.listed_after_start_s
    assert step.summary()["ready_after_imex_median_ms"] is None
