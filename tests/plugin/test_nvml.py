"""Clique discovery rules (strict and legacy), the fake's spec, and the pynvml struct handling."""

from __future__ import annotations

import ctypes
import types
import uuid
from pathlib import Path
from typing import Any

import pynvml
import pytest

from cdctl.domain.errors import InvalidInput
from cdctl.plugin import nvml
from cdctl.plugin.nvml import FabricInfo, GpuFabric, discover_clique

U1 = "6a130f54-faaa-4b8f-847f-be44ab70f917"
U2 = "7b130f54-faaa-4b8f-847f-be44ab70f917"


def gpus(*infos: FabricInfo | None) -> list[GpuFabric]:
    return [GpuFabric(i, f"GPU-{i}", info) for i, info in enumerate(infos)]


def done(u: str = U1, clique: int = 32766, status: int = 0) -> FabricInfo:
    return FabricInfo(u, clique, nvml.STATE_COMPLETED, status)


@pytest.mark.parametrize("strict", [True, False])
def test_one_clique_across_gpus(strict: bool) -> None:
    result = discover_clique(gpus(done(), done()), strict=strict)
    assert result.clique_id == f"{U1}.32766"
    assert result.ready
    assert any("identified fabric clique" in n for n in result.notes)


@pytest.mark.parametrize("strict", [True, False])
def test_not_supported_and_zero_uuid_mean_no_clique(strict: bool) -> None:
    infos = [None, FabricInfo(U1, 0, nvml.STATE_NOT_SUPPORTED), done(nvml.ZERO_UUID, 0)]
    result = discover_clique(gpus(*infos), strict=strict)
    assert result.clique_id == ""
    assert result.ready


def test_strict_in_progress_is_pending_not_fatal() -> None:
    result = discover_clique(gpus(done(), FabricInfo(U1, 1, nvml.STATE_IN_PROGRESS)), strict=True)
    assert not result.ready
    assert result.clique_id == ""
    assert result.pending is not None and "state=2 (IN_PROGRESS)" in result.pending


def test_strict_completed_with_error_status_fails_fast() -> None:
    """A registration that completed with an error is a fault, not a transition: the plugin refuses to start
    (CrashOnNVLinkFabricErrors, as the Go driver)."""
    with pytest.raises(nvml.NvmlError, match=r"registration error .*status=3, refusing to start"):
        discover_clique(gpus(done(status=3)), strict=True)


@pytest.mark.parametrize("state", [nvml.STATE_IN_PROGRESS, nvml.STATE_NOT_STARTED])
def test_single_node_system_with_incomplete_registration_has_no_clique(state: int) -> None:
    """Upstream PR 1289: Fabric Manager's shared mode leaves GPUs unregistered until a partition is activated;
    on a single-node NVLink system that is "no clique" (channel-0 for local IMEX), not a pending fabric."""
    infos = gpus(FabricInfo(U1, 0, state), FabricInfo(U1, 0, state))
    result = discover_clique(infos, strict=True, single_node=True)
    assert result.ready and result.clique_id == ""
    assert any("single-node NVLink system" in n for n in result.notes)
    # the same GPUs on a multi-node (rack) system wait for the fabric
    assert not discover_clique(infos, strict=True).ready


def test_single_node_system_still_fails_fast_on_a_registration_error() -> None:
    with pytest.raises(nvml.NvmlError, match="registration error"):
        discover_clique(gpus(done(status=3)), strict=True, single_node=True)


def test_local_fabric_manager_is_read_from_the_host(tmp_path: Path) -> None:
    assert not nvml.has_local_fabric_manager(tmp_path)
    devices = tmp_path / "proc/driver/nvidia-nvswitch/devices"
    devices.mkdir(parents=True)
    assert not nvml.has_local_fabric_manager(tmp_path)  # the driver is loaded, no switch
    (devices / "0000:05:00.0").mkdir()
    assert nvml.has_local_fabric_manager(tmp_path)
    other = tmp_path / "other"
    vpd = other / "sys/class/infiniband/mlx5_0/device/vpd"
    vpd.parent.mkdir(parents=True)
    vpd.write_bytes(b"\x82PN..NVLINK5 tray")
    assert not nvml.has_local_fabric_manager(other)
    vpd.write_bytes(b"\x82PN..SW_MNG..")
    assert nvml.has_local_fabric_manager(other)


def test_fake_spec_expresses_a_single_node_system() -> None:
    lib = nvml.fake_from_spec(f"{U1}.0:IN_PROGRESS:single-node")
    assert lib.single_node_fabric() and lib.state == nvml.STATE_IN_PROGRESS
    assert not nvml.fake_from_spec(f"{U1}.0:IN_PROGRESS").single_node_fabric()


