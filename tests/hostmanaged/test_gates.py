"""The HostManagedIMEX gate (the design's first unit test): registered alpha and off by default, and its
overrides run before the dependency rules, so a host-managed install passes validation whatever the operator
set the two gates it forces off to."""

from __future__ import annotations

import pytest

from cdctl.api import gates
from cdctl.domain.errors import InvalidInput


def test_registered_as_alpha_and_off_by_default() -> None:
    spec = gates.KNOWN_GATES[gates.HOST_MANAGED_IMEX]
    assert (spec.default, spec.stage) == (False, gates.Stage.ALPHA)
    defaults = gates.parse_feature_gates("")
    assert not defaults.enabled("HostManagedIMEX") and defaults.overrides == ()
    assert defaults.enabled("IMEXDaemonsWithDNSNames") and defaults.enabled("ComputeDomainCliques")


@pytest.mark.parametrize(
    "extra",
    [
        "",
        "IMEXDaemonsWithDNSNames=false",  # alone this breaks "ComputeDomainCliques requires IMEXDaemons..."
        "ComputeDomainCliques=true,IMEXDaemonsWithDNSNames=false",
        "ComputeDomainCliques=false,IMEXDaemonsWithDNSNames=false",
    ],
)
def test_overrides_run_before_validation(extra: str) -> None:
    resolved = gates.parse_feature_gates(f"HostManagedIMEX=true,{extra}")
    assert resolved.enabled("HostManagedIMEX")
    assert not resolved.enabled("IMEXDaemonsWithDNSNames") and not resolved.enabled("ComputeDomainCliques")
    gates.validate(resolved.values)  # the dependency rules hold on the resolved values
    forced = [o.rpartition("forcing ")[2] for o in resolved.overrides]
    assert forced == [
        f"{name}=false"
        for name in ("IMEXDaemonsWithDNSNames", "ComputeDomainCliques")
        if f"{name}=false" not in extra
    ]


def test_without_the_gate_the_dependency_rule_still_applies() -> None:
    with pytest.raises(InvalidInput, match="ComputeDomainCliques requires IMEXDaemonsWithDNSNames"):
        gates.parse_feature_gates("IMEXDaemonsWithDNSNames=false")
