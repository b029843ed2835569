"""The Job stand-in: one pod per index up to parallelism, and parallelism changed while the Job runs."""

from __future__ import annotations

from typing import Any

from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.controllers.jobs import COMPLETION_INDEX_LABEL, JobController, serve_jobs


def _job(store: ObjectStore, completions: int, parallelism: int) -> dict[str, Any]:
    body = {
        "metadata": {"name": "train"},
        "spec": {
            "completions": completions,
            "parallelism": parallelism,
            "completionMode": "Indexed",
            "template": {"spec": {"containers": [{"name": "c", "image": "img"}]}},
        },
    }
    return store.create(store.type_of("batch", "jobs"), "default", body)


def _indices(store: ObjectStore) -> list[int]:
    """The completion indices of the pods not being deleted."""
    pods, _ = store.list_objects(store.type_of("", "pods"), "default")
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return sorted(int(p["metadata"]["labels"][COMPLETION_INDEX_LABEL]) for p in live)


def _removed_by_their_kubelets(store: ObjectStore) -> None:
    """What a kubelet does last for a pod being deleted: removes it (grace period 0)."""
    pods = store.type_of("", "pods")
    for pod in store.list_objects(pods, "default")[0]:
        if pod["metadata"].get("deletionTimestamp"):
            store.delete(pods, "default", pod["metadata"]["name"], grace_period_s=0)


def _scale(store: ObjectStore, parallelism: int) -> None:
    jobs = store.type_of("batch", "jobs")
    job = store.get(jobs, "default", "train")
    job["spec"]["parallelism"] = parallelism
    store.update(jobs, "default", "train", job)


def _run(store: ObjectStore, name: str, *, node: str = "n", ready: bool = True, since: str = "") -> None:
    pods = store.type_of("", "pods")
    pod = store.get(pods, "default", name)
    pod["spec"]["nodeName"] = node
    pod = store.update(pods, "default", name, pod)
    flag = "True" if ready else "False"
    pod["status"] = {
        "phase": "Running",
        "conditions": [
            {"type": "Ready", "status": flag, "lastTransitionTime": since or "2026-01-01T00:00:00Z"}
        ],
    }
    store.update(pods, "default", name, pod, subresource="status")


def _store() -> ObjectStore:
    store = ObjectStore()
    serve_jobs(store)
    return store


def test_lowering_parallelism_deletes_the_newest_running_pods_and_raising_it_refills_the_lowest_indices() -> (
    None
):
    store = _store()
    _job(store, completions=4, parallelism=4)
    jobs = JobController(store)
    jobs.reconcile()
    for index in range(4):
        _run(store, f"train-{index}")
    _scale(store, 2)
    jobs.reconcile()
    assert _indices(store) == [0, 1]
    status = store.get(store.type_of("batch", "jobs"), "default", "train")["status"]
    assert (status["active"], status["ready"]) == (2, 2)
    _scale(store, 4)
    jobs.reconcile()
    assert _indices(store) == [0, 1], "the pods of indices 2 and 3 are still terminating (fixed names here)"
    _removed_by_their_kubelets(store)
    jobs.reconcile()
    assert _indices(store) == [0, 1, 2, 3]


def test_lowering_parallelism_removes_unscheduled_then_not_ready_pods_before_ready_ones() -> None:
    store = _store()
    _job(store, completions=4, parallelism=4)
    jobs = JobController(store)
    jobs.reconcile()
    _run(store, "train-0", since="2026-01-01T00:00:05Z")
    _run(store, "train-1", ready=False)
    _run(store, "train-2", since="2026-01-01T00:00:01Z")  # Ready for longer than train-0
    # train-3 stays unscheduled
    _scale(store, 3)
    jobs.reconcile()
    assert _indices(store) == [0, 1, 2]
    _scale(store, 2)
    jobs.reconcile()
    assert _indices(store) == [0, 2]
    _scale(store, 1)
    jobs.reconcile()
    assert _indices(store) == [2], "the pod Ready for less time goes first"


