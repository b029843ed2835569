"""A fake NVLink fabric for the simulated rack: racks of 18 nodes x 4 GPUs, one NVLink clique per rack.

Plain data plus small functions. The rack launcher asks it for node names, for the value of each node's
kubelet-plugin flag `--fake-nvml CLIQUE_ID[:STATE]` (`fake_nvml_spec`), and for an in-process device library
(`NodeDeviceLib`) that implements the plugin's `DeviceLib` interface (cdctl.plugin.nvml) and reads the live
fabric state, so tests can flip a node to IN_PROGRESS or NOT_SUPPORTED and watch the plugin react.
Clique IDs are `<clusterUUID>.<cliqueId>` as NVIDIA's plugin prints them; everything is deterministic.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import IntEnum

from cdctl.plugin.nvml import FabricInfo, GpuFabric

NODES_PER_RACK = 18
GPUS_PER_NODE = 4
FIRST_CLIQUE_ID = 32766
DRIVER_VERSION = "580.65.06"
_NAMESPACE = uuid.UUID("6a130f54-faaa-4b8f-847f-be44ab70f917")


class FabricState(IntEnum):
    """NVML_GPU_FABRIC_STATE_* values."""

    NOT_SUPPORTED = 0
    NOT_STARTED = 1
    IN_PROGRESS = 2
    COMPLETED = 3


@dataclass
class FakeNode:
    name: str
    rack: int
    cluster_uuid: str
    clique_number: int
    gpu_uuids: tuple[str, ...]
    fabric_state: FabricState = FabricState.COMPLETED
    fabric_status: int = 0  # NVML_SUCCESS

    @property
    def clique_id(self) -> str:
        """The clique the plugin reports: "" when the fabric is not supported or not up."""
        if self.fabric_state != FabricState.COMPLETED or self.fabric_status != 0:
            return ""
        return f"{self.cluster_uuid}.{self.clique_number}"

    def fake_nvml_spec(self) -> str:
        """The plugin's `--fake-nvml` value for this node (`none` when the fabric is not supported)."""
        if self.fabric_state == FabricState.NOT_SUPPORTED:
            return "none"
        return f"{self.cluster_uuid}.{self.clique_number}:{self.fabric_state.name}"

    def gpus(self) -> list[GpuFabric]:
        info = None
        if self.fabric_state != FabricState.NOT_SUPPORTED:
            info = FabricInfo(
                self.cluster_uuid, self.clique_number, int(self.fabric_state), self.fabric_status
            )
        return [GpuFabric(index, gpu_uuid, info) for index, gpu_uuid in enumerate(self.gpu_uuids)]


@dataclass
class Topology:
    """Every simulated GPU node, by name, in rack order."""

    nodes: dict[str, FakeNode] = field(default_factory=dict)

    def node(self, name: str) -> FakeNode:
        try:
            return self.nodes[name]
        except KeyError:
            raise KeyError(f"no simulated node named {name!r}") from None

    def rack(self, index: int) -> list[FakeNode]:
        return [n for n in self.nodes.values() if n.rack == index]

    def set_fabric_state(self, name: str, state: FabricState) -> None:
        self.node(name).fabric_state = state

    def clique_members(self, clique_id: str) -> list[str]:
        return [n.name for n in self.nodes.values() if clique_id and n.clique_id == clique_id]


def node_name(rack: int, slot: int) -> str:
    return f"gb200-r{rack:02d}-n{slot:02d}"


def build_topology(
    racks: int = 1,
    nodes_per_rack: int = NODES_PER_RACK,
    gpus_per_node: int = GPUS_PER_NODE,
    seed: str = "cdctl-sim",
) -> Topology:
    """`racks` racks, each its own NVLink domain: one cluster UUID and one clique ID per rack."""
    if racks < 1 or nodes_per_rack < 1 or gpus_per_node < 1:
        raise ValueError("racks, nodes_per_rack and gpus_per_node must be positive")
    topology = Topology()
    for rack in range(racks):
        cluster_uuid = str(uuid.uuid5(_NAMESPACE, f"{seed}/rack/{rack}"))
        for slot in range(nodes_per_rack):
            name = node_name(rack, slot)
            gpu_uuids = tuple(
                f"GPU-{uuid.uuid5(_NAMESPACE, f'{seed}/{name}/gpu/{index}')}"
                for index in range(gpus_per_node)
            )
            topology.nodes[name] = FakeNode(name, rack, cluster_uuid, FIRST_CLIQUE_ID - rack, gpu_uuids)
    return topology


class NodeDeviceLib:
    """The plugin's DeviceLib for one simulated node, reading the topology live on every probe."""

    def __init__(self, topology: Topology, name: str, version: str = DRIVER_VERSION) -> None:
        self._topology = topology
        self._name = name
        self._version = version
        self.probes = 0

    def probe(self) -> list[GpuFabric]:
        self.probes += 1
        return self._topology.node(self._name).gpus()

    def driver_version(self) -> str:
        return self._version
