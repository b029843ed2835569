"""Prepare and Unprepare under channel isolation: the clique's channel, the fence, the refusals, no label."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from cdctl.api.isolation import ImexIsolation
from cdctl.api.refs import DomainInfo
from cdctl.domain import claims as c
from cdctl.domain.errors import PermanentError, RetriableError
from cdctl.plugin import cdi
from cdctl.plugin.channels import ALL_REFUSED
from cdctl.plugin.checkpoint import ClaimBook
from cdctl.plugin.devices import ClaimRef, parse_claim
from cdctl.plugin.prepare import DeviceState
from cdctl.plugin.preparesettings import ChannelNotAssigned, DaemonNotReady
from tests.plugin.conftest import CLIQUE, Node
from tests.plugin.fakes import DOM1, DOM2, DOM_OTHER, channel_claim

CLAIM_ID = "k8s.compute-domain.nvidia.com/claim="


@pytest.fixture
async def chan(node: Node) -> Node:
    """The node under channel isolation, driver-managed, with 4 slots; DOM2 a second domain of `default`."""
    node.settings = dataclasses.replace(node.settings, isolation=ImexIsolation.CHANNEL, channel_slots=4)
    node.cluster.domains[DOM2] = DomainInfo(DOM2, "cd2", "default")
    node.cluster.domains[DOM_OTHER] = DomainInfo(DOM_OTHER, "theirs", "other-tenant")
    node.cluster.shared_ready.add("node-a")
    return await restart(node)


async def restart(node: Node) -> Node:
    book = await ClaimBook.load(node.store, node.settings.node)
    node.state = DeviceState(node.settings, book, node.cluster, node.fabric, node.gates)
    return node


async def prepare(node: Node, uid: str, domain: str = DOM1, device: str = "channel", **kw: object) -> list:
    claim = parse_claim(channel_claim(uid, domain, name=f"rc-{uid}", device=device, **kw))  # type: ignore[arg-type]
    return await node.state.prepare(claim, node.state.book.version(uid))


def channel_nodes(node: Node, uid: str) -> list[dict]:
    spec = cdi.read_spec(cdi.claim_spec_path(node.settings.cdi_root, uid))
    assert spec is not None
    (device,) = spec["devices"]
    return list(device["containerEdits"]["deviceNodes"])


async def test_claims_of_one_domain_share_its_channel_and_no_node_label(chan: Node) -> None:
    await chan.cluster.assign_channel(DOM1, CLIQUE, 7)
    first = await prepare(chan, "c1")
    second = await prepare(chan, "c2")  # a second pod of the domain on this node: the same shared device
    assert first[0]["device_name"] == "channel" and first[0]["cdi_device_ids"] == [CLAIM_ID + "c1-channel"]
    assert second[0]["cdi_device_ids"] == [CLAIM_ID + "c2-channel"]
    for uid in ("c1", "c2"):
        assert channel_nodes(chan, uid) == [
            {
                "path": "/dev/nvidia-caps-imex-channels/channel7",
                "type": "c",
                "major": 234,
                "minor": 7,
                "fileMode": 438,
            }
        ]
        rec = chan.state.book.get(uid)
        assert rec is not None and rec.completed and rec.channels == (7,) and rec.domain_uid == DOM1
    assert chan.cluster.labels == {} and "add_node_label" not in chan.cluster.requests
    events = await chan.store.read_stream("claim/c1")
    allocated = [e for e in events if e.type == "ChannelAllocated"]
    assert [(e.data["node"], e.data["channel"], e.data["domain_uid"]) for e in allocated] == [
        ("node-a", 7, DOM1)
    ]


async def test_unprepare_releases_the_channel_and_touches_no_label(chan: Node) -> None:
    await chan.cluster.assign_channel(DOM1, CLIQUE, 7)
    await prepare(chan, "c1")
    assert await chan.state.unprepare(ClaimRef("c1", "default", "rc-c1"))
    assert not cdi.claim_spec_path(chan.settings.cdi_root, "c1").exists()
    released = [e for e in await chan.store.read_stream("claim/c1") if e.type == "ChannelReleased"]
    assert [(e.data["node"], e.data["channel"]) for e in released] == [("node-a", 7)]
    assert "remove_node_label" not in chan.cluster.requests


async def test_unassigned_channel_is_retriable_names_domain_and_clique_and_wakes(chan: Node) -> None:
    with pytest.raises(ChannelNotAssigned) as caught:
        await prepare(chan, "c1")
    assert str(caught.value) == f"waiting for an IMEX channel for ComputeDomain default/cd in clique {CLIQUE}"
    rec = chan.state.book.get("c1")
    assert rec is not None and rec.last_error_retriable and rec.channels == ()
    await chan.cluster.assign_channel(DOM1, CLIQUE, 3)
    await caught.value.wake()  # returns now that the watch carries the number
    assert await prepare(chan, "c1")


async def test_allocation_mode_all_is_refused_permanently(chan: Node) -> None:
    await chan.cluster.assign_channel(DOM1, CLIQUE, 7)
    with pytest.raises(PermanentError) as caught:
        await prepare(chan, "c1", mode="All")
    assert str(caught.value) == ALL_REFUSED
    assert ALL_REFUSED == (
        "allocationMode All is not supported with channel isolation: it would hand one tenant every channel"
    )
    rec = chan.state.book.get("c1")
    assert rec is not None and rec.state is c.ClaimState.PREPARE_FAILED and not rec.last_error_retriable


async def test_all_refused_with_channel_wording_under_host_managed_too(chan: Node) -> None:
    chan.settings = dataclasses.replace(chan.settings, host_managed=True)
    await restart(chan)
    await chan.cluster.assign_channel(DOM1, CLIQUE, 7)
    with pytest.raises(PermanentError, match=r"^allocationMode All is not supported with channel isolation"):
        await prepare(chan, "c1", mode="All")


async def test_fence_while_another_domains_completed_claim_holds_the_number(chan: Node) -> None:
    """The force-deleted pod: its claim is deallocated and its pod object gone, but its container still
    runs until the kubelet unprepares the claim. The controller handed the number to another domain (only
    possible once it is released in the clique); this node refuses that domain's claim until then."""
    await chan.cluster.assign_channel(DOM1, CLIQUE, 5)
    await prepare(chan, "c1")
    chan.cluster.claims.clear()  # the pod was force-deleted and its claim deallocated: the API has nothing
    await chan.cluster.assign_channel(DOM2, CLIQUE, 5)
    for _ in range(2):
        with pytest.raises(RetriableError, match="IMEX channel 5 is still held on this node") as caught:
            await prepare(chan, "c2", domain=DOM2)
        assert "default/rc-c1 (c1) of ComputeDomain " + DOM1 in str(caught.value)
    rec2 = chan.state.book.get("c2")
    assert rec2 is not None and rec2.channels == () and not rec2.completed  # nothing recorded as held
    assert not cdi.claim_spec_path(chan.settings.cdi_root, "c2").exists()
    # A plugin restart keeps the fence: the log, not memory, says who holds the number.
    await restart(chan)
    with pytest.raises(RetriableError, match="IMEX channel 5 is still held"):
        await prepare(chan, "c2", domain=DOM2)
    # The kubelet kills the container and unprepares: the number is free on this node.
    assert await chan.state.unprepare(ClaimRef("c1", "default", "rc-c1"))
    await prepare(chan, "c2", domain=DOM2)
    assert channel_nodes(chan, "c2")[0]["minor"] == 5


