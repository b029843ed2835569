"""The channel allocator's pure state (docs/channel-isolation.md): least-recently-released reuse, channel 0
never handed out, uniqueness per clique, exhaustion, adoption of published numbers, the fold of its events.
Property tests drive random assign/release/adopt sequences against a model of the rules."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdctl.api.isolation import channel_stream
from cdctl.controller.channelview import ChannelProjection
from cdctl.domain.channels import (
    CliqueChannels,
    ImexChannelAssigned,
    ImexChannelReleased,
    fold_channel_event,
    format_channels,
    published_channel,
)
from cdctl.domain.events import NewEvent, RecordedEvent, decode
from cdctl.projections.runner import fold_into

CLIQUE = "5a2c.1"


def assigned(book: CliqueChannels, uid: str, count: int) -> tuple[CliqueChannels, int]:
    channel = book.pick(count)
    assert channel is not None
    return book.assign(uid, channel), channel


def test_fresh_channels_go_lowest_first_and_never_zero() -> None:
    book = CliqueChannels(CLIQUE)
    picked = []
    for uid in ("a", "b", "c"):
        book, channel = assigned(book, uid, 8)
        picked.append(channel)
    assert picked == [1, 2, 3]


def test_a_released_channel_is_reused_last() -> None:
    book = CliqueChannels(CLIQUE)
    for uid in ("a", "b", "c"):
        book, _ = assigned(book, uid, 5)  # 1, 2, 3 held; 4 never used
    book = book.release("b")  # 2 free, released just now
    book, channel = assigned(book, "d", 5)
    assert channel == 4  # never-used channels first
    book = book.release("a")  # 1 released after 2
    book, channel = assigned(book, "e", 5)
    assert channel == 2  # released longest ago
    book, channel = assigned(book, "f", 5)
    assert channel == 1


def test_exhaustion_counts_channel_zero_out() -> None:
    book = CliqueChannels(CLIQUE)
    for uid in ("a", "b", "c"):
        book, _ = assigned(book, uid, 4)
    assert book.pick(4) is None  # --imex-channel-count 4: channels 1..3, the fourth domain waits
    assert book.free(4) == 0
    book = book.release("a")
    assert book.free(4) == 1
    assert book.pick(4) == 1


def test_assigning_a_held_channel_to_another_domain_is_refused() -> None:
    book = CliqueChannels(CLIQUE).assign("a", 1)
    with pytest.raises(ValueError, match="held by a"):
        book.assign("b", 1)


def test_an_observed_number_is_held_unrecorded_and_never_handed_out() -> None:
    book, conflict = CliqueChannels(CLIQUE).adopt("a", 1)
    assert conflict is None and not book.held["a"].recorded
    assert book.pick(8) == 2
    again, conflict = book.adopt("b", 1)
    assert again is book and conflict is not None and conflict.holder == "a"
    recorded = fold_channel_event(book, ImexChannelAssigned(CLIQUE, 1, "a", "ns", "cd-a"))
    assert recorded.held["a"].recorded


def test_published_channel_accepts_only_channel_numbers() -> None:
    assert published_channel({"imexChannel": 7}) == 7
    for bad in (0, -1, True, "7", None, 1.5):
        assert published_channel({"imexChannel": bad}) is None
    assert published_channel({}) is None


def test_a_release_of_another_number_than_held_changes_nothing() -> None:
    book = CliqueChannels(CLIQUE).assign("a", 3)
    assert fold_channel_event(book, ImexChannelReleased(CLIQUE, 2, "a", "ns", "cd")) == book
    assert fold_channel_event(book, ImexChannelReleased(CLIQUE, 3, "b", "ns", "cd")) == book


def test_row_round_trip_and_printer_column() -> None:
    book = CliqueChannels(CLIQUE).assign("a", 3, "ns", "cd-a").assign("b", 1).release("b")
    assert CliqueChannels.from_row(book.to_row()) == book
    assert format_channels({"z.1": 4, "a.2": 9}) == "a.2:9,z.1:4"
    assert format_channels({}) == ""


# ---- properties --------------------------------------------------------------------------------------------
DOMAINS = [f"d{i}" for i in range(8)]
operations = st.lists(
    st.tuples(st.sampled_from(["assign", "release", "adopt"]), st.sampled_from(DOMAINS), st.integers(0, 9)),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(operations, st.integers(2, 8))
def test_live_channels_stay_unique_nonzero_and_follow_release_order(
    ops: list[tuple[str, str, int]], count: int
) -> None:
    book = CliqueChannels(CLIQUE)
    last_released: list[int] = []  # model: release order of the channels free now
    for op, uid, number in ops:
        if op == "assign" and uid not in book.held:
            channel = book.pick(count)
            free_below = [c for c in range(1, count) if c not in book.in_use()]
            if channel is None:
                assert free_below == [] and book.free(count) == 0
                continue
            assert channel != 0 and channel in free_below
            never_used = [c for c in free_below if c not in last_released]
            if never_used:
                assert channel == min(never_used)
            else:
                assert channel == next(c for c in last_released if c in free_below)
            book = book.assign(uid, channel)
            last_released = [c for c in last_released if c != channel]
        elif op == "release" and uid in book.held:
            channel = book.held[uid].channel
            book = book.release(uid)
            last_released = [c for c in last_released if c != channel] + [channel]
        elif op == "adopt":
            before = book
            book, conflict = book.adopt(uid, number) if number > 0 else (book, None)
            if conflict is not None:
                assert book is before
            last_released = [c for c in book.released]
        channels = [h.channel for h in book.held.values()]
        assert len(channels) == len(set(channels)), "one channel, one domain per clique"
        assert 0 not in channels
        assert not set(book.released) & set(channels)
        assert CliqueChannels.from_row(book.to_row()) == book


def recorded(position: int, stream: str, event: NewEvent) -> RecordedEvent:
    return RecordedEvent(
        position, stream, position, event.type, event.schema_version, event.data, event.metadata,
        datetime(2026, 11, 25, tzinfo=UTC), "h",
    )  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from(DOMAINS)), max_size=40))
def test_the_projection_rebuilt_from_the_log_equals_the_live_decisions(
    steps: list[tuple[bool, str]],
) -> None:
    """What the controller decided live is what a restart folds back from its log."""
    book = CliqueChannels(CLIQUE)
    log: list[RecordedEvent] = []
    for assign, uid in steps:
        if assign and uid not in book.held:
            channel = book.pick(4)
            if channel is None:
                continue
            event: ImexChannelAssigned | ImexChannelReleased = ImexChannelAssigned(
                CLIQUE, channel, uid, "ns", uid
            )
        elif not assign and uid in book.held:
            event = ImexChannelReleased(CLIQUE, book.held[uid].channel, uid, "ns", uid)
        else:
            continue
        book = fold_channel_event(book, event)
        log.append(recorded(len(log) + 1, channel_stream(CLIQUE), NewEvent.of(event)))
    rows: dict[tuple[object, ...], dict[str, object]] = {}
    fold_into(ChannelProjection(), rows, log)
    rebuilt = CliqueChannels.from_row(rows[(CLIQUE,)]) if rows else CliqueChannels(CLIQUE)
    assert rebuilt == book
    assert all(isinstance(decode(e), ImexChannelAssigned | ImexChannelReleased) for e in log)


def test_the_projection_adopts_a_published_number_and_ignores_deletions() -> None:
    observed = {
        "domain_uid": "a", "kind": "ComputeDomainClique", "namespace": "nvidia-dra", "name": f"a.{CLIQUE}",
        "uid": "o1", "resource_version": "5", "change": "ADDED",
        "summary": {"clique": CLIQUE, "daemons": [], "imexChannel": 5},
    }  # fmt: skip
    rows: dict[tuple[object, ...], dict[str, object]] = {}
    events = [
        recorded(1, "domain/a", NewEvent("DomainObjectObserved", observed)),
        recorded(2, "domain/a", NewEvent("DomainObjectObserved", {**observed, "change": "DELETED"})),
    ]
    fold_into(ChannelProjection(), rows, events)
    book = CliqueChannels.from_row(rows[(CLIQUE,)])
    assert book.held["a"].channel == 5 and not book.held["a"].recorded
    other = {**observed, "kind": "Pod"}
    fold_into(
        ChannelProjection(), (fresh := {}), [recorded(1, "domain/a", NewEvent("DomainObjectObserved", other))]
    )
    assert fresh == {}
