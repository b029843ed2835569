"""Feature gates: the Go driver's gate names and defaults plus HostManagedIMEX, parsed from `--feature-gates`.

Called by every command entry point (controller, kubelet plugin, daemon) with the `--feature-gates` /
`FEATURE_GATES` text ("A=true,B=false", a trailing comma allowed: the controller forwards its whole map that
way) and, for the controller and the plugin, the Go driver's `--imex-mode` / `IMEX_MODE`.
`parse_feature_gates` returns an immutable `FeatureGates`; unknown names and non-boolean values are rejected
with an error naming the entry and listing the known gates. `HostManagedIMEX` forces the DNS-names and cliques
gates off before the dependency rules are checked, and the forced changes are returned so the caller can log
them.

Upstream compatibility (docs/upgrade-from-nvidia.md): the Go driver's host-managed mode is the pair
`HostManagedIMEXDaemon=true` (which only unlocks the mode) and IMEX mode `hostManaged`; that pair is an
alias of `HostManagedIMEX=true`, mode `driverManaged` of `HostManagedIMEX=false`, and a contradiction between
the two spellings is refused. The Go driver's GPU-side gates are accepted and ignored (listed in `ignored`,
for the caller to log once); its ComputeDomain-side gates that cdctl does not implement are accepted only at
their default (false).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from cdctl.domain.errors import InvalidInput

IMEX_DAEMONS_WITH_DNS_NAMES = "IMEXDaemonsWithDNSNames"
COMPUTE_DOMAIN_CLIQUES = "ComputeDomainCliques"
CRASH_ON_NVLINK_FABRIC_ERRORS = "CrashOnNVLinkFabricErrors"
HOST_MANAGED_IMEX = "HostManagedIMEX"
TIME_SLICING_SETTINGS = "TimeSlicingSettings"
MPS_SUPPORT = "MPSSupport"
PASSTHROUGH_SUPPORT = "PassthroughSupport"
DYNAMIC_MIG = "DynamicMIG"
NVML_DEVICE_HEALTH_CHECK = "NVMLDeviceHealthCheck"
DEVICE_METADATA = "DeviceMetadata"
HOST_MANAGED_IMEX_DAEMON = "HostManagedIMEXDaemon"
IMEX_MODE_DRIVER_MANAGED = "driverManaged"
IMEX_MODE_HOST_MANAGED = "hostManaged"
IMEX_MODES = (IMEX_MODE_DRIVER_MANAGED, IMEX_MODE_HOST_MANAGED)
UPGRADE_DOC = "docs/upgrade-from-nvidia.md"


class Stage(Enum):
    ALPHA = "Alpha"
    BETA = "Beta"
    GA = "GA"


@dataclass(frozen=True, slots=True)
class GateSpec:
    default: bool
    stage: Stage


# Same names, defaults and stages as the Go driver (pkg/featuregates), plus HostManagedIMEX, plus the logging
# gates that share its registry (so a forwarded full map parses).
KNOWN_GATES: Mapping[str, GateSpec] = {
    IMEX_DAEMONS_WITH_DNS_NAMES: GateSpec(True, Stage.BETA),
    COMPUTE_DOMAIN_CLIQUES: GateSpec(True, Stage.BETA),
    CRASH_ON_NVLINK_FABRIC_ERRORS: GateSpec(True, Stage.BETA),
    HOST_MANAGED_IMEX: GateSpec(False, Stage.ALPHA),
    TIME_SLICING_SETTINGS: GateSpec(False, Stage.ALPHA),
    MPS_SUPPORT: GateSpec(False, Stage.ALPHA),
    PASSTHROUGH_SUPPORT: GateSpec(False, Stage.ALPHA),
    DYNAMIC_MIG: GateSpec(False, Stage.ALPHA),
    NVML_DEVICE_HEALTH_CHECK: GateSpec(False, Stage.ALPHA),
    DEVICE_METADATA: GateSpec(False, Stage.ALPHA),
    HOST_MANAGED_IMEX_DAEMON: GateSpec(False, Stage.ALPHA),
    "ContextualLogging": GateSpec(True, Stage.BETA),
    "LoggingAlphaOptions": GateSpec(False, Stage.ALPHA),
    "LoggingBetaOptions": GateSpec(True, Stage.BETA),
    "AllAlpha": GateSpec(False, Stage.ALPHA),
    "AllBeta": GateSpec(False, Stage.BETA),
}

# The Go driver's gates of its GPU half (pkg/featuregates, v0.5.0-dev): cdctl serves ComputeDomains only, so
# they are accepted (a FEATURE_GATES string shared by both halves parses) and have no effect here.
GPU_SIDE_GATES: Mapping[str, GateSpec] = {
    "FabricManagerPartitioning": GateSpec(False, Stage.ALPHA),
    "DRAListTypeAttributes": GateSpec(False, Stage.ALPHA),
    "ConsumableShares": GateSpec(False, Stage.ALPHA),
    "PerNodeGPUConfig": GateSpec(False, Stage.ALPHA),
}
# The Go driver's ComputeDomain-side gates cdctl does not implement: false (their default) parses, true is
# refused, since silently running without the feature would be worse than not starting.
UNIMPLEMENTED_GATES: Mapping[str, str] = {
    "NodeLocalFabricIPC": "node-local IMEX without an NVLink clique is not implemented by cdctl",
    "SeamlessUpgrades": "cdctl's plugin survives a restart without per-pod socket names",
}

OBJECT = "feature gates"


def all_gate_names() -> list[str]:
    """Every name `parse_assignments` accepts, sorted (the list an unknown gate's error gives)."""
    return sorted({*KNOWN_GATES, *GPU_SIDE_GATES, *UNIMPLEMENTED_GATES})


@dataclass(frozen=True, slots=True)
class FeatureGates:
    """The effective value of every known gate, and the overrides HostManagedIMEX forced."""

    values: Mapping[str, bool]
    overrides: tuple[str, ...] = field(default=())
    ignored: tuple[str, ...] = field(default=())  # what was accepted but has no effect, to be logged once

    def enabled(self, name: str) -> bool:
        if name not in self.values:
            raise KeyError(f"unknown feature gate {name!r}")
        return self.values[name]

    def to_string(self) -> str:
        """The whole map as "K=v,...," sorted, with a trailing comma (the form forwarded to daemons)."""
        return "".join(f"{k}={'true' if v else 'false'}," for k, v in sorted(self.values.items()))

    def explicit(self) -> dict[str, bool]:
        """Only the gates that differ from their defaults."""
        return {k: v for k, v in self.values.items() if v != KNOWN_GATES[k].default}


def defaults() -> FeatureGates:
    return FeatureGates({name: spec.default for name, spec in KNOWN_GATES.items()})


def _parse_bool(name: str, raw: str) -> bool:
    low = raw.strip().lower()
    if low in ("true", "1", "t"):
        return True
    if low in ("false", "0", "f"):
        return False
    raise InvalidInput(OBJECT, name, f"invalid value {raw!r}: want true or false")


def parse_assignments(text: str) -> dict[str, bool]:
    """Parse "A=true,B=false" into a dict; every entry is checked before any is used (atomic)."""
    out: dict[str, bool] = {}
    for raw_entry in text.split(","):
        entry = raw_entry.strip()
        if not entry:
            continue
        name, sep, value = entry.partition("=")
        name = name.strip()
        if not sep or not name:
            raise InvalidInput(OBJECT, entry, "missing bool value: want Name=true or Name=false")
        if name not in KNOWN_GATES and name not in GPU_SIDE_GATES and name not in UNIMPLEMENTED_GATES:
            known = ", ".join(all_gate_names())
            raise InvalidInput(OBJECT, name, f"unrecognized feature gate (known: {known})")
        out[name] = _parse_bool(name, value)
        if out[name] and name in UNIMPLEMENTED_GATES:
            why = UNIMPLEMENTED_GATES[name]
            raise InvalidInput(OBJECT, name, f"not supported: {why}; leave it false (see {UPGRADE_DOC})")
    return out


def validate(values: Mapping[str, bool]) -> None:
    """The Go driver's dependency rules (`feature gate validation failed: ...`)."""

    def fail(problem: str) -> None:
        raise InvalidInput(OBJECT, "validation", f"feature gate validation failed: {problem}")

    if values[COMPUTE_DOMAIN_CLIQUES] and not values[IMEX_DAEMONS_WITH_DNS_NAMES]:
        fail("feature gate ComputeDomainCliques requires IMEXDaemonsWithDNSNames to also be enabled")
    if values[DYNAMIC_MIG]:
        for other in (PASSTHROUGH_SUPPORT, NVML_DEVICE_HEALTH_CHECK, MPS_SUPPORT):
            if values[other]:
                fail(f"feature gate DynamicMIG is currently mutually exclusive with {other}")
    if values[PASSTHROUGH_SUPPORT] and values[NVML_DEVICE_HEALTH_CHECK]:
        fail("feature gate PassthroughSupport is currently mutually exclusive with NVMLDeviceHealthCheck")
    if values[DEVICE_METADATA] and not values[PASSTHROUGH_SUPPORT]:
        fail("feature gate DeviceMetadata requires PassthroughSupport to also be enabled")


def resolve_imex_mode(assigned: Mapping[str, bool], imex_mode: str | None) -> tuple[bool | None, list[str]]:
    """The host-managed setting that the Go driver's spelling (`imex_mode` with HostManagedIMEXDaemon) asks
    for, None when it asks nothing, and notes to log; a contradiction with HostManagedIMEX is refused."""
    mode = (imex_mode or "").strip()
    ours = assigned.get(HOST_MANAGED_IMEX)
    unlocked = assigned.get(HOST_MANAGED_IMEX_DAEMON, False)
    if not mode:
        if unlocked and ours is None:
            return None, [
                "HostManagedIMEXDaemon=true only allows IMEX mode hostManaged (IMEX_MODE, Helm "
                "resources.computeDomains.imex.mode); with no mode set IMEX stays driver-managed"
            ]
        return None, []
    if mode not in IMEX_MODES:
        raise InvalidInput("IMEX mode", mode, f"want {' or '.join(IMEX_MODES)} (--imex-mode, IMEX_MODE)")
    host_managed = mode == IMEX_MODE_HOST_MANAGED
    if ours is not None and ours != host_managed:
        raise InvalidInput(
            "IMEX mode", mode,
            f"conflicts with feature gate HostManagedIMEX={'true' if ours else 'false'}: they are two "
            f"spellings of one setting; set only one (see {UPGRADE_DOC})",
        )  # fmt: skip
    if host_managed and not (unlocked or ours):
        raise InvalidInput(
            "IMEX mode", mode,
            "hostManaged requires feature gate HostManagedIMEXDaemon (or HostManagedIMEX) to be enabled",
        )  # fmt: skip
    return host_managed, []


def parse_feature_gates(text: str | None, imex_mode: str | None = None) -> FeatureGates:
    """Defaults, then the assignments in `text`, then the IMEX mode (the Go driver's spelling of
    HostManagedIMEX), then the HostManagedIMEX overrides, then validation."""
    values = {name: spec.default for name, spec in KNOWN_GATES.items()}
    assigned = parse_assignments(text or "")
    host_managed, notes = resolve_imex_mode(assigned, imex_mode)
    ignored = [*notes]
    for name, value in assigned.items():
        if name in GPU_SIDE_GATES:
            shown = "true" if value else "false"
            ignored.append(f"feature gate {name}={shown} belongs to the GPU driver; ignored")
        elif name not in UNIMPLEMENTED_GATES:
            values[name] = value
    if host_managed is not None:
        values[HOST_MANAGED_IMEX] = host_managed
    overrides: list[str] = []
    if values[HOST_MANAGED_IMEX]:
        for forced in (IMEX_DAEMONS_WITH_DNS_NAMES, COMPUTE_DOMAIN_CLIQUES):
            if values[forced]:
                values[forced] = False
                overrides.append(f"HostManagedIMEX is enabled; forcing {forced}=false")
    validate(values)
    return FeatureGates(values, tuple(overrides), tuple(ignored))
