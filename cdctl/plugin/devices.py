"""The node's allocatable devices, ResourceClaim allocations, and the config mapping and conflict checks.

Pure functions used by the prepare path (cdctl.plugin.prepare); ports of the Go plugin's
GetOpaqueDeviceConfigs, GetConfigResultsMap, requested non-admin devices, the overlap check against completed
claims and the IMEX channel check. Claims arrive as resource.k8s.io JSON (results and configs have the same
shape in v1, v1beta2 and v1beta1).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cdctl.api.configs import ChannelConfig, DaemonConfig, DeviceConfig, decode_config
from cdctl.domain.claims import ClaimRecord
from cdctl.domain.errors import PermanentError, RetriableError

DRIVER_NAME = "compute-domain.nvidia.com"
MAX_CHANNELS = 2048
CHANNEL = "channel"
DAEMON = "daemon"
SOURCE_CLASS = "FromClass"
SOURCE_CLAIM = "FromClaim"


def device_type(name: str) -> tuple[str, int] | None:
    """(`channel`, N) for channel-0..2047, (`daemon`, 0) for daemon-0; None if not allocatable here."""
    kind, _, number = name.rpartition("-")
    if not number.isdigit() or str(int(number)) != number:
        return None
    n = int(number)
    if kind == CHANNEL and n < MAX_CHANNELS:
        return CHANNEL, n
    if kind == DAEMON and n == 0:
        return DAEMON, n
    return None


@dataclass(frozen=True, slots=True)
class ClaimRef:
    uid: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}:{self.uid}"


@dataclass(frozen=True, slots=True)
class AllocationResult:
    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool = False


@dataclass(frozen=True, slots=True)
class AllocationConfig:
    source: str
    requests: tuple[str, ...]
    opaque: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class AllocatedClaim:
    ref: ClaimRef
    results: tuple[AllocationResult, ...]
    configs: tuple[AllocationConfig, ...]
    allocation_id: str

    def own_results(self, driver: str = DRIVER_NAME) -> list[AllocationResult]:
        return [r for r in self.results if r.driver == driver]


def parse_claim(obj: Mapping[str, Any]) -> AllocatedClaim:
    """A ResourceClaim object to its allocation; a claim without `status.allocation` is a permanent error."""
    meta = obj.get("metadata") or {}
    ref = ClaimRef(str(meta.get("uid", "")), str(meta.get("namespace", "")), str(meta.get("name", "")))
    allocation = (obj.get("status") or {}).get("allocation")
    if not allocation:
        raise PermanentError(f"no allocation set in ResourceClaim {ref.name} in namespace {ref.namespace}")
    devices = allocation.get("devices") or {}
    results = tuple(
        AllocationResult(
            request=str(r.get("request", "")),
            driver=str(r.get("driver", "")),
            pool=str(r.get("pool", "")),
            device=str(r.get("device", "")),
            admin_access=bool(r.get("adminAccess") or False),
        )
        for r in devices.get("results") or []
    )
    configs = tuple(
        AllocationConfig(
            source=str(c.get("source", "")),
            requests=tuple(str(x) for x in c.get("requests") or []),
            opaque=c.get("opaque"),
        )
        for c in devices.get("config") or []
    )
    ident = json.dumps(
        {
            "results": [[r.request, r.driver, r.pool, r.device] for r in results],
            "at": allocation.get("allocationTimestamp", ""),
        },
        sort_keys=True,
    )
    return AllocatedClaim(ref, results, configs, hashlib.sha256(ident.encode()).hexdigest()[:16])


@dataclass(frozen=True, slots=True)
class OpaqueConfig:
    """A decoded config and the requests it applies to (empty: every request of the claim)."""

    requests: tuple[str, ...]
    config: DeviceConfig
    default: bool = False


def get_opaque_device_configs(
    configs: Iterable[AllocationConfig],
    *,
    strict: bool = True,
    obj: str = "ResourceClaim",
    driver: str = DRIVER_NAME,
) -> list[OpaqueConfig]:
    """This driver's configs, class configs first then claim configs (lowest to highest precedence)."""
    by_source: dict[str, list[AllocationConfig]] = {SOURCE_CLASS: [], SOURCE_CLAIM: []}
    for c in configs:
        if c.source not in by_source:
            raise PermanentError(f"invalid config source: {c.source}")
        by_source[c.source].append(c)
    out: list[OpaqueConfig] = []
    for source in (SOURCE_CLASS, SOURCE_CLAIM):
        for c in by_source[source]:
            if c.opaque is None:
                raise PermanentError("only opaque parameters are supported by this driver")
            if c.opaque.get("driver") != driver:
                continue
            decoded = decode_config(c.opaque.get("parameters"), strict=strict, obj=obj)
            out.append(OpaqueConfig(c.requests, decoded))
    return out


