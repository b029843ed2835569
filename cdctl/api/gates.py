"""Feature gates: the Go driver's gate names and defaults plus HostManagedIMEX, parsed from `--feature-gates`.

Called by every command entry point (controller, kubelet plugin, daemon) with the `--feature-gates` /
`FEATURE_GATES` text ("A=true,B=false", a trailing comma allowed: the controller forwards its whole map that
way). `parse_feature_gates` returns an immutable `FeatureGates`; unknown names and non-boolean values are
rejected with an error naming the entry. `HostManagedIMEX` forces the DNS-names and cliques gates off before
the dependency rules are checked, and the forced changes are returned so the caller can log them.
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
    "ContextualLogging": GateSpec(True, Stage.BETA),
    "LoggingAlphaOptions": GateSpec(False, Stage.ALPHA),
    "LoggingBetaOptions": GateSpec(True, Stage.BETA),
    "AllAlpha": GateSpec(False, Stage.ALPHA),
    "AllBeta": GateSpec(False, Stage.BETA),
}

OBJECT = "feature gates"


@dataclass(frozen=True, slots=True)
class FeatureGates:
    """The effective value of every known gate, and the overrides HostManagedIMEX forced."""

    values: Mapping[str, bool]
    overrides: tuple[str, ...] = field(default=())

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
        if name not in KNOWN_GATES:
            known = ", ".join(sorted(KNOWN_GATES))
            raise InvalidInput(OBJECT, name, f"unrecognized feature gate (known: {known})")
        out[name] = _parse_bool(name, value)
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


def parse_feature_gates(text: str | None) -> FeatureGates:
    """Defaults, then the assignments in `text`, then the HostManagedIMEX overrides, then validation."""
    values = {name: spec.default for name, spec in KNOWN_GATES.items()}
    values.update(parse_assignments(text or ""))
    overrides: list[str] = []
    if values[HOST_MANAGED_IMEX]:
        for forced in (IMEX_DAEMONS_WITH_DNS_NAMES, COMPUTE_DOMAIN_CLIQUES):
            if values[forced]:
                values[forced] = False
                overrides.append(f"HostManagedIMEX is enabled; forcing {forced}=false")
    validate(values)
    return FeatureGates(values, tuple(overrides))
