"""A fake NVLink fabric for the simulated rack: racks of 18 nodes x 4 GPUs, one NVLink clique per rack.

Plain data plus small functions. The rack launcher asks it for node names, for the value of each node's
kubelet-plugin flag `--fake-nvml CLIQUE_ID[:STATE]` (`fake_nvml_spec`), and for an in-process device library
(`NodeDeviceLib`) that implements the plugin's `DeviceLib` interface (cdctl.plugin.nvml) and reads the live
fabric state, so tests can flip a node to IN_PROGRESS or NOT_SUPPORTED, move it to another clique
(`set_clique`, as a Fabric Manager repartition does) or make it a single-node NVLink system (`single_node`,
its own NVSwitches) and watch the plugin react.
Clique IDs are `<clusterUUID>.<cliqueId>` as NVIDIA's plugin prints them; everything is deterministic.
Every rack also has CPU-only nodes (`Topology.cpu_nodes`, default one per rack): no GPU, no GPU labels, and a
fake NVML that cannot load (`no-driver`), as on a real cluster's system or CPU workers. `write_nvml_spec`
writes a node's `--fake-nvml @FILE` spec; rewriting it (`set_fabric_state`) changes the fabric a running
plugin process sees at its next probe.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path

from cdctl.plugin.nvml import (
    NO_DRIVER_MESSAGE,
    NO_DRIVER_SPEC,
    SINGLE_NODE_SUFFIX,
    FabricInfo,
    GpuFabric,
    NvmlUnavailable,
)

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
    has_gpu: bool = True
    single_node: bool = False  # its own NVSwitches (a single-node NVLink system), not a rack's fabric
    spec_file: Path | None = None  # where `write_nvml_spec` put this node's `--fake-nvml @FILE` spec

    @property
    def clique_id(self) -> str:
        """The clique the plugin reports: "" when the fabric is not supported or not up."""
        if not self.has_gpu or self.fabric_state != FabricState.COMPLETED or self.fabric_status != 0:
            return ""
        return f"{self.cluster_uuid}.{self.clique_number}"

    def fake_nvml_spec(self) -> str:
        """The plugin's `--fake-nvml` value for this node (`none` when the fabric is not supported,
        `no-driver` on a CPU-only node)."""
        if not self.has_gpu:
            return NO_DRIVER_SPEC
        if self.fabric_state == FabricState.NOT_SUPPORTED:
            return "none"
        suffix = SINGLE_NODE_SUFFIX if self.single_node else ""
        return f"{self.cluster_uuid}.{self.clique_number}:{self.fabric_state.name}{suffix}"

    def write_nvml_spec(self, path: Path) -> Path:
        """Write `fake_nvml_spec()` to `path` (atomically) for `--fake-nvml @path`."""
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(self.fake_nvml_spec() + "\n")
        temporary.replace(path)
        self.spec_file = path
        return path

    def gpus(self) -> list[GpuFabric]:
        if not self.has_gpu:
            raise NvmlUnavailable(f"NVML init: {NO_DRIVER_MESSAGE}")
        info = None
        if self.fabric_state != FabricState.NOT_SUPPORTED:
            info = FabricInfo(
                self.cluster_uuid, self.clique_number, int(self.fabric_state), self.fabric_status
            )
        return [GpuFabric(index, gpu_uuid, info) for index, gpu_uuid in enumerate(self.gpu_uuids)]


@dataclass
class Topology:
    """Every simulated GPU node (`nodes`), by name, in rack order, and the CPU-only nodes (`cpu_nodes`)."""

    nodes: dict[str, FakeNode] = field(default_factory=dict)
    cpu_nodes: dict[str, FakeNode] = field(default_factory=dict)

    def all_nodes(self) -> dict[str, FakeNode]:
        return {**self.nodes, **self.cpu_nodes}

    def node(self, name: str) -> FakeNode:
        try:
            return self.all_nodes()[name]
        except KeyError:
            raise KeyError(f"no simulated node named {name!r}") from None

    def rack(self, index: int) -> list[FakeNode]:
        return [n for n in self.nodes.values() if n.rack == index]

    def set_fabric_state(self, name: str, state: FabricState) -> None:
        node = self.node(name)
        node.fabric_state = state
        if node.spec_file is not None:
            node.write_nvml_spec(node.spec_file)

    def set_clique(self, name: str, clique_number: int, cluster_uuid: str | None = None) -> None:
        """Move a node to another clique (a Fabric Manager repartition); a running plugin sees it when it
        next re-reads the clique."""
        node = self.node(name)
        node.clique_number = clique_number
        if cluster_uuid is not None:
            node.cluster_uuid = cluster_uuid
        if node.spec_file is not None:
            node.write_nvml_spec(node.spec_file)

    def clique_members(self, clique_id: str) -> list[str]:
        return [n.name for n in self.nodes.values() if clique_id and n.clique_id == clique_id]


def node_name(rack: int, slot: int) -> str:
    return f"gb200-r{rack:02d}-n{slot:02d}"


def cpu_node_name(rack: int, slot: int) -> str:
    return f"cpu-r{rack:02d}-n{slot:02d}"


def build_topology(
    racks: int = 1,
    nodes_per_rack: int = NODES_PER_RACK,
    gpus_per_node: int = GPUS_PER_NODE,
    seed: str = "cdctl-sim",
    cpu_nodes_per_rack: int = 1,
) -> Topology:
    """`racks` racks, each its own NVLink domain: one cluster UUID and one clique ID per rack, plus
    `cpu_nodes_per_rack` CPU-only nodes per rack."""
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
        for slot in range(cpu_nodes_per_rack):
            name = cpu_node_name(rack, slot)
            topology.cpu_nodes[name] = FakeNode(
                name, rack, "", 0, (), FabricState.NOT_SUPPORTED, has_gpu=False
            )
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

    def single_node_fabric(self) -> bool:
        return self._topology.node(self._name).single_node
