"""The fake NVLink topology: rack shape, clique IDs, fabric states, and what the plugin's clique rules see."""

from __future__ import annotations

import uuid
from pathlib import Path

from cdctl.plugin.nvml import FileDeviceLib, discover_clique, fake_from_spec
from cdctl.sim.node.topology import FabricState, NodeDeviceLib, build_topology


def test_racks_of_18_nodes_with_4_gpus_and_one_clique_each() -> None:
    topology = build_topology(racks=2)
    assert len(topology.nodes) == 36
    assert all(len(node.gpu_uuids) == 4 for node in topology.nodes.values())
    cliques = {node.clique_id for node in topology.nodes.values()}
    assert len(cliques) == 2
    for clique in cliques:
        cluster, _, number = clique.rpartition(".")
        assert uuid.UUID(cluster) and number.isdigit()
        assert len(topology.clique_members(clique)) == 18
    first, second = topology.rack(0)[0], topology.rack(1)[0]
    assert first.clique_id != second.clique_id


def test_gpu_uuids_are_unique_and_deterministic() -> None:
    once, again = build_topology(racks=2), build_topology(racks=2)
    all_uuids = [u for node in once.nodes.values() for u in node.gpu_uuids]
    assert len(set(all_uuids)) == len(all_uuids)
    assert [n.gpu_uuids for n in once.nodes.values()] == [n.gpu_uuids for n in again.nodes.values()]


def test_fabric_state_changes_what_the_plugin_discovers() -> None:
    topology = build_topology(racks=1, nodes_per_rack=2)
    name = topology.rack(0)[0].name
    lib = NodeDeviceLib(topology, name)
    assert discover_clique(lib.probe(), strict=True).clique_id == topology.node(name).clique_id
    topology.set_fabric_state(name, FabricState.IN_PROGRESS)
    pending = discover_clique(lib.probe(), strict=True)
    assert not pending.ready and "state=2" in str(pending.pending)
    assert topology.node(name).clique_id == ""
    topology.set_fabric_state(name, FabricState.NOT_SUPPORTED)
    unsupported = discover_clique(lib.probe(), strict=True)
    assert unsupported.ready and unsupported.clique_id == ""


def test_fake_nvml_spec_round_trips_through_the_plugin_flag_parser() -> None:
    topology = build_topology(racks=1, nodes_per_rack=1)
    node = next(iter(topology.nodes.values()))
    parsed = fake_from_spec(node.fake_nvml_spec())
    assert discover_clique(parsed.probe(), strict=True).clique_id == node.clique_id
    node.fabric_state = FabricState.IN_PROGRESS
    assert fake_from_spec(node.fake_nvml_spec()).state == int(FabricState.IN_PROGRESS)
    node.fabric_state = FabricState.NOT_SUPPORTED
    assert fake_from_spec(node.fake_nvml_spec()).cluster_uuid is None


def test_a_node_moves_to_another_clique_through_its_spec_file(tmp_path: Path) -> None:
    """A Fabric Manager repartition: the running plugin's `--fake-nvml @FILE` sees the new clique."""
    topology = build_topology(racks=1, nodes_per_rack=2)
    node = topology.rack(0)[0]
    spec = node.write_nvml_spec(tmp_path / "fake-nvml")
    lib = FileDeviceLib(spec)
    before = discover_clique(lib.probe(), strict=True).clique_id
    topology.set_clique(node.name, 7)
    after = discover_clique(lib.probe(), strict=True).clique_id
    assert before != after == f"{node.cluster_uuid}.7" == node.clique_id
    assert NodeDeviceLib(topology, node.name).probe()[0].info.clique_id == 7  # type: ignore[union-attr]


def test_a_single_node_system_in_progress_reads_as_no_clique(tmp_path: Path) -> None:
    topology = build_topology(racks=1, nodes_per_rack=1)
    node = next(iter(topology.nodes.values()))
    node.single_node = True
    topology.set_fabric_state(node.name, FabricState.IN_PROGRESS)
    for lib in (FileDeviceLib(node.write_nvml_spec(tmp_path / "spec")), NodeDeviceLib(topology, node.name)):
        assert lib.single_node_fabric()
        found = discover_clique(lib.probe(), strict=True, single_node=lib.single_node_fabric())
        assert found.ready and found.clique_id == ""
