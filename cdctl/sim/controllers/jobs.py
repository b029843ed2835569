"""Stand-in for Kubernetes' Job controller (Indexed completion mode), so the rack can run the seeds' jobs.

`serve_jobs(store)` adds `batch/v1` Jobs to the simulated API server; `JobController.reconcile` gives each Job
that is not being deleted one pod per completion index (`<job>-<index>`, at most `parallelism` at a time,
labelled `batch.kubernetes.io/job-name` and `batch.kubernetes.io/job-completion-index`, owned by the Job with
a controller reference so that deleting the Job collects its pods) and keeps `status.active` / `status.ready`.
`spec.parallelism` may change while the Job runs, as on a real cluster: raised, the lowest indices without a
pod get one; lowered, the controller deletes the surplus active pods, choosing as the Job controller's
`activePodsForRemoval` does (not the completion index): unscheduled before scheduled, Pending before
Running, not Ready before Ready, Ready for less time before Ready for longer, then the newest (the higher
index first when created in the same second). A deleted pod's index gets a new pod while parallelism allows.
Pods end as the kubelet ends them (cdctl.sim.node.runtime): an index whose pod Succeeded is done; one whose
pod Failed gets a replacement (`<job>-<index>-<n>`, where the real controller adds a random suffix) after the
Job controller's back-off, 10 s doubling per failure since the last success up to 10 minutes, on this
controller's clock (`backoff_s` for tests). Failed pods are kept and counted in `status.failed`; once more
pods failed than `spec.backoffLimit` (6 by default) the Job gets the FailureTarget condition (reason
BackoffLimitExceeded), its active pods are deleted, and it gets Failed once none is left. When every index
succeeded the Job gets SuccessCriteriaMet, then Complete. Used by the rack scenario (cdctl.sim.rack.launch)
via a ControllerLoop with a resync and by the integration tests.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable
from typing import Any

from cdctl.sim.apiserver.errors import AlreadyExists, ApiError
from cdctl.sim.apiserver.objectmeta import now_rfc3339
from cdctl.sim.apiserver.resources import ResourceType
from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.controllers.claimtemplates import pod_is_finished
from cdctl.sim.controllers.daemonsets import pod_is_ready

JOBS = ("batch", "jobs")
PODS = ("", "pods")
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


def serve_jobs(store: ObjectStore) -> None:
    """Serve batch/v1 Jobs (namespaced, with a status subresource) from this store's API server."""
    store.registry.add(
        ResourceType(
            group="batch",
            version="v1",
            plural="jobs",
            kind="Job",
            namespaced=True,
            storage_version="v1",
            status_subresource=True,
        )
    )


def _owned_by(pod: dict[str, Any], uid: str) -> bool:
    return any(
        r.get("uid") == uid and r.get("controller") for r in pod["metadata"].get("ownerReferences") or []
    )


def _ready_since(pod: dict[str, Any]) -> str:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") == "True":
            return str(condition.get("lastTransitionTime") or "")
    return ""


def _removal_order(pod: dict[str, Any]) -> tuple[Any, ...]:
    """Sort key: the pod to delete first when parallelism drops comes first (controller.ActivePods)."""
    status = pod.get("status") or {}
    phase_rank = {"Pending": 0, "Unknown": 1, "Running": 2}.get(str(status.get("phase") or "Pending"), 0)
    ready = pod_is_ready(pod)
    meta = pod["metadata"]
    index = int(str((meta.get("labels") or {}).get(COMPLETION_INDEX_LABEL) or 0))
    created = str(meta.get("creationTimestamp") or "")
    # Later timestamps first: negate by sorting on the reversed string order through a tuple of ords.
    return (
        bool((pod.get("spec") or {}).get("nodeName")),
        phase_rank,
        ready,
        _descending(_ready_since(pod)) if ready else (),
        _descending(created),
        -index,
    )


def _descending(stamp: str) -> tuple[int, ...]:
    """RFC 3339 stamps sort as strings; this key sorts them newest first."""
    return tuple(-ord(ch) for ch in stamp)


