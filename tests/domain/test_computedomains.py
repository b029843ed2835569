"""Clique index assignment, status.nodes and the global status, and the domain events' registration."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cdctl.domain.computedomains import (
    STATUS_NOT_READY,
    STATUS_READY,
    Blocked,
    ComputeDomainObserved,
    DaemonEntry,
    DaemonPod,
    assign_clique,
    blocked_since,
    desired_status,
    global_status,
    same_status,
    split_by_clique,
    status_nodes,
)
from cdctl.domain.events import registered_types


def pod(node: str, ip: str = "", clique: str | None = "c", ready: bool = False, name: str = "") -> DaemonPod:
    return DaemonPod(name or f"daemon-{node}", node, ip or f"10.0.0.{node[-1]}", clique, ready)


def test_new_daemons_get_the_smallest_free_indices_in_node_name_order() -> None:
    result = assign_clique("c", [], [pod("n2"), pod("n1"), pod("n3")], max_nodes=18)
    assert [(e.node_name, e.index) for e in result.entries] == [("n1", 0), ("n2", 1), ("n3", 2)]
    assert result.unplaced == ()


def test_an_entry_keeps_its_index_and_follows_ip_and_readiness() -> None:
    existing = [DaemonEntry("n1", "10.0.0.1", "c", 0), DaemonEntry("n2", "10.0.0.2", "c", 1)]
    result = assign_clique("c", existing, [pod("n2", ip="10.9.9.9", ready=True), pod("n3")], max_nodes=18)
    assert result.entries == (
        DaemonEntry("n3", "10.0.0.3", "c", 0, STATUS_NOT_READY),
        DaemonEntry("n2", "10.9.9.9", "c", 1, STATUS_READY),
    )


def test_the_index_of_a_departed_node_is_reused_only_after_it_left() -> None:
    first = assign_clique("c", [], [pod("n1"), pod("n2")], max_nodes=18).entries
    second = assign_clique("c", first, [pod("n2"), pod("n3")], max_nodes=18).entries
    assert {(e.node_name, e.index) for e in second} == {("n2", 1), ("n3", 0)}


def test_a_full_clique_leaves_nodes_unplaced_instead_of_sharing_an_index() -> None:
    result = assign_clique("c", [], [pod("n1"), pod("n2"), pod("n3")], max_nodes=2)
    assert [e.index for e in result.entries] == [0, 1]
    assert result.unplaced == ("n3",)


def test_duplicate_or_out_of_range_existing_indices_are_repaired() -> None:
    existing = [
        DaemonEntry("n1", "a", "c", 0),
        DaemonEntry("n2", "b", "c", 0),
        DaemonEntry("n3", "c", "c", 40),
    ]
    result = assign_clique("c", existing, [pod("n1"), pod("n2"), pod("n3")], max_nodes=18)
    assert sorted((e.node_name, e.index) for e in result.entries) == [("n1", 0), ("n2", 1), ("n3", 2)]


def test_pods_without_node_or_ip_wait_and_a_ready_replacement_speaks_for_its_node() -> None:
    pods = [
        DaemonPod("old", "n1", "10.0.0.1", "c", False),
        DaemonPod("new", "n1", "10.0.0.7", "c", True),
        DaemonPod("pending", "", "", "c", False),
    ]
    result = assign_clique("c", [], pods, max_nodes=18)
    assert result.entries == (DaemonEntry("n1", "10.0.0.7", "c", 0, STATUS_READY),)


@given(
    st.lists(st.integers(min_value=0, max_value=30), unique=True, max_size=25),
    st.lists(st.integers(min_value=0, max_value=30), unique=True, max_size=25),
)
def test_indices_are_unique_bounded_and_stable_for_surviving_nodes(
    before: list[int], after: list[int]
) -> None:
    max_nodes = 18
    first = assign_clique("c", [], [pod(f"n{i:02d}") for i in before], max_nodes)
    second = assign_clique("c", first.entries, [pod(f"n{i:02d}") for i in after], max_nodes)
    for result in (first, second):
        indices = [e.index for e in result.entries]
        assert len(indices) == len(set(indices))
        assert all(0 <= i < max_nodes for i in indices)
        assert len(result.entries) == min(max_nodes, len(result.entries) + len(result.unplaced))
    old = {e.node_name: e.index for e in first.entries}
    for entry in second.entries:
        if entry.node_name in old:
            assert entry.index == old[entry.node_name]


def test_split_by_clique_separates_fabric_non_fabric_and_unlabelled() -> None:
    split = split_by_clique(
        [pod("n1", clique="x"), pod("n2", clique=""), pod("n3", clique=None), pod("n4", clique="x")]
    )
    assert {k: [p.node_name for p in v] for k, v in split.fabric.items()} == {"x": ["n1", "n4"]}
    assert [p.node_name for p in split.non_fabric] == ["n2"]
    assert [p.node_name for p in split.unlabelled] == ["n3"]


def test_status_nodes_adds_non_fabric_daemons_with_index_minus_one() -> None:
    entries = [DaemonEntry("n1", "10.0.0.1", "x", 0, STATUS_READY)]
    nodes = status_nodes(entries, [pod("n2", clique="", ready=True)])
    assert nodes == [
        DaemonEntry("n2", "10.0.0.2", "", -1, STATUS_READY),
        DaemonEntry("n1", "10.0.0.1", "x", 0, STATUS_READY),
    ]


def test_global_status_follows_num_nodes_and_every_node_readiness() -> None:
    ready = DaemonEntry("n1", "ip", "x", 0, STATUS_READY)
    not_ready = DaemonEntry("n2", "ip", "x", 1, STATUS_NOT_READY)
    assert global_status([], 0) == STATUS_READY
    assert global_status([], 1) == STATUS_NOT_READY
    assert global_status([ready], 1) == STATUS_READY
    assert global_status([ready, not_ready], 1) == STATUS_NOT_READY
    assert global_status([ready], 2) == STATUS_NOT_READY


def test_same_status_ignores_order_and_notices_any_entry_change() -> None:
    nodes = [DaemonEntry("n1", "a", "x", 0, STATUS_READY), DaemonEntry("n2", "b", "x", 1, STATUS_READY)]
    desired = desired_status(nodes, 2)
    assert desired["status"] == STATUS_READY
    reordered = {"status": STATUS_READY, "nodes": list(reversed(desired["nodes"]))}
    assert same_status(reordered, desired)
    assert not same_status({"status": STATUS_NOT_READY, "nodes": desired["nodes"]}, desired)
    changed = {"status": STATUS_READY, "nodes": [desired["nodes"][0], {**desired["nodes"][1], "index": 5}]}
    assert not same_status(changed, desired)
    assert not same_status(None, desired)
    assert same_status(None, desired_status([], 1)) is False
    assert same_status({"status": STATUS_NOT_READY}, desired_status([], 1))


def test_entries_round_trip_through_both_json_forms() -> None:
    entry = DaemonEntry("n1", "10.0.0.1", "x", 3, STATUS_READY)
    assert DaemonEntry.from_clique_json(entry.to_clique_json()) == entry
    assert DaemonEntry.from_status_json(entry.to_status_json()) == entry


def test_domain_events_are_registered_and_serialise() -> None:
    assert registered_types()["ComputeDomainObserved"] is ComputeDomainObserved
    event = ComputeDomainObserved("u", "ns", "cd", "7", "ADDED", num_nodes=2)
    assert event.to_data()["num_nodes"] == 2


def test_a_blocked_domain_is_not_ready_with_the_reason_whatever_its_daemons_say() -> None:
    ready = [DaemonEntry("n1", "a", "x", 0, STATUS_READY)]
    blocked = Blocked("ResourceClaimTemplateConflict", "team-a/t is taken", "2026-11-25T06:00:00Z")
    desired = desired_status(ready, 1, blocked)
    assert desired["status"] == STATUS_NOT_READY and desired["nodes"] == desired_status(ready, 1)["nodes"]
    assert desired["conditions"] == [
        {
            "type": "Ready",
            "status": "False",
            "reason": "ResourceClaimTemplateConflict",
            "message": "team-a/t is taken",
            "lastTransitionTime": "2026-11-25T06:00:00Z",
        }
    ]
    assert "conditions" not in desired_status(ready, 1)
    # The transition time does not make a change; the reason, the message or the condition's end do.
    later = Blocked(blocked.reason, blocked.message, "2026-11-25T07:00:00Z")
    assert same_status(desired, desired_status(ready, 1, later))
    assert not same_status(desired, desired_status(ready, 1, Blocked(blocked.reason, "other", blocked.since)))
    assert not same_status({**desired, "status": STATUS_READY}, desired_status(ready, 1))
    assert not same_status(
        {"status": STATUS_NOT_READY, "nodes": desired["nodes"]}, desired_status(ready, 1, blocked)
    )


def test_the_transition_time_is_kept_while_the_reason_lasts() -> None:
    current = {"conditions": [{"type": "Ready", "reason": "A", "lastTransitionTime": "t0"}]}
    assert blocked_since(current, "A", "t1") == "t0"
    assert blocked_since(current, "B", "t1") == "t1"
    assert blocked_since(None, "A", "t1") == "t1"
