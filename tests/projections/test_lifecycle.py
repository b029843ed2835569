"""The lifecycle folds, through the runner, on both stores."""

from __future__ import annotations

from cdctl.domain.claims import (
    ChannelAllocated,
    ClaimPrepareFenced,
    ClaimPrepareRepaired,
    ClaimPrepareStarted,
    claim_stream,
)
from cdctl.domain.events import NewEvent
from cdctl.projections.lifecycle import lifecycle_projections
from cdctl.projections.replay import replay
from cdctl.projections.runner import ProjectionRunner
from cdctl.store import EventStore
from tests.projections.helpers import fail, prepare, unprepare


async def runner_for(store: EventStore) -> ProjectionRunner:
    runner = ProjectionRunner(store, lifecycle_projections())
    await runner.start()
    await runner.catch_up()
    return runner


async def test_claim_lifecycle_follows_prepare_and_unprepare(store: EventStore) -> None:
    await prepare(store, "u1", node="n7", channel=3, domain="d9")
    runner = await runner_for(store)
    row = runner.view("claim_lifecycle")[("u1",)]
    assert (row["namespace"], row["name"], row["node"], row["domain_uid"]) == ("ns", "claim-u1", "n7", "d9")
    assert row["state"] == "PrepareCompleted" and row["outcome"] == "prepared"
    assert row["requested_at"] and row["prepared_at"] and row["unprepared_at"] is None
    await unprepare(store, "u1")
    await runner.catch_up()
    assert ("u1",) not in runner.view("claim_lifecycle")  # the live view holds what the node still holds
    [row] = (await replay(store, lifecycle_projections())).tables["claim_lifecycle"]
    assert row["state"] == "Unprepared" and row["unprepared_at"] is not None and row["position"] == 4
    assert row["requested_at"] and row["prepared_at"] and row["node"] == "n7"


async def test_failures_keep_the_last_error(store: EventStore) -> None:
    await fail(store, "u2", reason="ComputeDomain daemon on n1 not ready")
    runner = await runner_for(store)
    row = runner.view("claim_lifecycle")[("u2",)]
    assert row["state"] == "PrepareFailed" and row["last_error"] == "ComputeDomain daemon on n1 not ready"


async def test_channel_allocations_are_released_by_unprepare(store: EventStore) -> None:
    await prepare(store, "u1", node="n1", channel=0)
    runner = await runner_for(store)
    [row] = [r for k, r in runner.view("channel_allocations").items() if k[0] != "open"]
    assert (row["node"], row["channel"], row["claim_uid"], row["released_at"]) == ("n1", 0, "u1", None)
    await unprepare(store, "u1")
    await runner.catch_up()
    assert dict(runner.view("channel_allocations")) == {}  # nothing open
    [row] = (await replay(store, lifecycle_projections())).tables["channel_allocations"]
    assert row["released_at"] is not None and row["allocated_at"] is not None


async def test_checkpoint_transitions_record_from_and_to(store: EventStore) -> None:
    await fail(store, "u3")
    await prepare(store, "u3")
    await unprepare(store, "u3")
    runner = await runner_for(store)
    assert ("last", "u3") not in runner.view("checkpoint_transitions")
    result = await replay(store, lifecycle_projections())
    transitions = [(r["from_state"], r["to_state"]) for r in result.tables["checkpoint_transitions"]]
    assert transitions == [
        ("", "PrepareStarted"), ("PrepareStarted", "PrepareFailed"), ("PrepareFailed", "PrepareStarted"),
        ("PrepareStarted", "PrepareCompleted"), ("PrepareCompleted", "Unprepared"),
    ]  # fmt: skip


