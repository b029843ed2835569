"""CDI spec files of the compute-domain driver: per-claim specs, the base `device` spec, device-node facts.

Called by the prepare path (write a claim's spec, atomically, after its event is durable), the unprepare path
(remove it) and plugin start-up (base spec, device majors). Vendor `k8s.compute-domain.nvidia.com`, classes
`claim` and `device`; device ids `k8s.compute-domain.nvidia.com/claim=<claimUID>-channel-<N>` / `-daemon-<N>`.
Every spec is validated against the CDI JSON schema shipped in `cdi_schema/` before it is written.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from referencing import Registry, Resource

from cdctl.domain.errors import PermanentError

DRIVER_NAME = "compute-domain.nvidia.com"
VENDOR = "k8s." + DRIVER_NAME
CLAIM_CLASS = "claim"
DEVICE_CLASS = "device"
CLAIM_KIND = f"{VENDOR}/{CLAIM_CLASS}"
DEVICE_KIND = f"{VENDOR}/{DEVICE_CLASS}"
BASE_DEVICE_ID = f"{DEVICE_KIND}=all"
CHANNEL_DEVICE_MAJOR_NAME = "nvidia-caps-imex-channels"
CAPS_DEVICE_MAJOR_NAME = "nvidia-caps"
CHANNEL_DEV_DIR = "/dev/nvidia-caps-imex-channels"
FABRIC_IMEX_MGMT_CAP = "/proc/driver/nvidia/capabilities/fabric-imex-mgmt"
DEFAULT_PROC_DEVICES = "/proc/devices"


class CDIError(PermanentError):
    """A spec that cannot be built or validated, or a device major that cannot be found."""


def claim_spec_path(cdi_root: str | Path, claim_uid: str) -> Path:
    return Path(cdi_root) / f"{VENDOR}-{CLAIM_CLASS}_{claim_uid.replace('/', '_')}.yaml"


def base_spec_path(cdi_root: str | Path) -> Path:
    return Path(cdi_root) / f"{VENDOR}-{DEVICE_CLASS}_base.yaml"


def claim_device_name(claim_uid: str, canonical: str) -> str:
    """`<claimUID>-<channel-N|daemon-N>`: unique per claim: a name never changes content."""
    return f"{claim_uid}-{canonical}"


def claim_device_id(claim_uid: str, canonical: str) -> str:
    return f"{CLAIM_KIND}={claim_device_name(claim_uid, canonical)}"


@dataclass(frozen=True, slots=True)
class DeviceNode:
    path: str
    major: int
    minor: int
    file_mode: int = 0o666

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "type": "c",
            "major": self.major,
            "minor": self.minor,
            "fileMode": self.file_mode,
        }


@dataclass(frozen=True, slots=True)
class Mount:
    host_path: str
    container_path: str
    options: tuple[str, ...] = ("rw", "nosuid", "nodev", "bind")

    def to_json(self) -> dict[str, Any]:
        return {
            "hostPath": self.host_path,
            "containerPath": self.container_path,
            "options": list(self.options),
        }


@dataclass(frozen=True, slots=True)
class ContainerEdits:
    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()

    def empty(self) -> bool:
        return not (self.env or self.device_nodes or self.mounts)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.env:
            out["env"] = list(self.env)
        if self.device_nodes:
            out["deviceNodes"] = [d.to_json() for d in self.device_nodes]
        if self.mounts:
            out["mounts"] = [m.to_json() for m in self.mounts]
        return out


@dataclass(frozen=True, slots=True)
class ClaimDevice:
    """One device of a claim spec: its canonical name (`channel-0`, `daemon-0`) and the edits it carries."""

    canonical: str
    edits: ContainerEdits = field(default_factory=ContainerEdits)


def channel_device_node(channel: int, major: int) -> DeviceNode:
    return DeviceNode(path=f"{CHANNEL_DEV_DIR}/channel{channel}", major=major, minor=channel, file_mode=0o666)


def minimum_version(names: list[str]) -> str:
    """The lowest CDI version that can load the spec: a name starting with a digit needs 0.5.0."""
    return "0.5.0" if any(n[:1].isdigit() for n in names) else "0.3.0"


def build_claim_spec(claim_uid: str, devices: list[ClaimDevice]) -> dict[str, Any]:
    names = [claim_device_name(claim_uid, d.canonical) for d in devices]
    return {
        "cdiVersion": minimum_version(names),
        "kind": CLAIM_KIND,
        "devices": [
            {"name": name, "containerEdits": d.edits.to_json()}
            for name, d in zip(names, devices, strict=True)
        ],
    }


def build_base_spec(edits: ContainerEdits) -> dict[str, Any]:
    """The `device=all` spec a daemon container gets in addition to its claim device."""
    return {
        "cdiVersion": "0.3.0",
        "kind": DEVICE_KIND,
        "devices": [{"name": "all", "containerEdits": edits.to_json()}],
    }


@cache
def _validator() -> jsonschema.protocols.Validator:
    base = resources.files("cdctl.plugin") / "cdi_schema"
    schema = json.loads((base / "schema.json").read_text())
    defs = json.loads((base / "defs.json").read_text())
    from referencing.jsonschema import DRAFT7

    resource = Resource.from_contents(defs, default_specification=DRAFT7)
    registry: Registry[Any] = Registry().with_resource("defs.json", resource)
    cls = jsonschema.validators.validator_for(schema)
    validator: jsonschema.protocols.Validator = cls(schema, registry=registry)
    return validator


_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml when present: about 4x faster


def validate_spec(spec: dict[str, Any]) -> None:
    validator = _validator()
    if validator.is_valid(spec):
        return
    errors = sorted(validator.iter_errors(spec), key=lambda e: list(e.path))
    if errors:
        where = "/".join(str(p) for p in errors[0].path) or "(root)"
        raise CDIError(f"CDI spec {spec.get('kind')!r} does not validate at {where}: {errors[0].message}")


def write_spec(path: Path, spec: dict[str, Any], *, fsync: bool = True) -> None:
    """Validate, then write `path` atomically: a temp file in the same directory, fsync, rename."""
    validate_spec(spec)
    data = ("---\n" + yaml.dump(spec, Dumper=_DUMPER, sort_keys=False)).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="spec.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o644)
            fh.write(data)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def remove_spec(path: Path) -> bool:
    """Remove a spec file; a missing file is fine (unprepare is idempotent). True if one was removed."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def read_spec(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    loaded = yaml.safe_load(text)
    return loaded if isinstance(loaded, dict) else None


