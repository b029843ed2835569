"""Fake GPU-driver files for a simulated node: the `/proc` entries the kubelet plugin reads.

`write_driver_files(directory, boot_id)` writes a `/proc/devices` with the NVIDIA character device majors
(`nvidia-caps-imex-channels`, `nvidia-caps`, ...), the `fabric-imex-mgmt` capability file (`DeviceFileMinor`,
`DeviceFileMode`) and a boot ID, and returns their paths for the plugin's `proc_devices`,
`fabric_imex_mgmt_cap` and `boot_id_path` settings. Writing a new boot ID simulates a node reboot.
Used by the rack launcher and the tests.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

# Majors as a GB200 node reports them; only the names matter to the plugin, the numbers go into CDI specs.
CHARACTER_DEVICES = (
    (1, "mem"),
    (195, "nvidia"),
    (234, "nvidia-caps-imex-channels"),
    (235, "nvidia-caps"),
    (236, "nvidia-uvm"),
    (237, "nvidia-nvswitch"),
)
FABRIC_IMEX_MGMT_MINOR = 1
FABRIC_IMEX_MGMT_MODE = 256  # 0400


@dataclass(frozen=True)
class DriverFiles:
    proc_devices: Path
    fabric_imex_mgmt_cap: Path
    boot_id: Path


def write_driver_files(directory: Path, boot_id: str | None = None) -> DriverFiles:
    """Create (or refresh) the fake driver files under `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    files = DriverFiles(directory / "devices", directory / "fabric-imex-mgmt", directory / "boot_id")
    lines = [
        "Character devices:",
        *(f"{major:3d} {name}" for major, name in CHARACTER_DEVICES),
        "",
        "Block devices:",
        "  8 sd",
    ]
    files.proc_devices.write_text("\n".join(lines) + "\n")
    capability = (FABRIC_IMEX_MGMT_MINOR, FABRIC_IMEX_MGMT_MODE)
    files.fabric_imex_mgmt_cap.write_text(
        "DeviceFileMinor: {}\nDeviceFileMode: {}\nDeviceFileModify: 1\n".format(*capability)
    )
    files.boot_id.write_text(f"{boot_id or uuid.uuid4()}\n")
    return files


def reboot(files: DriverFiles) -> str:
    """A new boot ID, as after a node reboot; returns it."""
    boot_id = str(uuid.uuid4())
    files.boot_id.write_text(f"{boot_id}\n")
    return boot_id
