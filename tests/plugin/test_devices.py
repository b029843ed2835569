"""Ports of the Go plugin's device_state_test.go unit cases (config mapping and conflict checks)."""

from __future__ import annotations

import pytest

from cdctl.api.configs import ChannelConfig, DaemonConfig
from cdctl.domain import claims as c
from cdctl.domain.errors import InvalidInput, PermanentError, RetriableError
from cdctl.plugin import devices as d
from tests.plugin.fakes import claim_obj, opaque, result

CH = "ComputeDomainChannelConfig"
DM = "ComputeDomainDaemonConfig"


def configs(*raw: dict) -> list[d.AllocationConfig]:
    return list(d.parse_claim(claim_obj("u", configs=list(raw))).configs)


# ---- TestGetOpaqueDeviceConfigs


def test_returns_matching_driver_configs_in_class_then_claim_order() -> None:
    got = d.get_opaque_device_configs(
        configs(
            opaque(CH, "claim-dom", ["a"], source="FromClaim"),
            opaque(CH, "other", ["x"], driver="gpu.nvidia.com"),
            opaque(DM, "class-dom", [], source="FromClass"),
        )
    )
    assert [o.config for o in got] == [DaemonConfig("class-dom"), ChannelConfig("claim-dom")]
    assert got[1].requests == ("a",)


def test_rejects_invalid_source() -> None:
    with pytest.raises(
        PermanentError, match="invalid config source: 'FromNowhere'; allowed: FromClass or FromClaim"
    ):
        d.get_opaque_device_configs(configs(opaque(CH, "x", source="FromNowhere")))


def test_rejects_missing_opaque_config() -> None:
    cfg = [d.AllocationConfig("FromClaim", ("a",), None)]
    with pytest.raises(PermanentError, match="only opaque parameters are supported by this driver"):
        d.get_opaque_device_configs(cfg)


def test_wraps_strict_decode_errors_as_permanent() -> None:
    with pytest.raises(InvalidInput) as err:
        d.get_opaque_device_configs(configs(opaque(CH, "x", unexpectedField=1)))
    assert isinstance(err.value, PermanentError)
    assert "error decoding config parameters" in str(err.value)
    # lenient decoding (unprepare, checkpoint data) drops the field
    assert d.get_opaque_device_configs(configs(opaque(CH, "x", unexpectedField=1)), strict=False)


# ---- TestGetConfigResultsMap


def test_uses_default_configs_by_device_type() -> None:
    claim = d.parse_claim(
        claim_obj(
            "u",
            results=[result("c", "channel-0"), result("dm", "daemon-0"), result("g", "gpu-0", driver="gpu")],
        )
    )
    groups = d.get_config_results_map(claim, [])
    assert len(groups) == 2
    by_kind = {type(o.config): [r.device for r in rs] for o, rs in groups}
    assert by_kind == {ChannelConfig: ["channel-0"], DaemonConfig: ["daemon-0"]}
    assert all(o.default for o, _ in groups)


def test_request_configs_override_defaults_and_class_configs() -> None:
    obj = claim_obj(
        "u",
        results=[result("channel", "channel-0")],
        configs=[opaque(CH, "class-dom", [], source="FromClass"), opaque(CH, "claim-dom", ["channel"])],
    )
    claim = d.parse_claim(obj)
    groups = d.get_config_results_map(claim, d.get_opaque_device_configs(claim.configs))
    assert [(o.config, [r.device for r in rs]) for o, rs in groups] == [
        (ChannelConfig("claim-dom"), ["channel-0"])
    ]
    # a class catch-all beats the default when no request-specific config exists
    claim2 = d.parse_claim(
        claim_obj(
            "u",
            results=[result("channel", "channel-0")],
            configs=[obj["status"]["allocation"]["devices"]["config"][0]],
        )
    )
    groups2 = d.get_config_results_map(claim2, d.get_opaque_device_configs(claim2.configs))
    assert groups2[0][0].config == ChannelConfig("class-dom")


def test_subrequest_results_match_their_parent_request() -> None:
    claim = d.parse_claim(
        claim_obj(
            "u", results=[result("channel/first", "channel-0")], configs=[opaque(CH, "dom", ["channel"])]
        )
    )
    groups = d.get_config_results_map(claim, d.get_opaque_device_configs(claim.configs))
    assert groups[0][0].config == ChannelConfig("dom")


