"""Both IMEX modes form on real kubelets and a real control plane, and tear down with nothing left."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.real import workload
from tests.real.rack import RealRack, RealSettings, eventually

NODES = 6
WATCH_ERROR = "Error receiving from WatchResources stream"


async def nothing_left(rack: RealRack) -> str | None:
    """What remains of a torn-down domain, or None."""

    async def names(resource: str) -> list[str]:
        return [str(o["metadata"]["name"]) for o in (await rack.plane.get(resource, "-A"))["items"]]

    left = [f"template {name}" for name in await names("resourceclaimtemplates")]
    left += [f"daemonset {n}" for n in await names("daemonsets") if n.startswith("computedomain-daemon-")]
    left += [f"claim {name}" for name in await names("resourceclaims")]
    left += [f"domain {name}" for name in await names("computedomains")]
    for node in (await rack.plane.get("nodes"))["items"]:
        labels = node["metadata"].get("labels") or {}
        ours = [k for k in labels if k.startswith("resource.nvidia.com/")]
        left += [f"label {k} on {node['metadata']['name']}" for k in ours]
    for name, hollow in rack.nodes.items():
        left += [f"CDI spec {p.name} on {name}" for p in hollow.cdi.glob("*") if "claim" in p.name]
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