def test_legacy_skips_unattached_gpus() -> None:
    result = discover_clique(
        gpus(FabricInfo(U1, 1, nvml.STATE_IN_PROGRESS), done(status=3), done()), strict=False
    )
    assert result.clique_id == f"{U1}.32766"


@pytest.mark.parametrize("strict", [True, False])
def test_several_uuids_or_cliques_are_errors(strict: bool) -> None:
    with pytest.raises(nvml.NvmlError, match="ClusterUUIDs"):
        discover_clique(gpus(done(U1), done(U2)), strict=strict)
    with pytest.raises(nvml.NvmlError, match="CliqueIDs"):
        discover_clique(gpus(done(U1, 1), done(U1, 2)), strict=strict)


def test_fake_spec_parsing() -> None:
    assert nvml.fake_from_spec("none").cluster_uuid is None
    fake = nvml.fake_from_spec(f"{U1}.4026")
    assert discover_clique(fake.probe(), strict=True).clique_id == f"{U1}.4026"
    pending = nvml.fake_from_spec(f"{U1}.4026:IN_PROGRESS")
    assert pending.state == nvml.STATE_IN_PROGRESS
    assert not discover_clique(pending.probe(), strict=True).ready
    pending.state = nvml.STATE_COMPLETED
    assert discover_clique(pending.probe(), strict=True).clique_id == f"{U1}.4026"
    for bad in ("4026", "not-a-uuid.1", f"{U1}.x", f"{U1}.1:SOMETIMES"):
        with pytest.raises(InvalidInput):
            nvml.fake_from_spec(bad)


def test_driver_version_rule() -> None:
    assert nvml.driver_version_at_least("570.158.01")
    assert nvml.driver_version_at_least("580.65.06")
    assert not nvml.driver_version_at_least("570.124.06")
    assert not nvml.driver_version_at_least("garbage")


def _fake_pynvml(state_word: int, not_supported: bool = False) -> Any:
    """A stand-in module with pynvml's structs and errors whose GetGpuFabricInfoV fills the struct."""

    def get_info_v(handle: Any, ref: Any) -> int:
        if not_supported:
            raise pynvml.NVMLError_NotSupported(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info = ctypes.cast(ref, ctypes.POINTER(pynvml.c_nvmlGpuFabricInfoV_t)).contents
        for i, b in enumerate(uuid.UUID(U1).bytes):
            info.clusterUuid[i] = b
        info.cliqueId = 4026
        info.state = state_word
        info.status = 0
        return 0

    mod = types.SimpleNamespace(
        **{k: getattr(pynvml, k) for k in dir(pynvml) if k.startswith(("c_", "NVML"))}
    )
    mod.nvmlDeviceGetGpuFabricInfoV = get_info_v
    return mod


def test_pynvml_struct_reads_state_low_byte_and_uuid() -> None:
    # pynvml declares `state` as c_uint: garbage in the padding bytes must not change the state.
    info = nvml.PynvmlDeviceLib._fabric(_fake_pynvml(0xABCD0003), handle=None)
    assert info == FabricInfo(U1, 4026, nvml.STATE_COMPLETED, 0)
    assert nvml.PynvmlDeviceLib._fabric(_fake_pynvml(3, not_supported=True), handle=None) is None


def test_no_driver_spec_fails_as_unavailable() -> None:
    lib = nvml.fake_from_spec("no-driver")
    with pytest.raises(nvml.NvmlUnavailable, match="NVML Shared Library Not Found"):
        lib.probe()
    with pytest.raises(nvml.NvmlUnavailable):
        lib.driver_version()


def test_file_device_lib_rereads_its_spec_on_every_probe(tmp_path: Path) -> None:
    spec = tmp_path / "nvml"
    spec.write_text("6a130f54-faaa-4b8f-847f-be44ab70f917.7:COMPLETED\n")
    lib = nvml.FileDeviceLib(spec)
    assert nvml.discover_clique(lib.probe(), strict=True).clique_id.endswith(".7")
    spec.write_text("6a130f54-faaa-4b8f-847f-be44ab70f917.7:IN_PROGRESS\n")
    assert nvml.discover_clique(lib.probe(), strict=True).pending is not None
    spec.write_text("no-driver")
    with pytest.raises(nvml.NvmlUnavailable):
        lib.probe()
    spec.unlink()
    with pytest.raises(nvml.NvmlError, match="fake NVML spec"):
        lib.probe()
