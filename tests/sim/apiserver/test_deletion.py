"""Pod deletion as a real v1.36 API server does it: graceful on a node, at once otherwise, only shortened."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cdctl.sim.apiserver.deletion import PENDING, graceful_step, pod_grace_period
from cdctl.sim.apiserver.errors import NotFound
from cdctl.sim.apiserver.store import ObjectStore

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def _pod(node: str = "n1", phase: str = "Running", grace: int | None = 30, **metadata: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {
        "metadata": {"name": "p", "namespace": "default", **metadata},
        "spec": spec,
        "status": {"phase": phase},
    }


@pytest.mark.parametrize(
    ("pod", "requested", "expected"),
    [
        (_pod(), None, 30),  # the pod's own terminationGracePeriodSeconds
        (_pod(), 5, 5),  # DeleteOptions.gracePeriodSeconds wins
        (_pod(grace=None), None, 0),
        (_pod(node=""), 30, 0),  # no node runs it
        (_pod(phase="Succeeded"), None, 0),  # nothing runs any more
        (_pod(phase="Failed"), 30, 0),
        (_pod(), -3, 1),  # negative: 1 s, as the pod strategy has it
    ],
)
def test_the_grace_period_of_a_pod_delete(pod: dict[str, Any], requested: int | None, expected: int) -> None:
    assert pod_grace_period(pod, requested) == expected


def test_a_pod_on_a_node_is_marked_until_its_grace_period_ends() -> None:
    step = graceful_step(_pod(generation=1), None, NOW)
    assert isinstance(step, dict)
    metadata = step["metadata"]
    assert metadata["deletionTimestamp"] == "2026-11-29T12:00:30Z"
    assert (metadata["deletionGracePeriodSeconds"], metadata["generation"]) == (30, 2)
    assert graceful_step(_pod(node=""), None, NOW) is None, "deleted at once"


def test_a_second_delete_may_only_shorten_the_grace_period() -> None:
    marked = _pod(deletionTimestamp="2026-11-29T12:00:30Z", deletionGracePeriodSeconds=30, generation=2)
    assert graceful_step(marked, None, NOW + timedelta(seconds=3)) is PENDING
    assert graceful_step(marked, 60, NOW + timedelta(seconds=3)) is PENDING
    shorter = graceful_step(marked, 10, NOW + timedelta(seconds=3))
    assert isinstance(shorter, dict)
    assert shorter["metadata"]["deletionTimestamp"] == "2026-11-29T12:00:10Z", "from when the deletion began"
    assert (shorter["metadata"]["deletionGracePeriodSeconds"], shorter["metadata"]["generation"]) == (10, 2)
    assert graceful_step(marked, 0, NOW) is None, "shortened to nothing: deleted now"
    held = graceful_step({**marked, "metadata": {**marked["metadata"], "finalizers": ["f"]}}, 0, NOW)
    assert isinstance(held, dict) and held["metadata"]["deletionGracePeriodSeconds"] == 0, (
        "finalizers hold it"
    )


def _store_with_pod(**metadata: Any) -> ObjectStore:
    store = ObjectStore()
    body = _pod(**metadata)
    body.pop("status")
    store.create(store.type_of("", "pods"), "default", body)
    return store


def test_the_store_keeps_a_deleted_pod_for_its_kubelet_and_removes_it_on_a_grace_period_of_0() -> None:
    store = _store_with_pod()
    pods = store.type_of("", "pods")
    watcher = store.watch(pods)
    answered = store.delete(pods, "default", "p")
    assert answered["metadata"]["deletionGracePeriodSeconds"] == 30
    assert store.get(pods, "default", "p")["metadata"]["deletionTimestamp"]
    again = store.delete(pods, "default", "p", grace_period_s=60)
    assert again["metadata"]["resourceVersion"] == answered["metadata"]["resourceVersion"], "nothing changed"
    store.delete(pods, "default", "p", grace_period_s=0)  # the kubelet's last step
    with pytest.raises(NotFound):
        store.get(pods, "default", "p")
    kinds = [watcher.queue.get_nowait().type for _ in range(watcher.queue.qsize())]
    assert kinds == ["MODIFIED", "DELETED"]


def test_removing_the_last_finalizer_does_not_cut_a_grace_period_short() -> None:
    store = _store_with_pod(finalizers=["example.com/hold"])
    pods = store.type_of("", "pods")
    store.delete(pods, "default", "p")
    pod = store.get(pods, "default", "p")
    pod["metadata"]["finalizers"] = []
    store.update(pods, "default", "p", pod)
    assert store.get(pods, "default", "p")["metadata"]["deletionGracePeriodSeconds"] == 30, (
        "the kubelet ends it"
    )
    store.delete(pods, "default", "p", grace_period_s=0)
    assert not store.exists_name(pods, "default", "p")


def test_a_pod_on_no_node_goes_at_once() -> None:
    store = _store_with_pod(node="")
    pods = store.type_of("", "pods")
    store.delete(pods, "default", "p")
    assert not store.exists_name(pods, "default", "p")
