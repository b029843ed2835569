"""Resolve CDI device IDs to container edits, as a CDI-enabled container runtime does.

`resolve(cdi_dirs, device_ids)` reads the CDI spec files (YAML or JSON) in the given directories and merges,
for every requested `vendor/class=name`, the spec's top-level `containerEdits` (once per spec) and the
device's own `containerEdits`: environment, device nodes and mounts. An ID no spec defines is an error, as it
is for the runtime. Used by the simulated container runtime (cdctl.sim.node.processruntime).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class UnresolvableDevice(Exception):
    """A CDI device ID that no spec in the CDI directories defines."""


@dataclass
class ResolvedEdits:
    env: dict[str, str] = field(default_factory=dict)
    device_nodes: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)

    def add(self, edits: dict[str, Any]) -> None:
        for entry in edits.get("env") or []:
            key, _, value = str(entry).partition("=")
            self.env[key] = value
        self.device_nodes += list(edits.get("deviceNodes") or [])
        self.mounts += list(edits.get("mounts") or [])


# libyaml's safe loader when PyYAML has it (ten times faster: every daemon pod start and every worker check
# reads its node's CDI specs), else the pure-Python one; both accept the same documents.
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text()
        spec = json.loads(text) if path.suffix == ".json" else yaml.load(text, Loader=_SAFE_LOADER)
    except (OSError, ValueError, yaml.YAMLError):
        return None
    return spec if isinstance(spec, dict) and "kind" in spec else None


def load_specs(cdi_dirs: list[Path]) -> dict[str, dict[str, Any]]:
    """kind -> {"devices": {name: (spec file, spec, device containerEdits)}} over every spec file."""
    specs: dict[str, dict[str, Any]] = {}
    for directory in cdi_dirs:
        if not directory.is_dir():
            continue
        for path in sorted(directory.iterdir()):
            if path.suffix not in (".yaml", ".yml", ".json"):
                continue
            spec = _load(path)
            if spec is None:
                continue
            entry = specs.setdefault(str(spec["kind"]), {"devices": {}})
            for device in spec.get("devices") or []:
                entry["devices"][str(device.get("name"))] = (path, spec, device.get("containerEdits") or {})
    return specs


def resolve(cdi_dirs: list[Path], device_ids: list[str]) -> ResolvedEdits:
    specs = load_specs(cdi_dirs)
    resolved = ResolvedEdits()
    applied_specs: set[Path] = set()
    for device_id in device_ids:
        kind, equals, name = device_id.partition("=")
        found = specs.get(kind, {}).get("devices", {}).get(name) if equals else None
        if found is None:
            raise UnresolvableDevice(f"unresolvable CDI devices {device_id}")
        path, spec, edits = found
        if path not in applied_specs:
            applied_specs.add(path)
            resolved.add(spec.get("containerEdits") or {})
        resolved.add(edits)
    return resolved
