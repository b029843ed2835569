"""Opaque config decoding: strict vs lenient, validation, errors naming object and field."""

from __future__ import annotations

import json

import pytest

from cdctl.api.configs import ChannelConfig, DaemonConfig, decode_config
from cdctl.domain.errors import InvalidInput, PermanentError

API = "resource.nvidia.com/v1beta1"
U = "d0000000-0000-4000-8000-000000000001"


def test_channel_config_decodes_both_fields() -> None:
    raw = {"apiVersion": API, "kind": "ComputeDomainChannelConfig", "domainID": "u1", "allocationMode": "All"}
    cfg = decode_config(raw, strict=True, obj="claim ns/c")
    assert cfg == ChannelConfig(domain_id="u1", allocation_mode="All")
    assert isinstance(cfg, ChannelConfig) and cfg.all_channels
    assert decode_config(json.dumps(raw).encode(), strict=True, obj="x") == cfg
    assert cfg.to_json() == raw


def test_daemon_config_decodes() -> None:
    cfg = decode_config(
        {"apiVersion": API, "kind": "ComputeDomainDaemonConfig", "domainID": "u2"}, strict=True, obj="x"
    )
    assert cfg == DaemonConfig(domain_id="u2")


def test_strict_rejects_unknown_field_with_the_go_wording() -> None:
    raw = {"apiVersion": API, "kind": "ComputeDomainChannelConfig", "domainID": "u", "unexpectedField": 1}
    with pytest.raises(InvalidInput) as err:
        decode_config(raw, strict=True, obj="ResourceClaim default/rc")
    assert 'strict decoding error: unknown field "unexpectedField"' in str(err.value)
    assert "ResourceClaim default/rc" in str(err.value)
    assert err.value.field == "unexpectedField"
    assert isinstance(err.value, PermanentError)


def test_lenient_drops_unknown_fields() -> None:
    raw = {"apiVersion": API, "kind": "ComputeDomainDaemonConfig", "domainID": "u", "extra": True}
    assert decode_config(raw, strict=False, obj="x") == DaemonConfig(domain_id="u")


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"apiVersion": "v1", "kind": "ComputeDomainChannelConfig"}, "apiVersion"),
        ({"apiVersion": API, "kind": "GpuConfig"}, "kind"),
        ({"apiVersion": API, "kind": "ComputeDomainChannelConfig", "domainID": 5}, "domainID"),
        ("{not json", "parameters"),
        ([1, 2], "parameters"),
    ],
)
def test_bad_parameters_name_the_field(raw: object, field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        decode_config(raw, strict=True, obj="o")
    assert err.value.field == field


def test_validate_requires_domain_id_and_a_known_allocation_mode() -> None:
    with pytest.raises(InvalidInput, match="domainID cannot be empty"):
        ChannelConfig().validate("default channel config")
    with pytest.raises(InvalidInput, match="domainID cannot be empty"):
        DaemonConfig().validate("default daemon config")
    with pytest.raises(InvalidInput) as err:
        ChannelConfig(domain_id=U, allocation_mode="Many").validate("claim ns/c")
    assert err.value.field == "allocationMode"
    for mode in ("", "Single", "All"):
        ChannelConfig(domain_id=U, allocation_mode=mode).validate("claim")


@pytest.mark.parametrize(
    "domain_id", ["../../../x", "/abs/dir", "dom-1", "D0000000-0000-4000-8000-000000000001"]
)
def test_validate_requires_the_domain_id_to_be_a_uid(domain_id: str) -> None:
    for config in (ChannelConfig(domain_id=domain_id), DaemonConfig(domain_id=domain_id)):
        with pytest.raises(InvalidInput, match="domainID must be a ComputeDomain uid") as err:
            config.validate("claim ns/c")
        assert err.value.field == "domainID"


def test_echoed_input_is_cut() -> None:
    raw = {"apiVersion": API, "kind": "x" * 100_000}
    with pytest.raises(InvalidInput) as err:
        decode_config(raw, strict=True, obj="o")
    assert len(str(err.value)) < 400 and "100002 characters" in str(err.value)
