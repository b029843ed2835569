"""The pod status a kubelet reports: addresses once the sandbox exists, then phase, conditions, containers.

Pure functions over pod dicts, used by the simulated kubelet (cdctl.sim.node.kubelet): the phase and the
container's state, lastState and restartCount come from what the runtime reports (cdctl.sim.node.runtime).
As the kubelet's status manager does, conditions the kubelet does not own (a readiness gate's, set by
someone else) are kept, and the pod is Ready only when its containers are and every condition its
`spec.readinessGates` names is True (`gates_ready`, with the kubelet's own words when one is not).
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


KUBELET_CONDITIONS = ("PodScheduled", "Initialized", "ContainersReady", "Ready", "PodReadyToStartContainers")


def gates_ready(pod: dict[str, Any]) -> tuple[bool, str]:
    """Whether every readiness gate's condition is True; else the kubelet's message for the first that is
    not."""
    conditions = {c.get("type"): c.get("status") for c in (pod.get("status") or {}).get("conditions") or []}
    for gate in (pod.get("spec") or {}).get("readinessGates") or []:
        kind = gate.get("conditionType")
        if kind not in conditions:
            return False, f'corresponding condition of pod readiness gate "{kind}" does not exist.'
        if conditions[kind] != "True":
            return False, f'the status of pod readiness gate "{kind}" is not "True", but {conditions[kind]}'
    return True, ""


def pod_ready(pod: dict[str, Any], view: ContainerView) -> bool:
    return view.ready and not view.final and gates_ready(pod)[0]


def pod_status(pod: dict[str, Any], view: ContainerView, now: str) -> dict[str, Any]:
    """`pod`'s status from its container: Running (Ready or not, or waiting to restart), or Succeeded or
    Failed once the container exited for good (Ready False with reason PodCompleted, as the kubelet says)."""
    containers_ready = view.ready and not view.final
    flag = "True" if containers_ready else "False"
    status = dict(pod.get("status") or {})
    status["phase"] = view.phase
    done = {"reason": "PodCompleted"} if view.final else {}
    gated, why = gates_ready(pod)
    ready: dict[str, Any] = {"type": "Ready", "status": flag, "lastTransitionTime": now, **done}
    if containers_ready and not gated:
        ready.update(status="False", reason="ReadinessGatesNotReady", message=why)
    foreign = [
        c for c in status.get("conditions") or [] if c.get("type") not in KUBELET_CONDITIONS
    ]  # a readiness gate's condition, say: not the kubelet's to write
    status["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        {"type": "Initialized", "status": "True", "lastTransitionTime": now},
        {"type": "ContainersReady", "status": flag, "lastTransitionTime": now, **done},
        ready,
        *foreign,
    ]
    state, last = _container_state(view, now)
    status["containerStatuses"] = [
        {
            "name": container["name"],
            "image": container.get("image", ""),
            "imageID": "",
            "ready": containers_ready,
            "started": view.running,
            "restartCount": view.restarts,
            "state": state,
            **({"lastState": last} if last else {}),
        }
        for container in (pod.get("spec") or {}).get("containers") or []
    ]
    return status