async def test_fence_also_holds_against_a_sweep_that_has_not_run(chan: Node) -> None:
    """The stale sweep unprepares a claim whose ResourceClaim is gone only if it was never completed: a
    completed one waits for the kubelet (whose container may still run), so the fence lasts as long."""
    await chan.cluster.assign_channel(DOM1, CLIQUE, 5)
    await prepare(chan, "c1")
    chan.cluster.claims.clear()
    assert await chan.state.sweep_stale() == []
    await chan.cluster.assign_channel(DOM2, CLIQUE, 5)
    with pytest.raises(RetriableError, match="still held"):
        await prepare(chan, "c2", domain=DOM2)


async def test_different_numbers_of_two_domains_live_side_by_side(chan: Node) -> None:
    await chan.cluster.assign_channel(DOM1, CLIQUE, 5)
    await chan.cluster.assign_channel(DOM2, CLIQUE, 6)
    await prepare(chan, "c1")
    await prepare(chan, "c2", domain=DOM2)
    assert channel_nodes(chan, "c1")[0]["minor"] == 5
    assert channel_nodes(chan, "c2")[0]["minor"] == 6


async def test_driver_managed_waits_for_the_shared_daemon(chan: Node) -> None:
    chan.cluster.shared_ready.clear()
    await chan.cluster.assign_channel(DOM1, CLIQUE, 5)
    with pytest.raises(DaemonNotReady, match="shared IMEX daemon on this node is not ready"):
        await prepare(chan, "c1")
    assert not cdi.claim_spec_path(chan.settings.cdi_root, "c1").exists()
    chan.cluster.shared_ready.add("node-a")
    assert await prepare(chan, "c1")