def test_rejects_requested_devices_that_are_not_allocatable() -> None:
    for bad in ("channel-2048", "daemon-1", "gpu-0", "channel-01"):
        claim = d.parse_claim(claim_obj("u", results=[result("r", bad)]))
        with pytest.raises(PermanentError, match=f"requested device is not allocatable: {bad}"):
            d.get_config_results_map(claim, [])


def test_rejects_request_config_with_mismatched_device_type() -> None:
    claim = d.parse_claim(
        claim_obj("u", results=[result("channel", "channel-0")], configs=[opaque(DM, "dom", ["channel"])])
    )
    with pytest.raises(PermanentError, match="cannot apply ComputeDomainDaemonConfig to request: channel"):
        d.get_config_results_map(claim, d.get_opaque_device_configs(claim.configs))


# ---- TestRequestedNonAdminDevices


def test_requested_non_admin_devices() -> None:
    claim = d.parse_claim(
        claim_obj(
            "u",
            results=[
                result("a", "channel-0"),
                result("b", "daemon-0", admin=True),
                result("g", "gpu-0", driver="x"),
            ],
        )
    )
    assert d.requested_non_admin_devices(claim) == ["channel-0"]


# ---- TestValidateNoOverlappingPreparedDevices / TestAssertImexChannelNotAllocated


def rec(
    uid: str, state: c.ClaimState, requested: tuple[str, ...] = (), channels: tuple[int, ...] = ()
) -> c.ClaimRecord:
    return c.ClaimRecord(uid, state=state, requested=requested, channels=channels)


DONE = c.ClaimState.PREPARE_COMPLETED
STARTED = c.ClaimState.PREPARE_STARTED


def current(admin: bool = False) -> d.AllocatedClaim:
    return d.parse_claim(claim_obj("new-uid", results=[result("a", "channel-0", admin=admin)]))


def test_rejects_non_admin_overlap_with_completed_different_claim() -> None:
    with pytest.raises(
        RetriableError,
        match="requested device channel-0 is already allocated to different claim existing-uid",
    ):
        d.validate_no_overlapping_prepared_devices(current(), [rec("existing-uid", DONE, ("channel-0",))])


def test_overlap_allowed_cases() -> None:
    d.validate_no_overlapping_prepared_devices(
        current(), [rec("new-uid", DONE, ("channel-0",))]
    )  # same claim
    d.validate_no_overlapping_prepared_devices(current(), [rec("old", STARTED, ("channel-0",))])  # incomplete
    d.validate_no_overlapping_prepared_devices(
        current(admin=True), [rec("old", DONE, ("channel-0",))]
    )  # admin now
    d.validate_no_overlapping_prepared_devices(
        current(), [rec("old", DONE, ())]
    )  # existing was admin (not listed)
    other_driver = d.parse_claim(
        claim_obj("new-uid", results=[result("a", "channel-0", driver="gpu.nvidia.com")])
    )
    d.validate_no_overlapping_prepared_devices(other_driver, [rec("old", DONE, ("channel-0",))])


def test_rejects_completed_claim_using_channel() -> None:
    with pytest.raises(
        RetriableError, match=r"channel 0 already allocated by claim existing-uid \(according to checkpoint\)"
    ):
        d.assert_imex_channel_not_allocated([rec("existing-uid", DONE, channels=(0,))], 0, "new-uid")


def test_channel_check_allowed_cases() -> None:
    d.assert_imex_channel_not_allocated(
        [rec("other", DONE, channels=(1,))], 0, "new-uid"
    )  # different channel
    d.assert_imex_channel_not_allocated([rec("other", STARTED, channels=(0,))], 0, "new-uid")  # incomplete
    d.assert_imex_channel_not_allocated([rec("other", DONE, ("daemon-0",))], 0, "new-uid")  # daemon devices


def test_claim_without_allocation_is_permanent() -> None:
    with pytest.raises(PermanentError, match="no allocation set in ResourceClaim rc in namespace default"):
        d.parse_claim(claim_obj("u", allocated=False))


def test_allocation_id_changes_with_the_allocation() -> None:
    a = d.parse_claim(claim_obj("u", results=[result("a", "channel-0")])).allocation_id
    b = d.parse_claim(claim_obj("u", results=[result("a", "channel-0", pool="node-b")])).allocation_id
    assert a != b and a == d.parse_claim(claim_obj("u", results=[result("a", "channel-0")])).allocation_id
