"""The controller's projection: a pure fold into one row per domain; typed, cached reads over it."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from cdctl.controller.view import DomainProjection, DomainView
from cdctl.domain.events import RecordedEvent
from cdctl.projections.runner import fold_into

UID = "u-1"


def recorded(position: int, type_: str, data: dict[str, Any]) -> RecordedEvent:
    return RecordedEvent(position, f"domain/{UID}", position, type_, 1, data, {}, datetime.now(UTC), "h")


def pod(change: str, uid: str = "p1", ready: bool = True) -> dict[str, Any]:
    return {
        "domain_uid": UID, "kind": "Pod", "namespace": "drv", "name": "d1", "uid": uid,
        "resource_version": "1", "change": change,
        "summary": {"node": "n1", "ip": "10.0.0.1", "clique": "c", "ready": ready},
    }  # fmt: skip


CD = {"uid": UID, "namespace": "ns", "name": "cd", "resource_version": "1", "change": "ADDED", "num_nodes": 1}


def test_the_fold_replaces_rows_and_never_edits_them() -> None:
    projection = DomainProjection()
    rows: dict[Any, Any] = {}
    fold_into(
        projection,
        rows,
        [recorded(1, "ComputeDomainObserved", CD), recorded(2, "DomainObjectObserved", pod("ADDED"))],
    )
    before = rows[(UID,)]
    frozen = copy.deepcopy(before)
    fold_into(projection, rows, [recorded(3, "DomainObjectObserved", pod("MODIFIED", ready=False))])
    assert before == frozen  # the old row object is untouched: readers holding it see a consistent snapshot
    assert rows[(UID,)]["objects"]["Pod/drv/d1"]["summary"]["ready"] is False


def test_a_deletion_of_a_recreated_objects_predecessor_keeps_the_successor() -> None:
    projection = DomainProjection()
    rows: dict[Any, Any] = {}
    fold_into(
        projection,
        rows,
        [
            recorded(1, "ComputeDomainObserved", CD),
            recorded(2, "DomainObjectObserved", pod("ADDED", uid="new")),
        ],
    )
    fold_into(projection, rows, [recorded(3, "DomainObjectObserved", pod("DELETED", uid="old"))])
    assert "Pod/drv/d1" in rows[(UID,)]["objects"]


def test_a_domain_with_nothing_left_disappears_and_outcomes_alone_create_nothing() -> None:
    projection = DomainProjection()
    rows: dict[Any, Any] = {}
    failed = {
        "domain_uid": UID,
        "action": "create",
        "kind": "DaemonSet",
        "namespace": "",
        "name": "x",
        "error": "e",
    }
    fold_into(projection, rows, [recorded(1, "DomainActionFailed", failed)])
    assert rows == {}
    fold_into(
        projection,
        rows,
        [recorded(2, "ComputeDomainObserved", CD), recorded(3, "DomainActionFailed", failed)],
    )
    assert rows[(UID,)]["last_error"] == "create DaemonSet: e"
    fold_into(projection, rows, [recorded(4, "ComputeDomainObserved", {**CD, "change": "DELETED"})])
    assert rows == {}


def test_typed_reads_are_cached_until_the_row_changes() -> None:
    projection = DomainProjection()
    rows: dict[Any, Any] = {}
    view = DomainView(lambda: rows)
    fold_into(
        projection,
        rows,
        [recorded(1, "ComputeDomainObserved", CD), recorded(2, "DomainObjectObserved", pod("ADDED"))],
    )
    first = view.domain(UID)
    assert view.domain(UID) is first
    assert first.cd is not None and first.cd.num_nodes == 1
    assert [p.node_name for _, p in first.daemon_pods()] == ["n1"]
    fold_into(projection, rows, [recorded(3, "DomainObjectObserved", pod("DELETED"))])
    assert view.domain(UID) is not first and view.domain(UID).daemon_pods() == []
    assert view.uids() == [UID]
    assert view.domain("unknown").empty