async def test_host_managed_does_not_wait_for_a_daemon(chan: Node) -> None:
    chan.settings = dataclasses.replace(chan.settings, host_managed=True)
    await restart(chan)
    chan.cluster.shared_ready.clear()
    await chan.cluster.assign_channel(DOM1, CLIQUE, 5)
    assert await prepare(chan, "c1")
    assert "shared_daemon_ready" not in chan.cluster.requests


async def test_a_claim_naming_a_domain_in_another_namespace_is_refused(chan: Node) -> None:
    """The tenant of `default` names the domainID of `other-tenant`'s domain to get its channel."""
    await chan.cluster.assign_channel(DOM_OTHER, CLIQUE, 9)
    with pytest.raises(PermanentError, match="namespace is different than the ComputeDomain's namespace"):
        await prepare(chan, "c1", domain=DOM_OTHER)
    rec = chan.state.book.get("c1")
    assert rec is not None and rec.channels == ()
    assert not cdi.claim_spec_path(chan.settings.cdi_root, "c1").exists()
    assert "clique_channel" not in chan.cluster.requests  # refused before the number was even read


async def test_slot_devices_and_only_published_names(chan: Node) -> None:
    await chan.cluster.assign_channel(DOM1, CLIQUE, 5)
    devices = await prepare(chan, "c1", device="channel-slot-3")
    assert devices[0]["device_name"] == "channel-slot-3"
    for name in ("channel-0", "daemon-0", "channel-slot-4"):
        with pytest.raises(PermanentError, match=f"requested device is not allocatable: {name}"):
            await prepare(chan, f"x-{name}", device=name)


async def test_a_slot_is_one_claims_but_the_shared_device_is_many(chan: Node) -> None:
    await chan.cluster.assign_channel(DOM1, CLIQUE, 5)
    await prepare(chan, "c1", device="channel-slot-0")
    with pytest.raises(RetriableError, match="already allocated to different claim c1"):
        await prepare(chan, "c2", device="channel-slot-0")
    await prepare(chan, "c3")
    await prepare(chan, "c4")


async def test_no_clique_is_permanent(chan: Node) -> None:
    chan.fabric.clique_id = ""
    with pytest.raises(PermanentError, match="channel isolation requires an NVLink clique"):
        await prepare(chan, "c1")


async def test_repeat_prepare_repairs_the_channel_spec(chan: Node) -> None:
    await chan.cluster.assign_channel(DOM1, CLIQUE, 11)
    first = await prepare(chan, "c1")
    path = cdi.claim_spec_path(chan.settings.cdi_root, "c1")
    path.unlink()
    assert await prepare(chan, "c1") == first
    assert channel_nodes(chan, "c1")[0]["minor"] == 11


async def test_a_changed_number_between_attempts_is_released_then_allocated(chan: Node) -> None:
    chan.cluster.shared_ready.clear()
    await chan.cluster.assign_channel(DOM1, CLIQUE, 5)
    with pytest.raises(DaemonNotReady):
        await prepare(chan, "c1")
    await chan.cluster.assign_channel(DOM1, CLIQUE, 6)
    chan.cluster.shared_ready.add("node-a")
    await prepare(chan, "c1")
    rec = chan.state.book.get("c1")
    assert rec is not None and rec.channels == (6,)
    types = [e.type for e in await chan.store.read_stream("claim/c1")]
    assert types.count("ChannelAllocated") == 2 and types.count("ChannelReleased") == 1


def test_domain_isolation_settings_publish_the_old_names(tmp_path: Path) -> None:
    from tests.plugin.conftest import node_settings

    settings = node_settings(tmp_path)
    assert settings.published == {"channel-0": "channel", "daemon-0": "daemon"}
    assert settings.shared_devices == frozenset()


async def test_two_domains_completing_on_one_number_at_once_cannot_both_complete(chan: Node) -> None:
    """The completion-time check holds the number for the claim completing: another domain's claim
    completing meanwhile on the same number is refused (retriable), one of the same domain is not."""
    from cdctl.plugin.locks import DeviceHolds

    holds = DeviceHolds()
    one = parse_claim(channel_claim("c1", DOM1, device="channel"))
    two = parse_claim(channel_claim("c2", DOM2, device="channel"))
    three = parse_claim(channel_claim("c3", DOM1, device="channel"))
    shared = frozenset({"channel"})
    holds.take_shared(one, [], shared=shared, channel=5, domain_uid=DOM1)
    with pytest.raises(RetriableError, match="IMEX channel 5 is being prepared for claim c1"):
        holds.take_shared(two, [], shared=shared, channel=5, domain_uid=DOM2)
    holds.take_shared(three, [], shared=shared, channel=5, domain_uid=DOM1)
    holds.release("c1")
    holds.release("c3")
    holds.take_shared(two, [], shared=shared, channel=5, domain_uid=DOM2)
