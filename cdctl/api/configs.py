"""Opaque device configs of the compute-domain driver: ComputeDomainChannelConfig, ComputeDomainDaemonConfig.

Called by the kubelet plugin's prepare path (strict decoding of the configs users and the controller put in
ResourceClaims and DeviceClasses) and unprepare path (lenient decoding of what was already accepted), and by
the controller when it renders claim templates. Every decoding or validation error names the object and the
field. Unlike the Go driver, an `allocationMode` other than "", Single or All is rejected, and `domainID` must
be a UUID (the ComputeDomain's uid: the daemon's directory on the node is named after it). Error texts repeat
at most about 200 characters of the input. The chart's claim admission policy
(charts/cdctl/files/admission-policies.yaml, docs/admission.md) refuses the same configs at `kubectl apply`
in the same words: change both together.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cdctl.domain.errors import ECHO_LIMIT, InvalidInput, echo, is_uuid

API_VERSION = "resource.nvidia.com/v1beta1"
CHANNEL_CONFIG_KIND = "ComputeDomainChannelConfig"
DAEMON_CONFIG_KIND = "ComputeDomainDaemonConfig"
ALLOCATION_MODE_SINGLE = "Single"
ALLOCATION_MODE_ALL = "All"
ALLOCATION_MODES = ("", ALLOCATION_MODE_SINGLE, ALLOCATION_MODE_ALL)

_CHANNEL_FIELDS = {"apiVersion", "kind", "domainID", "allocationMode"}
_DAEMON_FIELDS = {"apiVersion", "kind", "domainID"}


def _validate_domain_id(domain_id: str, obj: str) -> None:
    if not domain_id:
        raise InvalidInput(obj, "domainID", "domainID cannot be empty")
    if not is_uuid(domain_id):
        raise InvalidInput(
            obj, "domainID", f"domainID must be a ComputeDomain uid (a UUID), got {echo(domain_id)}"
        )


@dataclass(frozen=True, slots=True)
class ChannelConfig:
    """ComputeDomainChannelConfig: which domain's channel, and one channel (Single) or every channel (All)."""

    domain_id: str = ""
    allocation_mode: str = ""
    kind: str = CHANNEL_CONFIG_KIND

    def validate(self, obj: str) -> None:
        _validate_domain_id(self.domain_id, obj)
        if self.allocation_mode not in ALLOCATION_MODES:
            raise InvalidInput(
                obj,
                "allocationMode",
                f"unknown allocationMode {echo(self.allocation_mode)} (want Single or All)",
            )

    @property
    def all_channels(self) -> bool:
        return self.allocation_mode == ALLOCATION_MODE_ALL

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"apiVersion": API_VERSION, "kind": self.kind, "domainID": self.domain_id}
        if self.allocation_mode:
            out["allocationMode"] = self.allocation_mode
        return out


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    """ComputeDomainDaemonConfig: the IMEX daemon of one domain on this node."""

    domain_id: str = ""
    kind: str = DAEMON_CONFIG_KIND

    def validate(self, obj: str) -> None:
        _validate_domain_id(self.domain_id, obj)

    def to_json(self) -> dict[str, Any]:
        return {"apiVersion": API_VERSION, "kind": self.kind, "domainID": self.domain_id}


DeviceConfig = ChannelConfig | DaemonConfig


def _as_mapping(raw: Any, obj: str) -> Mapping[str, Any]:
    if isinstance(raw, bytes | str):
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise InvalidInput(
                obj, "parameters", f"error decoding config parameters: {echo(str(exc))}"
            ) from exc
    if not isinstance(raw, Mapping):
        raise InvalidInput(obj, "parameters", "error decoding config parameters: not a JSON object")
    return raw


def _string(data: Mapping[str, Any], key: str, obj: str) -> str:
    value = data.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidInput(obj, key, f"error decoding config parameters: {key} must be a string")
    return value


def decode_config(raw: Any, *, strict: bool, obj: str) -> DeviceConfig:
    """Decode opaque `parameters` (JSON text or object). `strict` rejects unknown fields (user input)."""
    data = _as_mapping(raw, obj)
    api_version = _string(data, "apiVersion", obj)
    kind = _string(data, "kind", obj)
    if api_version != API_VERSION:
        raise InvalidInput(
            obj, "apiVersion", f"error decoding config parameters: unsupported apiVersion {echo(api_version)}"
        )
    if kind == CHANNEL_CONFIG_KIND:
        allowed = _CHANNEL_FIELDS
    elif kind == DAEMON_CONFIG_KIND:
        allowed = _DAEMON_FIELDS
    else:
        raise InvalidInput(obj, "kind", f"error decoding config parameters: unsupported kind {echo(kind)}")
    if strict:
        for key in data:
            if key not in allowed:
                shown = json.dumps(key)
                if len(shown) > ECHO_LIMIT:
                    shown = f"{shown[:ECHO_LIMIT]}... ({len(key)} characters)"
                problem = f"strict decoding error: unknown field {shown}"
                field = key if len(key) <= 60 else f"{key[:60]}..."
                raise InvalidInput(obj, field, f"error decoding config parameters: {problem}")
    domain_id = _string(data, "domainID", obj)
    if kind == CHANNEL_CONFIG_KIND:
        return ChannelConfig(domain_id=domain_id, allocation_mode=_string(data, "allocationMode", obj))
    return DaemonConfig(domain_id=domain_id)
