"""Feature-gate parsing, defaults, the Go driver's validation cases and the HostManagedIMEX overrides."""

from __future__ import annotations

import pytest

from cdctl.api import gates
from cdctl.domain.errors import InvalidInput, PermanentError


def test_defaults_match_the_go_driver() -> None:
    g = gates.parse_feature_gates("")
    assert g.enabled("IMEXDaemonsWithDNSNames")
    assert g.enabled("ComputeDomainCliques")
    assert g.enabled("CrashOnNVLinkFabricErrors")
    assert not g.enabled("HostManagedIMEX")
    assert not g.enabled("MPSSupport")
    assert g.overrides == ()
    assert g.explicit() == {}


def test_no_features_enabled() -> None:
    g = gates.parse_feature_gates(
        "IMEXDaemonsWithDNSNames=false,ComputeDomainCliques=false,CrashOnNVLinkFabricErrors=false"
    )
    assert not any(g.enabled(n) for n in ("IMEXDaemonsWithDNSNames", "ComputeDomainCliques"))


def test_cliques_with_dns_names_is_valid() -> None:
    g = gates.parse_feature_gates("ComputeDomainCliques=true,IMEXDaemonsWithDNSNames=true")
    assert g.enabled("ComputeDomainCliques")


def test_cliques_without_dns_names_is_rejected_with_the_go_message() -> None:
    with pytest.raises(InvalidInput) as err:
        gates.parse_feature_gates("ComputeDomainCliques=true,IMEXDaemonsWithDNSNames=false")
    assert "feature gate validation failed: feature gate ComputeDomainCliques requires " in str(err.value)
    assert "IMEXDaemonsWithDNSNames to also be enabled" in str(err.value)
    assert isinstance(err.value, PermanentError)


def test_dns_names_without_cliques_is_valid() -> None:
    g = gates.parse_feature_gates("IMEXDaemonsWithDNSNames=true,ComputeDomainCliques=false")
    assert not g.enabled("ComputeDomainCliques")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("DynamicMIG=true,MPSSupport=true", "DynamicMIG is currently mutually exclusive with MPSSupport"),
        ("PassthroughSupport=true,NVMLDeviceHealthCheck=true", "PassthroughSupport is currently mutually"),
        ("DeviceMetadata=true", "DeviceMetadata requires PassthroughSupport"),
    ],
)
def test_gpu_gate_rules(text: str, needle: str) -> None:
    with pytest.raises(InvalidInput, match=needle):
        gates.parse_feature_gates(text)


def test_unknown_gate_names_the_entry_and_nothing_is_applied() -> None:
    with pytest.raises(InvalidInput) as err:
        gates.parse_assignments("HostManagedIMEX=true,NoSuchGate=true")
    assert err.value.field == "NoSuchGate"
    assert "unrecognized feature gate" in str(err.value)


@pytest.mark.parametrize("text", ["HostManagedIMEX=maybe", "HostManagedIMEX", "=true"])
def test_malformed_values_are_rejected(text: str) -> None:
    with pytest.raises(InvalidInput):
        gates.parse_feature_gates(text)


def test_trailing_comma_and_spaces_from_a_forwarded_map_parse() -> None:
    forwarded = gates.parse_feature_gates("MPSSupport=true").to_string()
    assert forwarded.endswith(",")
    assert gates.parse_feature_gates(forwarded).values == gates.parse_feature_gates("MPSSupport=true").values
    assert gates.parse_feature_gates(" MPSSupport = true , ").enabled("MPSSupport")


def test_host_managed_forces_dns_names_and_cliques_off_and_says_so() -> None:
    g = gates.parse_feature_gates("HostManagedIMEX=true")
    assert g.enabled("HostManagedIMEX")
    assert not g.enabled("IMEXDaemonsWithDNSNames")
    assert not g.enabled("ComputeDomainCliques")
    assert g.overrides == (
        "HostManagedIMEX is enabled; forcing IMEXDaemonsWithDNSNames=false",
        "HostManagedIMEX is enabled; forcing ComputeDomainCliques=false",
    )


def test_unknown_name_lookup_is_an_error() -> None:
    with pytest.raises(KeyError):
        gates.defaults().enabled("Nope")