def test_a_deleted_pod_is_replaced_under_its_index() -> None:
    store = _store()
    _job(store, completions=3, parallelism=3)
    jobs = JobController(store)
    jobs.reconcile()
    first = store.get(store.type_of("", "pods"), "default", "train-1")["metadata"]["uid"]
    store.delete(store.type_of("", "pods"), "default", "train-1")
    jobs.reconcile()
    assert _indices(store) == [0, 1, 2]
    assert store.get(store.type_of("", "pods"), "default", "train-1")["metadata"]["uid"] != first


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _end(store: ObjectStore, name: str, phase: str) -> None:
    pods = store.type_of("", "pods")
    pod = store.get(pods, "default", name)
    pod["status"] = {"phase": phase}
    store.update(pods, "default", name, pod, subresource="status")


def _names(store: ObjectStore) -> list[str]:
    pods, _ = store.list_objects(store.type_of("", "pods"), "default")
    return sorted(p["metadata"]["name"] for p in pods)


def _status(store: ObjectStore) -> dict[str, Any]:
    return dict(store.get(store.type_of("batch", "jobs"), "default", "train")["status"])


def test_a_failed_pod_is_kept_and_replaced_after_the_job_controllers_back_off() -> None:
    store, clock = _store(), Clock()
    _job(store, completions=2, parallelism=2)
    jobs = JobController(store, clock=clock)
    jobs.reconcile()
    _end(store, "train-0", "Failed")
    jobs.reconcile()
    assert _names(store) == ["train-0", "train-1"], "the first failure waits 10 s for its replacement"
    assert (_status(store)["active"], _status(store)["failed"]) == (1, 1)
    clock.now += 10
    jobs.reconcile()
    assert _names(store) == ["train-0", "train-0-1", "train-1"], "kept, and replaced under a new name"
    _end(store, "train-0-1", "Failed")
    jobs.reconcile()
    clock.now += 19
    jobs.reconcile()
    assert "train-0-2" not in _names(store), "the second failure since the last success waits 20 s"
    clock.now += 1
    jobs.reconcile()
    assert "train-0-2" in _names(store)


def test_a_job_whose_pods_failed_more_than_its_backoff_limit_fails_and_ends_its_pods() -> None:
    store, clock = _store(), Clock()
    job = _job(store, completions=2, parallelism=2)
    jobs_type = store.type_of("batch", "jobs")
    job["spec"]["backoffLimit"] = 1
    store.update(jobs_type, "default", "train", job)
    jobs = JobController(store, clock=clock, backoff_s=0.0)
    jobs.reconcile()
    _end(store, "train-0", "Failed")
    jobs.reconcile()
    _end(store, "train-0-1", "Failed")
    jobs.reconcile()
    assert _names(store) == ["train-0", "train-0-1"], "train-1 ended with the Job, failed pods kept"
    status = _status(store)
    assert (status["active"], status["failed"]) == (0, 2)
    failed = {c["type"]: c for c in status["conditions"]}
    assert failed["Failed"]["reason"] == failed["FailureTarget"]["reason"] == "BackoffLimitExceeded"
    clock.now += 3_600
    jobs.reconcile()
    assert _names(store) == ["train-0", "train-0-1"], "a failed Job makes no more pods"


def test_a_job_whose_indices_all_succeeded_completes() -> None:
    store = _store()
    _job(store, completions=2, parallelism=2)
    jobs = JobController(store)
    jobs.reconcile()
    _end(store, "train-0", "Succeeded")
    jobs.reconcile()
    assert _names(store) == ["train-0", "train-1"], "a succeeded index gets no new pod"
    _end(store, "train-1", "Succeeded")
    jobs.reconcile()
    status = _status(store)
    assert (status["active"], status["succeeded"]) == (0, 2)
    assert [c["type"] for c in status["conditions"]] == ["SuccessCriteriaMet", "Complete"]
