"""The node's allocatable devices, ResourceClaim allocations, and the config mapping and conflict checks.

Pure functions used by the prepare path (cdctl.plugin.prepare); ports of the Go plugin's
GetOpaqueDeviceConfigs, GetConfigResultsMap, requested non-admin devices, the overlap check against completed
claims and the IMEX channel check. Claims arrive as resource.k8s.io JSON (results and configs have the same
shape in v1, v1beta2 and v1beta1).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cdctl.api.configs import ChannelConfig, DaemonConfig, DeviceConfig, decode_config
from cdctl.domain.claims import ClaimRecord
from cdctl.domain.errors import InvalidInput, PermanentError, RetriableError, clip, echo, require_uuid

DRIVER_NAME = "compute-domain.nvidia.com"
MAX_CHANNELS = 2048
CHANNEL = "channel"
DAEMON = "daemon"
SOURCE_CLASS = "FromClass"
SOURCE_CLAIM = "FromClaim"


PUBLISHED_DEVICES = {"channel-0": CHANNEL, "daemon-0": DAEMON}
"""The devices this node publishes in its ResourceSlice (cdctl.plugin.app); nothing else is prepared."""


def device_type(name: str, published: Mapping[str, str] = PUBLISHED_DEVICES) -> tuple[str, int] | None:
    """(`channel`, 0) for channel-0, (`daemon`, 0) for daemon-0: the published devices; None for any other
    name (a `channel-1` was never published, so a claim naming it was not allocated by the scheduler).
    `published`: the names this node publishes (channel isolation's shared devices, cdctl.plugin.channels)."""
    kind = published.get(name)
    return (kind, 0) if kind is not None else None


@dataclass(frozen=True, slots=True)
class ClaimRef:
    uid: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{clip(self.namespace, 100)}/{clip(self.name, 100)}:{clip(self.uid, 60)}"


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def check_claim_ref(ref: ClaimRef) -> None:
    """A claim reference from a kubelet request, checked before any request or path is made from it: the
    uid a UUID, the namespace a DNS label, the name a DNS subdomain (an empty name would turn the claim's GET
    into a LIST of the namespace)."""
    require_uuid(ref.uid, "claim reference", "uid")
    if not ref.namespace or len(ref.namespace) > 63 or not _DNS_LABEL.fullmatch(ref.namespace):
        raise InvalidInput("claim reference", "namespace", f"not a namespace name: {echo(ref.namespace)}")
    if not ref.name or len(ref.name) > 253 or not _DNS_SUBDOMAIN.fullmatch(ref.name):
        raise InvalidInput("claim reference", "name", f"not a ResourceClaim name: {echo(ref.name)}")


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
class OwnerRef:
    """One of the claim's `metadata.ownerReferences`."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool = False


@dataclass(frozen=True, slots=True)
class ConsumerRef:
    """One of the claim's `status.reservedFor` entries."""

    resource: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class AllocatedClaim:
    ref: ClaimRef
    results: tuple[AllocationResult, ...]
    configs: tuple[AllocationConfig, ...]
    allocation_id: str
    owners: tuple[OwnerRef, ...] = ()
    reserved_for: tuple[ConsumerRef, ...] = ()

    def own_results(self, driver: str = DRIVER_NAME) -> list[AllocationResult]:
        return [r for r in self.results if r.driver == driver]


def _mapping(value: Any, obj: str, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInput(obj, field, f"must be an object, got {type(value).__name__}")
    return value


def _items(value: Any, obj: str, field: str) -> list[Mapping[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidInput(obj, field, f"must be a list, got {type(value).__name__}")
    return [_mapping(v, obj, f"{field}[{i}]") if v is not None else {} for i, v in enumerate(value)]


def _text(data: Mapping[str, Any], key: str, obj: str, field: str) -> str:
    value = data.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidInput(obj, f"{field}.{key}", f"must be a string, got {type(value).__name__}")
    return value


def claim_object_name(namespace: str, name: str) -> str:
    """`ResourceClaim <namespace>/<name>` for error texts, each part cut to about 100 characters."""
    return f"ResourceClaim {clip(namespace, 100)}/{clip(name, 100)}"


def parse_claim(obj: Any) -> AllocatedClaim:
    """A ResourceClaim object to its allocation. Any shape the API server would not serve is an InvalidInput
    naming the field; a claim without `status.allocation` is a permanent error."""
    meta = _mapping(obj, "ResourceClaim", "(object)").get("metadata")
    meta = _mapping(meta, "ResourceClaim", "metadata")
    names = [_text(meta, k, "ResourceClaim", "metadata") for k in ("uid", "namespace", "name")]
    ref = ClaimRef(*names)
    what = claim_object_name(ref.namespace, ref.name)
    owners = tuple(
        OwnerRef(
            api_version=_text(o, "apiVersion", what, f"metadata.ownerReferences[{i}]"),
            kind=_text(o, "kind", what, f"metadata.ownerReferences[{i}]"),
            name=_text(o, "name", what, f"metadata.ownerReferences[{i}]"),
            uid=_text(o, "uid", what, f"metadata.ownerReferences[{i}]"),
            controller=o.get("controller") is True,
        )
        for i, o in enumerate(_items(meta.get("ownerReferences"), what, "metadata.ownerReferences"))
    )
    status = _mapping(obj.get("status"), what, "status")
    reserved = tuple(
        ConsumerRef(
            resource=_text(r, "resource", what, f"status.reservedFor[{i}]"),
            name=_text(r, "name", what, f"status.reservedFor[{i}]"),
            uid=_text(r, "uid", what, f"status.reservedFor[{i}]"),
        )
        for i, r in enumerate(_items(status.get("reservedFor"), what, "status.reservedFor"))
    )
    allocation = _mapping(status.get("allocation"), what, "status.allocation")
    if not allocation:
        name, namespace = clip(ref.name, 100), clip(ref.namespace, 100)
        raise PermanentError(f"no allocation set in ResourceClaim {name} in namespace {namespace}")
    devices = _mapping(allocation.get("devices"), what, "status.allocation.devices")
    results = []
    for i, r in enumerate(_items(devices.get("results"), what, "status.allocation.devices.results")):
        field = f"status.allocation.devices.results[{i}]"
        admin = r.get("adminAccess")
        if admin is not None and not isinstance(admin, bool):
            raise InvalidInput(what, f"{field}.adminAccess", f"must be a boolean, got {type(admin).__name__}")
        request, driver, pool, device = (
            _text(r, k, what, field) for k in ("request", "driver", "pool", "device")
        )
        results.append(AllocationResult(request, driver, pool, device, admin_access=bool(admin)))
    configs = []
    for i, c in enumerate(_items(devices.get("config"), what, "status.allocation.devices.config")):
        field = f"status.allocation.devices.config[{i}]"
        requests = c.get("requests")
        if requests is not None and (
            not isinstance(requests, list) or not all(isinstance(x, str) for x in requests)
        ):
            raise InvalidInput(what, f"{field}.requests", "must be a list of strings")
        opaque = c.get("opaque")
        configs.append(
            AllocationConfig(
                source=_text(c, "source", what, field),
                requests=tuple(requests or ()),
                opaque=None if opaque is None else _mapping(opaque, what, f"{field}.opaque"),
            )
        )
    at = allocation.get("allocationTimestamp")
    ident = json.dumps(
        {
            "results": [[r.request, r.driver, r.pool, r.device] for r in results],
            "at": at if isinstance(at, str) else "",
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
    return AllocatedClaim(ref, tuple(results), tuple(configs), digest, owners, reserved)


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
            found = echo(c.source) if c.source else "none (the field is empty or null)"
            raise PermanentError(f"invalid config source: {found}; allowed: {SOURCE_CLASS} or {SOURCE_CLAIM}")
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


def _names(published: Mapping[str, str]) -> str:
    names = list(published)
    if len(names) > 3:
        return f"{', '.join(names[:2])}, ... {names[-1]}"
    return " and ".join(names)


def _matches(config_requests: tuple[str, ...], request: str) -> bool:
    base = request.split("/", 1)[0]
    return request in config_requests or base in config_requests


def _kind_of(config: DeviceConfig) -> str:
    return CHANNEL if isinstance(config, ChannelConfig) else DAEMON


def get_config_results_map(
    claim: AllocatedClaim,
    configs: list[OpaqueConfig],
    driver: str = DRIVER_NAME,
    published: Mapping[str, str] = PUBLISHED_DEVICES,
    pool: str | None = None,
) -> list[tuple[OpaqueConfig, list[AllocationResult]]]:
    """Each of this driver's results under the config that applies to it, grouped per config.

    Defaults (lowest precedence: daemon, then channel) come first; scanning from the highest precedence, an
    explicit request match wins (a config of the wrong type for the device is an error), else the first
    catch-all config of the device's type. `pool`: the pool this node publishes (None: not checked).
    """
    candidates = [
        OpaqueConfig((), DaemonConfig(), default=True),
        OpaqueConfig((), ChannelConfig(), default=True),
        *configs,
    ]
    groups: dict[int, list[AllocationResult]] = {}
    for result in check_own_results(claim, driver, pool):
        typed = device_type(result.device, published)
        if typed is None:
            raise PermanentError(
                f"requested device is not allocatable: {clip(result.device)} "
                f"(this node publishes only {_names(published)})"
            )
        kind = typed[0]
        chosen: int | None = None
        for i in range(len(candidates) - 1, -1, -1):
            cand = candidates[i]
            if cand.requests and _matches(cand.requests, result.request):
                if _kind_of(cand.config) != kind:
                    raise PermanentError(
                        f"cannot apply {cand.config.kind} to request: {clip(result.request)}"
                    )
                chosen = i
                break
            if not cand.requests and _kind_of(cand.config) == kind:
                chosen = i
                break
        assert chosen is not None  # the defaults cover both kinds
        groups.setdefault(chosen, []).append(result)
    return [(candidates[i], groups[i]) for i in sorted(groups)]


def check_own_results(
    claim: AllocatedClaim, driver: str = DRIVER_NAME, pool: str | None = None
) -> list[AllocationResult]:
    """The claim's results of `driver`, refused when there are none (the scheduler gave this driver nothing
    to prepare: preparing it would record a claim with no device as prepared) or when one names a pool
    other than `pool`, the one this node publishes (the scheduler allocates only what we published)."""
    own = claim.own_results(driver)
    what = claim_object_name(claim.ref.namespace, claim.ref.name)
    if not own:
        others = sorted({r.driver for r in claim.results})
        belongs = (
            f"its results belong to {', '.join(echo(d, 80) for d in others[:3])}"
            + (f" and {len(others) - 3} more drivers" if len(others) > 3 else "")
            if others else "it has no allocation results"
        )  # fmt: skip
        raise PermanentError(f"{what} has no device of driver {driver} to prepare: {belongs}")
    for i, result in enumerate(claim.results):
        if result.driver == driver and pool is not None and result.pool != pool:
            raise PermanentError(
                f"{what}: status.allocation.devices.results[{i}] is allocated from pool {echo(result.pool)}, "
                f"which this node does not publish (its pool is {pool!r})"
            )
    return own


def requested_non_admin_devices(claim: AllocatedClaim, driver: str = DRIVER_NAME) -> list[str]:
    return [r.device for r in claim.own_results(driver) if not r.admin_access]


def validate_no_overlapping_prepared_devices(
    claim: AllocatedClaim,
    records: Iterable[ClaimRecord],
    driver: str = DRIVER_NAME,
    shared: frozenset[str] = frozenset(),
) -> None:
    """A non-admin device of this claim held non-admin by another completed claim: retriable error.
    `shared`: devices many claims hold at once by design (a multi-allocatable device)."""
    wanted = set(requested_non_admin_devices(claim, driver)) - shared
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
