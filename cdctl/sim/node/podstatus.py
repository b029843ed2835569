"""The pod status a kubelet reports: addresses once the sandbox exists, then phase, conditions, containers.

Pure functions over pod dicts, used by the simulated kubelet (cdctl.sim.node.kubelet): the phase and the
container's state, lastState and restartCount come from what the runtime reports (cdctl.sim.node.runtime).
"""

from __future__ import annotations

from typing import Any

from cdctl.sim.node.runtime import CRASH_LOOP, ContainerView


def with_addresses(status: dict[str, Any], pod_ip: str, host_ip: str, now: str) -> dict[str, Any]:
    return {**status, "podIP": pod_ip, "podIPs": [{"ip": pod_ip}], "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}], "startTime": now}  # fmt: skip


def _container_state(view: ContainerView, now: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(state, lastState) of a container as the kubelet reports them."""
    terminated = {
        "exitCode": view.exit_code,
        "reason": view.exit_reason,
        **({"message": view.exit_message} if view.exit_message else {}),
        "startedAt": view.started_at or now,
        "finishedAt": view.finished_at or now,
    }
    if view.final:
        return {"terminated": terminated}, {}
    last = {"terminated": terminated} if view.exit_code is not None else {}
    if not view.running:
        message = view.waiting_message or (
            "back-off restarting failed container" if view.waiting_reason == CRASH_LOOP else ""
        )
        waiting = {
            "reason": view.waiting_reason or "ContainerCreating",
            **({"message": message} if message else {}),
        }
        return {"waiting": waiting}, last
    return {"running": {"startedAt": view.started_at or now}}, last


def pod_status(pod: dict[str, Any], view: ContainerView, now: str) -> dict[str, Any]:
    """`pod`'s status from its container: Running (Ready or not, or waiting to restart), or Succeeded or
    Failed once the container exited for good (Ready False with reason PodCompleted, as the kubelet says)."""
    ready = view.ready and not view.final
    flag = "True" if ready else "False"
    status = dict(pod.get("status") or {})
    status["phase"] = view.phase
    done = {"reason": "PodCompleted"} if view.final else {}
    status["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        {"type": "Initialized", "status": "True", "lastTransitionTime": now},
        {"type": "ContainersReady", "status": flag, "lastTransitionTime": now, **done},
        {"type": "Ready", "status": flag, "lastTransitionTime": now, **done},
    ]
    state, last = _container_state(view, now)
    status["containerStatuses"] = [
        {
            "name": container["name"],
            "image": container.get("image", ""),
            "imageID": "",
            "ready": ready,
            "started": view.running,
            "restartCount": view.restarts,
            "state": state,
            **({"lastState": last} if last else {}),
        }
        for container in (pod.get("spec") or {}).get("containers") or []
    ]
    return status