DEFAULT_BACKOFF_LIMIT = 6
POD_FAILURE_BACKOFF_S = 10.0  # the Job controller's DefaultJobPodFailureBackOff
POD_FAILURE_BACKOFF_MAX_S = 600.0  # and MaxJobPodFailureBackOff
BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
ENDING_CONDITIONS = frozenset({"FailureTarget", "Failed", "SuccessCriteriaMet", "Complete"})


def _ended_conditions(job: dict[str, Any]) -> bool:
    """The Job has failed or succeeded (or is about to): it makes no more pods."""
    return any(
        c.get("type") in ENDING_CONDITIONS and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def failure_backoff(failures: int, base_s: float = POD_FAILURE_BACKOFF_S) -> float:
    """The wait before a failed pod's replacement, after `failures` failures since the last success."""
    if failures <= 0:
        return 0.0
    return min(POD_FAILURE_BACKOFF_MAX_S, base_s * 2.0 ** (failures - 1))


def _phase(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def _index(pod: dict[str, Any]) -> str:
    return str((pod["metadata"].get("labels") or {}).get(COMPLETION_INDEX_LABEL))


def _condition(kind: str, reason: str, message: str) -> dict[str, Any]:
    stamp = now_rfc3339()
    return {"type": kind, "status": "True", "reason": reason, "message": message,
            "lastProbeTime": stamp, "lastTransitionTime": stamp}  # fmt: skip


class JobController:
    def __init__(
        self,
        store: ObjectStore,
        *,
        clock: Callable[[], float] = time.monotonic,
        backoff_s: float = POD_FAILURE_BACKOFF_S,
    ) -> None:
        self.store = store
        self.kinds = (JOBS, PODS)
        self.clock = clock
        self.backoff_s = backoff_s
        self._ended_seen: dict[str, float] = {}  # ended pod uid -> when this controller first saw it end

    def reconcile(self) -> None:
        jobs, _ = self.store.list_objects(self.store.type_of(*JOBS), copies=False)  # read only
        pods, _ = self.store.list_objects(self.store.type_of(*PODS), copies=False)
        for job in jobs:
            if not job["metadata"].get("deletionTimestamp"):
                self._sync(job, [p for p in pods if _owned_by(p, job["metadata"]["uid"])])

    def _sync(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        spec = job.get("spec") or {}
        completions = int(spec.get("completions") or 1)
        parallelism = int(spec.get("parallelism") or completions)
        ended = _ended_conditions(job)
        succeeded = [p for p in pods if _phase(p) == "Succeeded"]
        failed = [p for p in pods if _phase(p) == "Failed"]
        done = {_index(p) for p in succeeded}
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp") and not pod_is_finished(p)]
        limit = int(spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT))
        if ended or len(failed) > limit or len(done) >= completions:
            if len(failed) > limit and not ended:
                for pod in live:  # the Job has failed: its running pods are ended
                    self._delete(pod)
                live = []
            self._write_status(job, live, succeeded, failed, completions, limit)
            return
        wait = self._backoff_left(succeeded, failed)
        if len(live) > parallelism:
            surplus = sorted(live, key=_removal_order)[: len(live) - parallelism]
            for pod in surplus:
                self.store.delete(
                    self.store.type_of(*PODS), pod["metadata"]["namespace"], pod["metadata"]["name"]
                )
            gone = {p["metadata"]["uid"] for p in surplus}
            live = [p for p in live if p["metadata"]["uid"] not in gone]
        indices = {_index(p) for p in live} | done
        failures_of = {str(i): sum(1 for p in failed if _index(p) == str(i)) for i in range(completions)}
        room = parallelism - len(live)
        for index in range(completions):
            if room <= 0:
                break
            if str(index) in indices or (failures_of[str(index)] and wait > 0):
                continue
            try:
                pod = self._pod_for(job, index, failures_of[str(index)])
                live.append(self.store.create(self.store.type_of(*PODS), job["metadata"]["namespace"], pod))
            except AlreadyExists:  # the previous pod of this index is still going away
                continue
            room -= 1
        self._write_status(job, live, succeeded, failed, completions, limit)

    def _backoff_left(self, succeeded: list[dict[str, Any]], failed: list[dict[str, Any]]) -> float:
        """Seconds until a failed index may get its replacement (0: now)."""
        now = self.clock()
        for pod in (*succeeded, *failed):
            self._ended_seen.setdefault(pod["metadata"]["uid"], now)
        last_success = max((self._ended_seen[p["metadata"]["uid"]] for p in succeeded), default=float("-inf"))
        recent = [self._ended_seen[p["metadata"]["uid"]] for p in failed]
        recent = [t for t in recent if t >= last_success]
        if not recent:
            return 0.0
        return max(0.0, max(recent) + failure_backoff(len(recent), self.backoff_s) - now)

    def _delete(self, pod: dict[str, Any]) -> None:
        with contextlib.suppress(ApiError):
            self.store.delete(
                self.store.type_of(*PODS), pod["metadata"]["namespace"], pod["metadata"]["name"]
            )

    def _write_status(
        self,
        job: dict[str, Any],
        live: list[dict[str, Any]],
        succeeded: list[dict[str, Any]],
        failed: list[dict[str, Any]],
        completions: int,
        limit: int,
    ) -> None:
        status: dict[str, Any] = {
            "active": len(live),
            "ready": sum(1 for p in live if pod_is_ready(p)),
            "succeeded": len({_index(p) for p in succeeded}),
            "failed": len(failed),
        }
        conditions = list((job.get("status") or {}).get("conditions") or [])
        kinds = {c.get("type") for c in conditions}
        if len(failed) > limit and "FailureTarget" not in kinds:
            message = "Job has reached the specified backoff limit"
            conditions.append(_condition("FailureTarget", BACKOFF_LIMIT_EXCEEDED, message))
        elif status["succeeded"] >= completions and "SuccessCriteriaMet" not in kinds:
            message = "Reached expected number of succeeded pods"
            conditions.append(_condition("SuccessCriteriaMet", "CompletionsReached", message))
        kinds = {c.get("type") for c in conditions}
        if not live and "FailureTarget" in kinds and "Failed" not in kinds:
            target = next(c for c in conditions if c.get("type") == "FailureTarget")
            conditions.append({**target, "type": "Failed"})
        if not live and "SuccessCriteriaMet" in kinds and "Complete" not in kinds:
            met = next(c for c in conditions if c.get("type") == "SuccessCriteriaMet")
            conditions.append({**met, "type": "Complete"})
        if conditions:
            status["conditions"] = conditions
        current = job.get("status") or {}
        if {k: current.get(k) for k in status} == status:
            return
        jobs = self.store.type_of(*JOBS)
        latest = self.store.get(jobs, job["metadata"]["namespace"], job["metadata"]["name"])
        latest["status"] = {**(latest.get("status") or {}), **status}
        meta = latest["metadata"]
        self.store.update(jobs, meta["namespace"], meta["name"], latest, subresource="status")

    def _pod_for(self, job: dict[str, Any], index: int, failures: int = 0) -> dict[str, Any]:
        name = job["metadata"]["name"]
        template = (job.get("spec") or {}).get("template") or {}
        template_meta = template.get("metadata") or {}
        labels = {
            **(template_meta.get("labels") or {}),
            JOB_NAME_LABEL: name,
            COMPLETION_INDEX_LABEL: str(index),
        }
        return {
            "metadata": {
                "name": f"{name}-{index}" if not failures else f"{name}-{index}-{failures}",
                "labels": labels,
                "annotations": {
                    **(template_meta.get("annotations") or {}),
                    COMPLETION_INDEX_LABEL: str(index),
                },
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": name,
                        "uid": job["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": copy.deepcopy(template.get("spec") or {}),
        }
