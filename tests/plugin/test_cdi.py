"""CDI spec building, schema validation, atomic writes, /proc/devices and capability parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdctl.plugin import cdi

PROC_DEVICES = """Character devices:
  1 mem
195 nvidia
234 nvidia-caps-imex-channels
235 nvidia-caps
511 nvidia-caps-imex-channels-x

Block devices:
  8 sd
234 nvidia-caps-imex-channels
"""


def test_device_major_reads_the_character_section_only(tmp_path: Path) -> None:
    p = tmp_path / "devices"
    p.write_text(PROC_DEVICES)
    assert cdi.device_major("nvidia-caps-imex-channels", p) == 234
    assert cdi.device_major("nvidia-caps", p) == 235
    with pytest.raises(cdi.CDIError, match="found 0"):
        cdi.device_major("nvidia-uvm", p)
    p.write_text(PROC_DEVICES.replace("235 nvidia-caps\n", "235 nvidia-caps\n236 nvidia-caps\n"))
    with pytest.raises(cdi.CDIError, match="found 2"):
        cdi.device_major("nvidia-caps", p)
    with pytest.raises(cdi.CDIError):
        cdi.device_major("x", tmp_path / "missing")


def test_capability_file_parsing(tmp_path: Path) -> None:
    p = tmp_path / "fabric-imex-mgmt"
    p.write_text("DeviceFileMinor: 7\nDeviceFileMode: 256\nDeviceFileModify: 1\n")
    assert cdi.read_capability(p) == cdi.Capability(minor=7, mode=256)
    p.write_text("DeviceFileMode: 256\n")
    with pytest.raises(cdi.CDIError):
        cdi.read_capability(p)


def test_claim_spec_names_ids_and_minimum_version() -> None:
    devices = [
        cdi.ClaimDevice("channel-0", cdi.ContainerEdits(device_nodes=(cdi.channel_device_node(0, 234),)))
    ]
    spec = cdi.build_claim_spec("6f2c9b1e-aaaa", devices)
    assert spec["kind"] == "k8s.compute-domain.nvidia.com/claim"
    assert spec["cdiVersion"] == "0.5.0"  # name starts with a digit
    assert spec["devices"][0]["name"] == "6f2c9b1e-aaaa-channel-0"
    node = spec["devices"][0]["containerEdits"]["deviceNodes"][0]
    assert node == {
        "path": "/dev/nvidia-caps-imex-channels/channel0",
        "type": "c",
        "major": 234,
        "minor": 0,
        "fileMode": 438,
    }
    assert cdi.build_claim_spec("abc", devices)["cdiVersion"] == "0.3.0"
    assert cdi.claim_device_id("u", "daemon-0") == "k8s.compute-domain.nvidia.com/claim=u-daemon-0"


def test_write_is_atomic_validated_and_removable(tmp_path: Path) -> None:
    path = cdi.claim_spec_path(tmp_path / "cdi", "uid-1")
    assert path.name == "k8s.compute-domain.nvidia.com-claim_uid-1.yaml"
    edits = cdi.ContainerEdits(env=("CLIQUE_ID=x",), mounts=(cdi.Mount("/h", "/imexd"),))
    spec = cdi.build_claim_spec("uid-1", [cdi.ClaimDevice("daemon-0", edits)])
    cdi.write_spec(path, spec)
    assert path.read_text().startswith("---\n")
    assert cdi.read_spec(path) == spec
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left
    assert cdi.remove_spec(path)
    assert not cdi.remove_spec(path)
    assert cdi.read_spec(path) is None


def test_invalid_spec_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    bad = {"cdiVersion": "0.5.0", "kind": cdi.CLAIM_KIND, "devices": [{"name": "x"}]}
    with pytest.raises(cdi.CDIError, match="containerEdits"):
        cdi.write_spec(path, bad)
    bad_uid = cdi.build_claim_spec("u", [cdi.ClaimDevice("channel-0", cdi.ContainerEdits(
        device_nodes=(cdi.DeviceNode("/dev/x", major=1, minor=0),)))])  # fmt: skip
    bad_uid["devices"][0]["containerEdits"]["deviceNodes"][0]["uid"] = -1
    with pytest.raises(cdi.CDIError):
        cdi.write_spec(path, bad_uid)
    assert not path.exists()


def test_base_spec_validates() -> None:
    spec = cdi.build_base_spec(cdi.ContainerEdits(env=("NVIDIA_VISIBLE_DEVICES=void",)))
    cdi.validate_spec(spec)
    assert spec["devices"][0]["name"] == "all"
    assert cdi.BASE_DEVICE_ID == "k8s.compute-domain.nvidia.com/device=all"
