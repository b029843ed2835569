"""The simulated kubelet's health cache and the allocatedResourcesStatus it writes, in the kubelet's shape."""

from __future__ import annotations

import time

from cdctl._proto import v1alpha1 as health_v1alpha1
from cdctl.sim.node.healthwatch import HealthWatch, PreparedDevice, allocated_resources_status

DRIVER = "compute-domain.nvidia.com"


def response(*devices: tuple[str, int, int, int]) -> health_v1alpha1.NodeWatchResourcesResponse:
    return health_v1alpha1.NodeWatchResourcesResponse(
        devices=[
            health_v1alpha1.DeviceHealth(
                device=health_v1alpha1.DeviceIdentifier(pool_name="n1", device_name=name),
                health=health_v1alpha1.HealthStatus(health),
                last_updated_time=at,
                health_check_timeout_seconds=timeout,
            )
            for name, health, at, timeout in devices
        ]
    )


def test_the_cache_reads_each_device_and_turns_stale_or_missing_ones_unknown() -> None:
    changed: list[str] = []
    watch = HealthWatch("n1", on_change=changed.append)
    now = int(time.time())
    watch._record(DRIVER, response(("channel-0", 2, now, 60), ("daemon-0", 1, now - 100, 30)))
    assert watch.health(DRIVER, "n1", "channel-0") == "Unhealthy"
    assert watch.health(DRIVER, "n1", "daemon-0") == "Unknown"  # older than its timeout
    watch._record(DRIVER, response(("daemon-0", 1, now, 0)))  # a full list without channel-0
    assert watch.health(DRIVER, "n1", "channel-0") == "Unknown"
    assert watch.health(DRIVER, "n1", "daemon-0") == "Healthy"  # 0: the kubelet's default timeout
    assert changed == [DRIVER, DRIVER]


def test_allocated_resources_status_has_the_kubelets_shape() -> None:
    container = {
        "name": "c",
        "resources": {"claims": [{"name": "channel"}, {"name": "both", "request": "r"}]},
    }
    cdi_id = "k8s.compute-domain.nvidia.com/claim=uid-1-ch"
    devices = {
        "uid-1": [PreparedDevice(DRIVER, "n1", "channel-0", (cdi_id,))],
        "uid-2": [PreparedDevice(DRIVER, "n1", "daemon-0", ())],
    }
    got = allocated_resources_status(
        container, {"channel": "uid-1", "both": "uid-2"}, devices, lambda d, p, n: f"{n}?"
    )
    assert got == [
        {"name": "claim:channel",
         "resources": [{"resourceID": cdi_id, "health": "channel-0?"}]},
        {"name": "claim:both/r",
         "resources": [{"resourceID": "compute-domain.nvidia.com/n1/daemon-0", "health": "daemon-0?"}]},
    ]  # fmt: skip
