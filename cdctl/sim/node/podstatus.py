"""The pod status a kubelet reports: addresses once the sandbox exists, then phase, conditions, containers.

Pure functions over pod dicts, used by the simulated kubelet (cdctl.sim.node.kubelet).
"""

from __future__ import annotations

from typing import Any


def with_addresses(status: dict[str, Any], pod_ip: str, host_ip: str, now: str) -> dict[str, Any]:
    return {**status, "podIP": pod_ip, "podIPs": [{"ip": pod_ip}], "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}], "startTime": now}  # fmt: skip


def running_status(pod: dict[str, Any], ready: bool, now: str) -> dict[str, Any]:
    """`pod`'s status as Running, Ready or not, every container started."""
    flag = "True" if ready else "False"
    status = dict(pod.get("status") or {})
    status["phase"] = "Running"
    status["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        {"type": "Initialized", "status": "True", "lastTransitionTime": now},
        {"type": "ContainersReady", "status": flag, "lastTransitionTime": now},
        {"type": "Ready", "status": flag, "lastTransitionTime": now},
    ]
    status["containerStatuses"] = [
        {
            "name": container["name"],
            "image": container.get("image", ""),
            "imageID": "",
            "ready": ready,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": now}},
        }
        for container in (pod.get("spec") or {}).get("containers") or []
    ]
    return status
