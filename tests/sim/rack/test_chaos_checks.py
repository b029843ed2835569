"""The chaos invariants can fail: a device held by two claims, a claim prepared for two allocations, a
tampered log, and what a kill explains apart from what it does not."""

from __future__ import annotations

from pathlib import Path

from cdctl.domain import claims as c
from cdctl.domain.events import DomainEvent, NewEvent
from cdctl.sim.rack.chaos import (
    ChaosPlan,
    Kill,
    Monkey,
    Witness,
    prepare_problems,
    prepared_in_log,
    tolerated,
    verify_log,
)
from cdctl.store import SqliteEventStore
from tests.store.tampering import edit_data

NODE = "n1"


async def _log(path: Path, events: list[DomainEvent]) -> None:
    async with await SqliteEventStore.open(path) as store:
        for event in events:
            uid = str(event.claim_uid)
            stream = c.claim_stream(uid)
            version = len(await store.read_stream(stream))
            await store.append(stream, [NewEvent.of(event)], version)


def _prepared(uid: str, allocation: str, device: str = "channel-0") -> list[DomainEvent]:
    return [
        c.ClaimPrepareStarted(uid, "ns", uid, NODE, allocation=allocation, devices=[device]),
        c.ChannelAllocated(uid, NODE, 0),
        c.ClaimPrepareCompleted(uid),
    ]


async def test_a_device_prepared_for_a_second_claim_before_the_first_let_go_is_caught(tmp_path: Path) -> None:
    db = tmp_path / "clean.db"
    await _log(db, [*_prepared("a", "alloc-a"), c.ChannelReleased("a", NODE, 0), c.ClaimUnprepared("a"),
                    *_prepared("b", "alloc-b")])  # fmt: skip
    assert prepare_problems(db, NODE) == []
    assert prepared_in_log(db) == {"a", "b"}
    overlapping = tmp_path / "overlap.db"
    await _log(overlapping, [*_prepared("a", "alloc-a"), *_prepared("b", "alloc-b")])
    found = prepare_problems(overlapping, NODE)
    assert any("channel-0 prepared for b while a held it" in p for p in found)
    assert any("channel 0 given to b while a held it" in p for p in found)


async def test_a_claim_prepared_for_two_allocations_is_caught(tmp_path: Path) -> None:
    db = tmp_path / "twice.db"
    await _log(db, [*_prepared("a", "alloc-1"), c.ClaimUnprepared("a"), *_prepared("a", "alloc-2")])
    assert prepare_problems(db, NODE) == [f"{NODE}: claim a prepared for 2 allocations"]


async def test_verify_log_finds_an_edited_event(tmp_path: Path) -> None:
    db = tmp_path / "events.db"
    await _log(db, _prepared("a", "alloc-a"))
    assert await verify_log(db) == []
    edit_data(db, 2, '{"claim_uid": "someone-else"}')
    assert await verify_log(db) != []


def test_only_what_a_kill_explains_is_tolerated() -> None:
    monkey = Monkey.__new__(Monkey)
    monkey.kills = [Kill(1.0, "plugin", "n1"), Kill(2.0, "controller", "controller 1")]
    problems = [
        "n1: NodeWatchResources of compute-domain.nvidia.com: Connection lost",
        "n2: NodeWatchResources of compute-domain.nvidia.com: Connection lost",
        "plugin n1 exited with -9: ...",
        "controller 1 exited with -9: ...",
        "controller 1 exited with 1: a crash after its restart",
        "controller exited with 1: boom",
        "ResourceClaim team-a/x still exists",
    ]
    assert tolerated(problems, monkey) == problems[1:2] + problems[4:]
    assert ChaosPlan(seed=1, kills=1).kinds == ("controller", "plugin", "daemon", "kubelet")


def test_a_worker_that_ran_without_its_channel_is_named() -> None:
    witness = Witness.__new__(Witness)
    witness.ran = {"u1": ("job-0", "n1", True), "u2": ("job-1", "n2", False)}
    assert witness.problems() == ["worker job-1 ran on n2 without its channel"]
