"""The IMEX daemon's pure decisions: slot maps with unreachable unused slots, the hosts block, the config."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdctl.domain.computedomains import DaemonEntry
from cdctl.domain.errors import InvalidInput, PermanentError
from cdctl.domain.events import NewEvent, RecordedEvent, decode, registered_types
from cdctl.domain.imex import (
    HOSTS_HEADER,
    ImexExited,
    ImexPeersChanged,
    dns_node_list,
    exit_description,
    hosts_mapping,
    imex_stream,
    ip_node_list,
    own_slot,
    peer_change,
    render_config,
    render_hosts,
    slot_addresses,
    slot_name,
)

UNUSED = "192.0.2.1"
OTHER_LINES = "127.0.0.1\tlocalhost\n# a comment the kubelet wrote\n10.1.1.1\tmy-pod  my-pod.ns\n"


def entry(node: str, ip: str, index: int, clique: str = "c") -> DaemonEntry:
    return DaemonEntry(node, ip, clique, index)


def test_every_slot_is_mapped_and_slots_without_a_daemon_reach_no_one() -> None:
    entries = [
        entry("n1", "10.0.0.1", 0),
        entry("n3", "10.0.0.3", 2),
        entry("x", "10.9.9.9", 1, clique="other"),
    ]
    mapping = slot_addresses(entries, "c", 4, UNUSED)
    assert mapping == {
        "compute-domain-daemon-0000": "10.0.0.1",
        "compute-domain-daemon-0001": UNUSED,
        "compute-domain-daemon-0002": "10.0.0.3",
        "compute-domain-daemon-0003": UNUSED,
    }


def test_an_index_beyond_the_slots_is_a_permanent_error() -> None:
    with pytest.raises(PermanentError, match="index 4, outside"):
        slot_addresses([entry("n1", "10.0.0.1", 4)], "c", 4, UNUSED)


def test_node_lists_of_both_modes() -> None:
    assert (
        dns_node_list(3)
        == [slot_name(0), slot_name(1), slot_name(2)]
        == [
            "compute-domain-daemon-0000",
            "compute-domain-daemon-0001",
            "compute-domain-daemon-0002",
        ]
    )
    entries = [entry("n2", "10.0.0.2", 1), entry("n1", "10.0.0.1", 0), entry("n9", "", 2)]
    assert ip_node_list(entries, "c") == ["10.0.0.1", "10.0.0.2"]
    with pytest.raises(InvalidInput):
        dns_node_list(0)


def test_hosts_block_replaces_itself_and_keeps_other_lines_byte_for_byte() -> None:
    first = render_hosts(OTHER_LINES, {"compute-domain-daemon-0000": "10.0.0.1"})
    second = render_hosts(
        first, {"compute-domain-daemon-0000": "10.0.0.5", "compute-domain-daemon-0001": UNUSED}
    )
    assert second.startswith(OTHER_LINES)
    assert second.count(HOSTS_HEADER) == 1
    assert second[len(OTHER_LINES) :] == (
        f"{HOSTS_HEADER}\n10.0.0.5\tcompute-domain-daemon-0000\n{UNUSED}\tcompute-domain-daemon-0001\n"
    )
    assert render_hosts(second, {}) == OTHER_LINES
    assert hosts_mapping(second) == {
        "compute-domain-daemon-0000": "10.0.0.5",
        "compute-domain-daemon-0001": UNUSED,
    }


def test_a_hosts_file_without_a_final_newline_is_not_joined_to_the_block() -> None:
    rendered = render_hosts("127.0.0.1 localhost", {"compute-domain-daemon-0000": "10.0.0.1"})
    assert rendered.splitlines()[:2] == ["127.0.0.1 localhost", HOSTS_HEADER]


@given(
    st.lists(st.sampled_from(["10.0.0.1", "10.0.0.2", UNUSED]), min_size=1, max_size=6),
    st.integers(min_value=1, max_value=4),
)
def test_rendering_is_idempotent_and_never_duplicates_the_header(addresses: list[str], repeats: int) -> None:
    mapping = {slot_name(i): address for i, address in enumerate(addresses)}
    text = OTHER_LINES
    for _ in range(repeats):
        text = render_hosts(text, mapping)
    assert text == render_hosts(OTHER_LINES, mapping)
    assert text.count(HOSTS_HEADER) == 1
    assert hosts_mapping(text) == mapping


def test_config_rendering_fills_placeholders_and_names_a_missing_one() -> None:
    template = (
        "A=1\nIMEX_CMD_BIND_INTERFACE_IP={{ .IMEXCmdBindInterfaceIP }}\nN={{.IMEXDaemonNodesConfigPath}}\n"
    )
    values = {"IMEXCmdBindInterfaceIP": "10.0.0.7", "IMEXDaemonNodesConfigPath": "/imexd/nodes.cfg"}
    assert render_config(template, values) == "A=1\nIMEX_CMD_BIND_INTERFACE_IP=10.0.0.7\nN=/imexd/nodes.cfg\n"
    with pytest.raises(InvalidInput, match="IMEXDaemonNodesConfigPath"):
        render_config(template, {"IMEXCmdBindInterfaceIP": "10.0.0.7"})


def test_peer_change_ignores_unused_slots() -> None:
    before = {"s0": "10.0.0.1", "s1": "10.0.0.2", "s2": UNUSED}
    after = {"s0": "10.0.0.1", "s1": UNUSED, "s2": "10.0.0.5", "s3": UNUSED}
    change = peer_change(before, after, UNUSED)
    assert (change.added, change.removed, change.moved) == (("s2=10.0.0.5",), ("s1=10.0.0.2",), ())
    moved = peer_change({"s0": "10.0.0.1"}, {"s0": "10.0.0.9"}, UNUSED)
    assert moved.moved == ("s0=10.0.0.9",) and not moved.empty
    assert peer_change(after, after, UNUSED).empty


def test_exit_description_tells_exit_codes_from_signals() -> None:
    assert exit_description(3) == (3, None)
    assert exit_description(-9) == (None, "SIGKILL")


def test_events_are_registered_and_round_trip() -> None:
    assert {"ImexStarted", "ImexExited", "ImexPeersChanged", "ImexReadinessChanged"} <= set(
        registered_types()
    )
    exited = ImexExited("n1", 42, None, "SIGKILL", False, "unexpected exit", 2.0)
    new = NewEvent.of(exited)
    recorded = RecordedEvent(
        1, imex_stream("n1"), 1, new.type, new.schema_version, new.data, {}, datetime.now(UTC), ""
    )
    assert decode(recorded) == exited
    assert imex_stream("n1") == "node/n1"
    changed = ImexPeersChanged("n1", "dns-names", ["a=1"], [], [], "sent SIGUSR1")
    assert NewEvent.of(changed).data["added"] == ["a=1"]


def test_own_slot_is_the_slot_mapped_to_the_daemons_address() -> None:
    mapping = {"compute-domain-daemon-0001": "10.0.0.2", "compute-domain-daemon-0000": "10.0.0.1"}
    assert own_slot(mapping, "10.0.0.2") == "compute-domain-daemon-0001"
    assert own_slot(mapping, "10.0.0.9") is None
