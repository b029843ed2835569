"""How the simulated kubelet ends a deleted pod, as a real v1.36 kubelet does.

The API server marks a pod on a node with `deletionTimestamp` and `deletionGracePeriodSeconds`
(cdctl.sim.apiserver.deletion); the kubelet sees it, stops the pod's containers (SIGTERM, then SIGKILL once
the deletion's grace period is over: cdctl.sim.node.runtime's `stop_grace_s`), unprepares its claims, writes
its final status (phase Succeeded when its container exited 0, else Failed, with the container's terminated
state; since v1.27 a kubelet sets a deleted pod's terminal phase) and then deletes it with a grace period of 0
and its uid as precondition (the status manager's last step), which removes it from the API. A pod nothing
ran for ends Failed too, its container terminated with ContainerStatusUnknown (exit code 137), as the
kubelet reports a container it never started in a terminal pod. Used by cdctl.sim.node.kubelet.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from cdctl.sim.apiserver.deletion import PODS_KEY as PODS
from cdctl.sim.apiserver.deletion import TERMINAL_PHASES
from cdctl.sim.apiserver.errors import Conflict, NotFound
from cdctl.sim.apiserver.objectmeta import now_rfc3339
from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.node.podstatus import pod_status
from cdctl.sim.node.runtime import never_ran, stopped


def is_terminating(pod: Mapping[str, Any] | None) -> bool:
    return bool(pod is not None and (pod.get("metadata") or {}).get("deletionTimestamp"))


def with_deletion_grace(pod: dict[str, Any], stored: Mapping[str, Any] | None) -> dict[str, Any]:
    """`pod` as the kubelet knew it, with the grace period of its deletion (what `stop` waits for)."""
    grace = ((stored or {}).get("metadata") or {}).get("deletionGracePeriodSeconds")
    if grace is None:
        return pod
    return {**pod, "metadata": {**pod["metadata"], "deletionGracePeriodSeconds": grace}}


def finish_deletion(store: ObjectStore, uid: str, exit_code: int | None) -> bool:
    """Write a deleted pod's final status (`exit_code` of its container; None: nothing ran) and remove it.
    False when the pod with this uid is not being deleted (gone already, or only ended)."""
    stored = store.peek_uid(uid)
    if not is_terminating(stored) or stored is None or stored.get("kind", "Pod") != "Pod":
        return False
    pods = store.type_of(*PODS)
    namespace, name = stored["metadata"]["namespace"], stored["metadata"]["name"]
    with contextlib.suppress(NotFound, Conflict):  # someone else removed it, or a new pod took the name
        latest = store.get(pods, namespace, name)
        if latest["metadata"]["uid"] != uid:
            return True  # removed meanwhile, and a new pod took its name
        if (latest.get("status") or {}).get("phase") not in TERMINAL_PHASES:
            now = now_rfc3339()
            view = stopped(exit_code, now) if exit_code is not None else never_ran(now)
            status = pod_status(latest, view, now)
            store.update(pods, namespace, name, {**latest, "status": status}, subresource="status")
        store.delete(pods, namespace, name, preconditions={"uid": uid}, grace_period_s=0)
    return True