def _matches(config_requests: tuple[str, ...], request: str) -> bool:
    base = request.split("/", 1)[0]
    return request in config_requests or base in config_requests


def _kind_of(config: DeviceConfig) -> str:
    return CHANNEL if isinstance(config, ChannelConfig) else DAEMON


def get_config_results_map(
    claim: AllocatedClaim, configs: list[OpaqueConfig], driver: str = DRIVER_NAME
) -> list[tuple[OpaqueConfig, list[AllocationResult]]]:
    """Each of this driver's results under the config that applies to it, grouped per config.

    Defaults (lowest precedence: daemon, then channel) come first; scanning from the highest precedence, an
    explicit request match wins (a config of the wrong type for the device is an error), else the first
    catch-all config of the device's type.
    """
    candidates = [
        OpaqueConfig((), DaemonConfig(), default=True),
        OpaqueConfig((), ChannelConfig(), default=True),
        *configs,
    ]
    groups: dict[int, list[AllocationResult]] = {}
    for result in claim.own_results(driver):
        typed = device_type(result.device)
        if typed is None:
            raise PermanentError(f"requested device is not allocatable: {result.device}")
        kind = typed[0]
        chosen: int | None = None
        for i in range(len(candidates) - 1, -1, -1):
            cand = candidates[i]
            if cand.requests and _matches(cand.requests, result.request):
                if _kind_of(cand.config) != kind:
                    raise PermanentError(f"cannot apply {cand.config.kind} to request: {result.request}")
                chosen = i
                break
            if not cand.requests and _kind_of(cand.config) == kind:
                chosen = i
                break
        assert chosen is not None  # the defaults cover both kinds
        groups.setdefault(chosen, []).append(result)
    return [(candidates[i], groups[i]) for i in sorted(groups)]


def requested_non_admin_devices(claim: AllocatedClaim, driver: str = DRIVER_NAME) -> list[str]:
    return [r.device for r in claim.own_results(driver) if not r.admin_access]


def validate_no_overlapping_prepared_devices(
    claim: AllocatedClaim, records: Iterable[ClaimRecord], driver: str = DRIVER_NAME
) -> None:
    """A non-admin device of this claim held non-admin by another completed claim: retriable error."""
    wanted = set(requested_non_admin_devices(claim, driver))
    for rec in records:
        if rec.claim_uid == claim.ref.uid or not rec.completed:
            continue
        for device in rec.requested:
            if device in wanted:
                raise RetriableError(
                    f"requested device {device} is already allocated to different claim {rec.claim_uid}",
                    delay=1.0,
                )


def assert_imex_channel_not_allocated(records: Iterable[ClaimRecord], channel: int, claim_uid: str) -> None:
    for rec in records:
        if rec.claim_uid != claim_uid and rec.completed and channel in rec.channels:
            raise RetriableError(
                f"channel {channel} already allocated by claim {rec.claim_uid} (according to checkpoint)",
                delay=1.0,
            )
