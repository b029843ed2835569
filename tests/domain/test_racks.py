"""Rack domains, purely: DNS-1123 naming (valid, deterministic, collision-free but for a hash collision),
pattern and label validation, the domain body, claims that keep a domain, and every branch of `decide`."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdctl.domain.errors import InvalidInput
from cdctl.domain.events import NewEvent, RecordedEvent, decode, registered_types
from cdctl.domain.racks import (
    LABEL_RACK,
    Decision,
    ObservedDomain,
    RackDomainCreated,
    RackFacts,
    channel_template_name,
    claim_domain_uids,
    claim_in_use,
    claims_using,
    clean,
    decide,
    is_dns1123_label,
    rack_domain_body,
    rack_domain_name,
    racks_of,
    validate_name_pattern,
    validate_rack_label,
)

DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# Node label values: at most 63 characters of [A-Za-z0-9_.-], alphanumeric at both ends (or empty).
LABEL_VALUES = st.from_regex(r"\A([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)\Z")
ANY_TEXT = st.text(max_size=120)
PATTERNS = st.sampled_from(["{rack}", "rack-{rack}", "{rack}-imex", "gb200-{rack}-cd", "x{rack}y"])


@given(value=st.one_of(LABEL_VALUES, ANY_TEXT), pattern=PATTERNS)
def test_every_name_is_a_dns1123_label_and_the_same_every_time(value: str, pattern: str) -> None:
    name = rack_domain_name(value, pattern)
    assert DNS1123.match(name), name
    assert is_dns1123_label(name)
    assert rack_domain_name(value, pattern) == name
    assert len(channel_template_name(name)) <= 253


@given(value=LABEL_VALUES, pattern=PATTERNS)
def test_a_clean_value_is_the_name_itself_within_the_pattern(value: str, pattern: str) -> None:
    name = rack_domain_name(value, pattern)
    lower = value.lower()
    if clean(value) == lower and len(pattern) - len("{rack}") + len(value) <= 63:
        assert name == pattern.replace("{rack}", lower)
    else:
        assert name != pattern.replace("{rack}", lower)
        assert re.search(r"[0-9a-f]{8}", name)


@given(first=st.one_of(LABEL_VALUES, ANY_TEXT), second=st.one_of(LABEL_VALUES, ANY_TEXT), pattern=PATTERNS)
def test_values_that_differ_beyond_case_get_different_names(first: str, second: str, pattern: str) -> None:
    if first.lower() != second.lower():
        assert rack_domain_name(first, pattern) != rack_domain_name(second, pattern)


def test_names_for_the_seeds_label_the_clique_label_and_awkward_values() -> None:
    assert rack_domain_name("s0-011-us-west-01a") == "s0-011-us-west-01a"
    assert channel_template_name("s0-011-us-west-01a") == "imex-channel-s0-011-us-west-01a"
    clique = "6a130f54-faaa-4b8f-847f-be44ab70f917.32766"
    assert re.fullmatch(r"6a130f54-faaa-4b8f-847f-be44ab70f917-32766-[0-9a-f]{8}", rack_domain_name(clique))
    # The seed's provider label value names its domain lowercased; a value differing only in case shares it
    # (the controller reports the second rack as a conflict).
    assert rack_domain_name("S0-011-US-WEST-01A") == rack_domain_name("s0-011-us-west-01a")
    assert rack_domain_name("S0.011") != rack_domain_name("s0.011")  # hashed: the raw values differ
    assert rack_domain_name("a.b") != rack_domain_name("a-b") == "a-b"
    assert re.fullmatch(r"[0-9a-f]{8}", rack_domain_name("_._"))
    assert len(rack_domain_name("x" * 63, "rack-{rack}")) == 63
    assert rack_domain_name("s0-011", "rack-{rack}") == "rack-s0-011"


@pytest.mark.parametrize("pattern", ["rack", "{rack}{rack}", "Rack-{rack}", "-{rack}", "{rack}-", "a_{rack}"])
def test_patterns_that_cannot_make_a_name_are_refused(pattern: str) -> None:
    with pytest.raises(InvalidInput):
        validate_name_pattern(pattern)
    with pytest.raises(InvalidInput):
        rack_domain_name("s0", pattern)


def test_a_pattern_without_room_for_the_rack_is_refused() -> None:
    assert validate_name_pattern("a" * 53 + "{rack}")
    with pytest.raises(InvalidInput, match="no room"):
        validate_name_pattern("a" * 54 + "{rack}")


@pytest.mark.parametrize(
    "key", ["nvidia.com/gpu.clique", "ds.coreweave.com/nvlink.domain", "rack", "topology.kubernetes.io/zone"]
)
def test_label_keys_are_accepted(key: str) -> None:
    assert validate_rack_label(key) == key


@pytest.mark.parametrize("key", ["", "/rack", "Bad_Prefix/rack", "a/" + "x" * 64, "nvidia.com/", "a b"])
def test_invalid_label_keys_are_refused(key: str) -> None:
    with pytest.raises(InvalidInput):
        validate_rack_label(key)


def test_the_domain_body_is_a_single_channel_domain_of_any_size_labelled_with_its_rack() -> None:
    body = rack_domain_body("S0.011", "ds.coreweave.com/nvlink.domain", "team-a", "s0-011-1a2b3c4d")
    assert body["metadata"]["labels"] == {LABEL_RACK: "S0.011"}
    assert body["metadata"]["annotations"] == {"cdctl.io/rack-label": "ds.coreweave.com/nvlink.domain"}
    assert body["metadata"]["namespace"] == "team-a"
    assert body["spec"] == {
        "numNodes": 0,
        "channel": {
            "resourceClaimTemplate": {"name": "imex-channel-s0-011-1a2b3c4d"},
            "allocationMode": "Single",
        },
    }


def test_racks_group_nodes_and_ignore_an_empty_value() -> None:
    assert racks_of([("n2", "a"), ("n1", "a"), ("n3", "b"), ("n4", "")]) == {"a": ("n1", "n2"), "b": ("n3",)}


def _claim(name: str, uid: str, *, allocated: bool = False, reserved: bool = False) -> dict[str, object]:
    parameters = {"kind": "ComputeDomainChannelConfig", "domainID": uid}
    status: dict[str, object] = {}
    if allocated:
        status["allocation"] = {"devices": {"config": [{"opaque": {"parameters": parameters}}]}}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "u"}]
    return {
        "metadata": {"name": name},
        "spec": {"devices": {"config": [{"opaque": {"parameters": parameters}}]}},
        "status": status,
    }


def test_only_allocated_or_reserved_claims_of_the_domain_keep_it() -> None:
    claims = [
        _claim("pending", "cd-1"),
        _claim("reserved", "cd-1", reserved=True),
        _claim("allocated", "cd-1", allocated=True),
        _claim("other-domain", "cd-2", allocated=True),
    ]
    assert claims_using("cd-1", claims) == ("allocated", "reserved")
    assert claims_using("cd-3", claims) == ()
    assert not claim_in_use(claims[0]) and claim_in_use(claims[1])
    daemon = {
        "spec": {"devices": {"config": [{"opaque": {"parameters": {"kind": "ComputeDomainDaemonConfig"}}}]}}
    }
    assert claim_domain_uids(daemon) == set()


def _facts(nodes: int, domain: ObservedDomain | None, claims: tuple[str, ...] = ()) -> RackFacts:
    return RackFacts("s0", "s0", tuple(f"n{i}" for i in range(nodes)), domain, claims)


@pytest.mark.parametrize(
    ("facts", "decision"),
    [
        (_facts(1, None), Decision.CREATE),
        (_facts(18, ObservedDomain("u", "s0")), Decision.PRESENT),
        (_facts(0, ObservedDomain("u", "s0"), ("c1",)), Decision.KEEP),
        (_facts(0, ObservedDomain("u", "s0")), Decision.DELETE),
        (_facts(0, None), Decision.NOTHING),
        (_facts(3, ObservedDomain("u", "s0", deleting=True)), Decision.WAIT),
        (_facts(0, ObservedDomain("u", "s0", deleting=True), ("c1",)), Decision.WAIT),
        (_facts(3, ObservedDomain("u", None)), Decision.CONFLICT),
        (_facts(0, ObservedDomain("u", "S0")), Decision.CONFLICT),
    ],
)
def test_decide_covers_every_case(facts: RackFacts, decision: Decision) -> None:
    assert decide(facts).decision == decision


def test_decisions_say_why() -> None:
    kept = decide(_facts(0, ObservedDomain("u", "s0"), ("w-0", "w-1")))
    assert "2 claim(s) still use it: w-0, w-1" in kept.reason
    assert "not a rack domain" in decide(_facts(1, ObservedDomain("u", None))).reason
    assert "rack 'other'" in decide(_facts(1, ObservedDomain("u", "other"))).reason


def test_rack_events_are_registered_and_round_trip() -> None:
    assert {"RackDomainCreated", "RackDomainKept", "RackDomainDeleted", "RackDomainConflict"} <= set(
        registered_types()
    )
    event = RackDomainCreated("s0", "nvidia.com/gpu.clique", "default", "s0", "imex-channel-s0", "u", ["n1"])
    new = NewEvent.of(event)
    recorded = RecordedEvent(
        1, "rack/s0", 1, new.type, new.schema_version, new.data, {}, datetime.now(UTC), "h"
    )
    assert decode(recorded) == event
