"""Channel isolation on real kubelets: four ComputeDomains share one IMEX domain (one rack's clique), each
with a channel of its own, two of them on one node and one with several pods on a node."""

from __future__ import annotations

from pathlib import Path

from tests.real import workload
from tests.real.rack import RealRack, RealSettings

NODES = 6
# (domain, workers, GPUs per worker, node or None for anywhere it fits): 24 GPUs on 6 nodes of 4.
DOMAINS = (
    ("alpha", 3, 1, "gb200-r00-n00"),
    ("beta", 1, 1, "gb200-r00-n00"),
    ("gamma", 2, 2, "gb200-r00-n01"),
    ("delta", 4, 4, None),
)


async def test_four_domains_on_six_nodes_each_hold_their_own_channel(work_dir: Path) -> None:
    async with RealRack(work_dir, RealSettings(nodes=NODES, isolation="channel")) as rack:
        for name, workers, gpus, node in DOMAINS:
            await workload.submit(rack, f"team-{name}", name, workers, 0, gpus_per_pod=gpus, node=node)
        for name, workers, _, _ in DOMAINS:
            await workload.all_workers_started(rack, f"team-{name}", workers)
        channels: dict[str, set[int]] = {}
        placed: dict[str, list[str]] = {}
        for name, workers, _, _ in DOMAINS:
            containers = workload.worker_containers(rack, f"team-{name}")
            assert len(containers) == workers
            channels[name] = set().union(*(workload.channels_of(r) for r in containers.values()))
            placed[name] = sorted(r["node"] for r in containers.values())
        assert all(len(found) == 1 for found in channels.values()), channels
        assert len(set().union(*channels.values())) == len(DOMAINS), f"a channel shared: {channels}"
        assert placed["alpha"] == ["gb200-r00-n00"] * 3 and placed["beta"] == ["gb200-r00-n00"]
        assert len(set(placed["delta"])) == 4
        assert not rack.bridge_errors
