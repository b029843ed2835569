"""Both IMEX modes form on real kubelets and a real control plane, and tear down with nothing left."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.real import workload
from tests.real.rack import RealRack, RealSettings, eventually

NODES = 6
WATCH_ERROR = "Error receiving from WatchResources stream"


async def nothing_left(rack: RealRack, namespace: str) -> str | None:
    """What remains of a torn-down domain, or None."""
    left = []
    templates = await rack.plane.get("resourceclaimtemplates", "-A")
    left += [f"template {t['metadata']['name']}" for t in templates["items"]]
    left += [f"daemonset {d['metadata']['name']}" for d in (await rack.plane.get("daemonsets", "-A"))["items"]
             if d["metadata"]["name"].startswith("computedomain-daemon-")]  # fmt: skip
    left += [
        f"claim {c['metadata']['name']}" for c in (await rack.plane.get("resourceclaims", "-A"))["items"]
    ]
    for node in (await rack.plane.get("nodes"))["items"]:
        labels = node["metadata"].get("labels") or {}
        left += [
            f"label on {node['metadata']['name']}" for k in labels if k.startswith("resource.nvidia.com/")
        ]
    for name, hollow in rack.nodes.items():
        left += [f"CDI spec {p.name} on {name}" for p in hollow.cdi.glob("*") if "claim" in p.name]
    left += [
        f"domain {d['metadata']['name']}" for d in (await rack.plane.get("computedomains", "-A"))["items"]
    ]
    return ", ".join(left) or None


@pytest.mark.parametrize("host_managed", [False, True], ids=["driver-managed", "host-managed"])
async def test_a_domain_forms_on_six_real_nodes_and_leaves_nothing(
    work_dir: Path, host_managed: bool
) -> None:
    async with RealRack(work_dir, RealSettings(nodes=NODES, host_managed=host_managed)) as rack:
        await workload.submit(rack, "team-a", "nvl72", NODES, 0 if host_managed else NODES)
        await workload.all_workers_started(rack, "team-a", NODES)
        status = await rack.plane.get("computedomain", "nvl72", "-n", "team-a")
        assert status["status"]["status"] == "Ready", status["status"]
        await rack.plane.kubectl("delete", "job", "nvl72-job", "-n", "team-a", "--cascade=foreground",
                                 "--timeout=120s")  # fmt: skip
        await rack.plane.kubectl("delete", "computedomain", "nvl72", "-n", "team-a", "--timeout=120s")

        async def cleaned() -> bool:
            return await nothing_left(rack) is None

        await eventually("nothing left of the domain", cleaned, 60)
        assert not rack.bridge_errors
        for name, node in rack.nodes.items():
            assert node.log_lines(WATCH_ERROR) == [], name