# The Go driver's spellings (docs/upgrade-from-nvidia.md): HostManagedIMEXDaemon with IMEX mode hostManaged is
# HostManagedIMEX; its GPU-side gates are accepted and ignored; a truly unknown gate still fails.
UPSTREAM_FEATURE_GATES = (
    "ContextualLogging=true,LoggingAlphaOptions=false,LoggingBetaOptions=true,NVMLDeviceHealthCheck=false,"
    "HostManagedIMEXDaemon=false,NodeLocalFabricIPC=false,DRAListTypeAttributes=true,ConsumableShares=false,"
    "FabricManagerPartitioning=true,"
)


def test_an_upstream_feature_gates_string_parses() -> None:
    g = gates.parse_feature_gates(UPSTREAM_FEATURE_GATES, "driverManaged")
    assert not g.enabled("HostManagedIMEX")
    assert g.enabled("IMEXDaemonsWithDNSNames") and g.enabled("ComputeDomainCliques")
    assert g.ignored == (
        "feature gate DRAListTypeAttributes=true belongs to the GPU driver; ignored",
        "feature gate ConsumableShares=false belongs to the GPU driver; ignored",
        "feature gate FabricManagerPartitioning=true belongs to the GPU driver; ignored",
    )
    assert "FabricManagerPartitioning" not in g.values  # no effect, and not forwarded to the daemons


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("HostManagedIMEX=true", None),
        ("HostManagedIMEXDaemon=true", "hostManaged"),
        ("HostManagedIMEX=true,HostManagedIMEXDaemon=true", "hostManaged"),
        ("HostManagedIMEX=true", "hostManaged"),
    ],
)
def test_both_spellings_of_host_managed_mean_the_same(text: str, mode: str | None) -> None:
    g = gates.parse_feature_gates(text, mode)
    assert g.values == gates.parse_feature_gates("HostManagedIMEX=true").values | {
        "HostManagedIMEXDaemon": "HostManagedIMEXDaemon=true" in text
    }
    assert g.enabled("HostManagedIMEX") and not g.enabled("ComputeDomainCliques")
    assert "HostManagedIMEX is enabled; forcing ComputeDomainCliques=false" in g.overrides


def test_driver_managed_mode_is_the_default_spelled_either_way() -> None:
    for text, mode in (("", "driverManaged"), ("HostManagedIMEXDaemon=true", "driverManaged"), ("", None)):
        assert not gates.parse_feature_gates(text, mode).enabled("HostManagedIMEX")


def test_the_unlock_gate_alone_changes_nothing_and_says_so() -> None:
    g = gates.parse_feature_gates("HostManagedIMEXDaemon=true")
    assert not g.enabled("HostManagedIMEX")
    assert any("only allows IMEX mode hostManaged" in note for note in g.ignored)


@pytest.mark.parametrize(
    ("text", "mode", "needle"),
    [
        ("HostManagedIMEX=true", "driverManaged", "conflicts with feature gate HostManagedIMEX=true"),
        ("HostManagedIMEX=false,HostManagedIMEXDaemon=true", "hostManaged", "conflicts with feature gate"),
        ("", "hostManaged", "requires feature gate HostManagedIMEXDaemon"),
        ("HostManagedIMEXDaemon=false", "hostManaged", "requires feature gate HostManagedIMEXDaemon"),
        ("", "hostmanaged", "want driverManaged or hostManaged"),
    ],
)
def test_conflicting_or_incomplete_settings_are_refused(text: str, mode: str, needle: str) -> None:
    with pytest.raises(InvalidInput, match=needle) as err:
        gates.parse_feature_gates(text, mode)
    assert err.value.obj == "IMEX mode"


@pytest.mark.parametrize("name", ["NodeLocalFabricIPC", "SeamlessUpgrades"])
def test_unimplemented_compute_domain_gates_parse_only_at_their_default(name: str) -> None:
    assert gates.parse_feature_gates(f"{name}=false").explicit() == {}
    with pytest.raises(InvalidInput, match=r"not supported: .*docs/upgrade-from-nvidia.md"):
        gates.parse_feature_gates(f"{name}=true")


def test_a_truly_unknown_gate_lists_every_known_name() -> None:
    with pytest.raises(InvalidInput) as err:
        gates.parse_feature_gates("FabricManagerPartitioning=true,MadeUpGate=true")
    assert err.value.field == "MadeUpGate"
    for known in ("HostManagedIMEX", "HostManagedIMEXDaemon", "ConsumableShares", "NodeLocalFabricIPC"):
        assert known in str(err.value)