async def test_domain_history_has_every_domain_event(store: EventStore) -> None:
    await store.append("domain/d1", [NewEvent("ComputeDomainObserved", {"namespace": "ns", "name": "cd"})])
    await store.append("claim/u1", [NewEvent("Other", {})])
    await store.append("domain/d1", [NewEvent("WorkloadTemplateCreated", {"name": "cd-channel"})])
    result = await replay(store, lifecycle_projections())
    rows = result.tables["domain_history"]
    assert [(r["domain_uid"], r["type"], r["position"]) for r in rows] == [
        ("d1", "ComputeDomainObserved", 1), ("d1", "WorkloadTemplateCreated", 3),
    ]  # fmt: skip
    assert rows[0]["namespace"] == "ns" and rows[0]["name"] == "cd"


async def test_a_prepare_fenced_after_unprepare_lands_on_the_history_row(store: EventStore) -> None:
    await prepare(store, "u4")
    await unprepare(store, "u4")
    await store.append(
        claim_stream("u4"), [NewEvent.of(ClaimPrepareFenced("u4", "a1", "allocation a1 was unprepared"))]
    )
    await store.append(claim_stream("u9"), [NewEvent.of(ClaimPrepareFenced("u9", "a1", "never prepared"))])
    runner = await runner_for(store)
    assert dict(runner.view("claim_lifecycle")) == {}
    rows = {
        r["claim_uid"]: r for r in (await replay(store, lifecycle_projections())).tables["claim_lifecycle"]
    }
    assert set(rows) == {"u4"}  # no history row is invented for a claim this node never prepared
    assert rows["u4"]["outcome"] == "fenced" and rows["u4"]["last_error"] == "allocation a1 was unprepared"
    assert rows["u4"]["state"] == "Unprepared" and rows["u4"]["node"] == "n1" and rows["u4"]["position"] == 5


async def test_a_claim_prepared_again_after_unprepare_gets_a_fresh_request(store: EventStore) -> None:
    await prepare(store, "u5")
    await unprepare(store, "u5")
    await prepare(store, "u5", node="n2")
    runner = await runner_for(store)
    row = runner.view("claim_lifecycle")[("u5",)]
    assert row["state"] == "PrepareCompleted" and row["node"] == "n2" and row["unprepared_at"] is None
    transitions = (await replay(store, lifecycle_projections())).tables["checkpoint_transitions"]
    assert [(t["from_state"], t["to_state"]) for t in transitions][3:5] == [
        ("", "PrepareStarted"),
        ("PrepareStarted", "PrepareCompleted"),
    ]


async def test_an_all_mode_allocation_records_how_many_channels_it_holds(store: EventStore) -> None:
    await store.append(
        claim_stream("u6"),
        [
            NewEvent.of(ClaimPrepareStarted("u6", "ns", "all", "n1", "channel", "d1", "a1", ["channel-0"])),
            NewEvent.of(ChannelAllocated("u6", "n1", 0, "d1", count=2048)),
        ],
    )
    [row] = (await replay(store, lifecycle_projections())).tables["channel_allocations"]
    assert (row["channel"], row["count"]) == (0, 2048)


async def test_a_repair_is_a_checkpoint_transition_that_keeps_the_state(store: EventStore) -> None:
    await prepare(store, "u4")
    repaired = ClaimPrepareRepaired("u4", ["cdi-spec"], "CDI spec missing", "/cdi/claim_u4.yaml")
    await store.append(claim_stream("u4"), [NewEvent.of(repaired)])
    runner = await runner_for(store)
    assert runner.view("checkpoint_transitions")[("last", "u4")] == {"state": "PrepareCompleted"}
    rows = (await replay(store, lifecycle_projections())).tables["checkpoint_transitions"]
    assert [(r["from_state"], r["to_state"], r["reason"]) for r in rows] == [
        ("", "PrepareStarted", ""),
        ("PrepareStarted", "PrepareCompleted", ""),
        ("PrepareCompleted", "PrepareCompleted", "repaired cdi-spec: CDI spec missing"),
    ]
    row = runner.view("claim_lifecycle")[("u4",)]
    assert (row["state"], row["outcome"]) == ("PrepareCompleted", "prepared"), "a repair ends nothing"
