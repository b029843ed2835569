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
Pods never complete in the simulated cluster, so `succeeded` stays 0. Used by the rack scenario
(cdctl.sim.rack.launch) via a ControllerLoop and by the integration tests.
"""

from __future__ import annotations

import copy
from typing import Any

from cdctl.sim.apiserver.errors import AlreadyExists
from cdctl.sim.apiserver.resources import ResourceType
from cdctl.sim.apiserver.store import ObjectStore
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


class JobController:
    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.kinds = (JOBS, PODS)

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
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        if len(live) > parallelism:
            surplus = sorted(live, key=_removal_order)[: len(live) - parallelism]
            for pod in surplus:
                self.store.delete(
                    self.store.type_of(*PODS), pod["metadata"]["namespace"], pod["metadata"]["name"]
                )
            gone = {p["metadata"]["uid"] for p in surplus}
            live = [p for p in live if p["metadata"]["uid"] not in gone]
        indices = {p["metadata"].get("labels", {}).get(COMPLETION_INDEX_LABEL) for p in live}
        room = parallelism - len(live)
        for index in range(completions):
            if room <= 0:
                break
            if str(index) in indices:
                continue
            try:
                live.append(
                    self.store.create(
                        self.store.type_of(*PODS), job["metadata"]["namespace"], self._pod_for(job, index)
                    )
                )
            except AlreadyExists:  # the previous pod of this index is still going away
                continue
            room -= 1
        status = {
            "active": len(live),
            "ready": sum(1 for p in live if pod_is_ready(p)),
            "succeeded": 0,
            "failed": 0,
        }
        if {k: (job.get("status") or {}).get(k) for k in status} != status:
            jobs = self.store.type_of(*JOBS)
            latest = self.store.get(jobs, job["metadata"]["namespace"], job["metadata"]["name"])
            latest["status"] = {**(latest.get("status") or {}), **status}
            self.store.update(
                jobs,
                latest["metadata"]["namespace"],
                latest["metadata"]["name"],
                latest,
                subresource="status",
            )

    def _pod_for(self, job: dict[str, Any], index: int) -> dict[str, Any]:
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
                "name": f"{name}-{index}",
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
