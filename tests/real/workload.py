"""What a user submits on the real tier, and how the tests read its outcome: a ComputeDomain and a Job of
workers claiming its channel (the simulated rack's, cdctl.sim.rack.workload), and the containers the real
kubelets created for them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from cdctl.domain.computedomains import DRIVER_NAME
from cdctl.sim.rack import workload
from tests.real.rack import RealRack, eventually

CHANNEL_NODE = re.compile(r"^/dev/nvidia-caps-imex-channels/channel(\d+)$")


async def submit(
    rack: RealRack,
    namespace: str,
    name: str,
    workers: int,
    num_nodes: int,
    gpus_per_pod: int = workload.GPUS_PER_NODE,
    node: str | None = None,
) -> str:
    """Create the namespace, the domain and its job (its workers on `node` when given); the domain's uid."""
    await rack.plane.kubectl("create", "namespace", namespace)
    domain = workload.compute_domain(name, namespace, num_nodes)
    selector = {"kubernetes.io/hostname": node} if node else None
    job = workload.worker_job(f"{name}-job", namespace, workers, f"{name}-channel", gpus_per_pod, selector)
    await rack.plane.apply([domain, job])
    found = await rack.plane.get("computedomain", name, "-n", namespace)
    return str(found["metadata"]["uid"])


def worker_containers(rack: RealRack, namespace: str) -> dict[str, dict[str, Any]]:
    """Per worker pod, the last container the kubelet created for it."""
    latest: dict[str, dict[str, Any]] = {}
    for node in rack.nodes.values():
        for record in node.records():
            if record["namespace"] == namespace:
                latest[record["pod"]] = {**record, "node": node.name}
    return latest


def channel_devices(record: dict[str, Any]) -> list[str]:
    return [d for d in record.get("cdiDevices") or [] if d.startswith(f"k8s.{DRIVER_NAME}/")]


async def all_workers_started(rack: RealRack, namespace: str, workers: int, timeout_s: float = 120.0) -> None:
    """Every worker's container created, each with a channel device of ours that its node resolved."""

    async def started() -> bool:
        found = worker_containers(rack, namespace)
        return len(found) == workers and all(r["ok"] and channel_devices(r) for r in found.values())

    await eventually(f"{workers} workers of {namespace} started with their channel", started, timeout_s)


def channels_of(record: dict[str, Any]) -> set[int]:
    """The IMEX channels a container was given: the channel device nodes of the CDI specs its ids resolved
    from (read while the claim is prepared)."""
    found: set[int] = set()
    for cdi_id, spec_file in (record.get("resolvedFrom") or {}).items():
        spec = yaml.safe_load(Path(spec_file).read_text()) or {}  # CDI specs are JSON or YAML
        device_name = cdi_id.split("=", 1)[1]
        for device in spec.get("devices") or []:
            if device.get("name") != device_name:
                continue
            for node in (device.get("containerEdits") or {}).get("deviceNodes") or []:
                match = CHANNEL_NODE.match(str(node.get("path", "")))
                if match:
                    found.add(int(match.group(1)))
    return found