def device_major(name: str, proc_devices: str | Path = DEFAULT_PROC_DEVICES) -> int:
    """The character-device major registered under `name` in /proc/devices (exactly one match required)."""
    try:
        text = Path(proc_devices).read_text()
    except OSError as exc:
        raise CDIError(f"reading {proc_devices}: {exc}") from exc
    char_part = text.split("Block devices:", 1)[0]
    if "Character devices:" not in char_part:
        raise CDIError(f"{proc_devices}: no 'Character devices:' section")
    char_part = char_part.split("Character devices:", 1)[1]
    matches = re.findall(rf"^\s*([0-9]+) {re.escape(name)}$", char_part, flags=re.MULTILINE)
    if len(matches) != 1:
        raise CDIError(
            f"{proc_devices}: expected exactly one character device {name!r}, found {len(matches)}"
        )
    major = int(matches[0])
    if major >= 2**31:
        raise CDIError(f"{proc_devices}: major {major} of {name!r} out of range")
    return major


@dataclass(frozen=True, slots=True)
class Capability:
    minor: int
    mode: int


def read_capability(path: str | Path) -> Capability:
    """Parse an nvidia capability file (`DeviceFileMinor: N`, `DeviceFileMode: 438`, ...)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise CDIError(f"reading capability {path}: {exc}") from exc
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            values[key.strip()] = value.strip()
    try:
        return Capability(minor=int(values["DeviceFileMinor"]), mode=int(values["DeviceFileMode"]))
    except (KeyError, ValueError) as exc:
        raise CDIError(f"capability {path}: missing or bad DeviceFileMinor/DeviceFileMode") from exc
