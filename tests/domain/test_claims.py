"""The pure claim state machine and fold: legal moves, illegal moves, what the record remembers."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from cdctl.domain import claims as c
from cdctl.domain.errors import InvalidInput
from cdctl.domain.events import DomainEvent, RecordedEvent, decode


def run(*events: DomainEvent) -> c.ClaimRecord:
    rec = c.ClaimRecord("u1")
    for i, ev in enumerate(events, start=1):
        rec = c.fold(rec, ev, i)
    return rec


START = c.ClaimPrepareStarted("u1", "ns", "rc", "node-a", kind="channel", domain_uid="d1", allocation="a1")


def test_full_prepare_then_unprepare() -> None:
    dev = {
        "request_names": ["channel"],
        "pool_name": "node-a",
        "device_name": "channel-0",
        "cdi_device_ids": ["x"],
    }
    rec = run(
        START,
        c.ChannelAllocated("u1", "node-a", 0, "d1"),
        c.CdiSpecWritten("u1", "/cdi/spec.yaml", ["x"]),
        c.ClaimPrepareCompleted("u1", ["x"], [dev]),
    )
    assert rec.state is c.ClaimState.PREPARE_COMPLETED and rec.completed and rec.active
    assert rec.channels == (0,) and rec.devices == (dev,) and rec.cdi_path == "/cdi/spec.yaml"
    assert (rec.namespace, rec.name, rec.domain_uid, rec.allocation) == ("ns", "rc", "d1", "a1")
    done = c.fold(rec, c.ClaimUnprepared("u1", "kubelet"), 5)
    assert done.state is c.ClaimState.UNPREPARED and not done.active
    assert done.channels == () and done.ended_version == 5


def test_all_mode_allocates_a_range_and_release_returns_it() -> None:
    rec = run(START, c.ChannelAllocated("u1", "node-a", 0, "d1", count=2048))
    assert len(rec.channels) == 2048 and rec.channels[-1] == 2047
    rec = c.fold(rec, c.ChannelReleased("u1", "node-a", 0, count=2048), 3)
    assert rec.channels == ()


def test_failure_then_retry_keeps_partial_progress_until_completed() -> None:
    rec = run(
        START, c.ChannelAllocated("u1", "node-a", 0, "d1"), c.ClaimPrepareFailed("u1", "not ready", True)
    )
    assert (
        rec.state is c.ClaimState.PREPARE_FAILED
        and rec.last_error == "not ready"
        and rec.last_error_retriable
    )
    assert rec.active and rec.channels == (0,)
    rec = c.fold(rec, START, 4)
    assert (
        rec.state is c.ClaimState.PREPARE_STARTED and rec.channels == (0,) and rec.last_error == "not ready"
    )


@pytest.mark.parametrize(
    "events",
    [
        (c.ClaimPrepareCompleted("u1"),),
        (START, c.ClaimPrepareCompleted("u1"), c.ClaimPrepareFailed("u1", "late")),
        (c.ClaimInvalidated("u1", "reboot"),),
        (c.ClaimPrepareFailed("u1", "x"),),
    ],
)
def test_illegal_moves_are_rejected(events: tuple[DomainEvent, ...]) -> None:
    with pytest.raises(InvalidInput):
        run(*events)


def test_invalidated_claim_can_be_prepared_again_and_unprepare_is_always_allowed() -> None:
    rec = run(START, c.ClaimPrepareCompleted("u1"), c.ClaimInvalidated("u1", "boot id changed"))
    assert rec.state is c.ClaimState.INVALIDATED and not rec.active and rec.ended_version == 3
    assert c.fold(rec, START, 4).state is c.ClaimState.PREPARE_STARTED
    assert run(c.ClaimUnprepared("u1")).state is c.ClaimState.UNPREPARED  # unprepare of an unknown claim


def test_fenced_and_channel_events_do_not_move_the_state() -> None:
    rec = run(START, c.ClaimPrepareFenced("u1", "a0", "stale"))
    assert rec.state is c.ClaimState.PREPARE_STARTED and rec.version == 2


def test_prepare_started_v1_is_upcast() -> None:
    stored = RecordedEvent(
        position=1,
        stream="claim/u1",
        version=1,
        type="ClaimPrepareStarted",
        schema_version=1,
        data={"claim_uid": "u1", "claim": "ns/rc", "node": "n"},
        metadata={},
        recorded_at=datetime.now(UTC),
        hash="",
    )
    ev = decode(stored)
    assert isinstance(ev, c.ClaimPrepareStarted)
    assert (ev.namespace, ev.name, ev.kind) == ("ns", "rc", "channel")


def test_which_claims_hold_the_node_label_of_their_domain() -> None:
    started = run(START)
    completed = c.fold(started, c.ClaimPrepareCompleted("u1"), 2)
    failed = c.fold(started, c.ClaimPrepareFailed("u1", "not ready", retriable=True), 2)
    refused = c.fold(started, c.ClaimPrepareFailed("u1", "bad config", retriable=False), 2)
    invalidated = c.fold(completed, c.ClaimInvalidated("u1", "boot id changed"), 3)
    unprepared = c.fold(invalidated, c.ClaimUnprepared("u1", "kubelet"), 4)
    for rec in (started, completed, failed, refused, invalidated):
        assert c.holds_node_label(rec, "d1"), rec.state
        assert not c.holds_node_label(rec, "d2"), "only its own domain's label"
    assert not c.holds_node_label(unprepared, "d1")
    daemon = run(c.ClaimPrepareStarted("u1", "ns", "rc", "node-a", kind="daemon", domain_uid="d1"))
    assert not c.holds_node_label(daemon, "d1"), "a daemon claim runs because of the label, never holds it"
    assert not c.holds_node_label(run(c.ClaimPrepareStarted("u1", "ns", "rc", "n", kind="channel")), "")
    other = dataclasses.replace(completed, claim_uid="u2")
    assert c.label_holders([completed, other, unprepared], "d1", besides="u1") == ["u2"]
    assert c.label_holders([completed], "d1", besides="u1") == []
