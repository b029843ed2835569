"""Prepare/Unprepare against the event-log checkpoint, a fake cluster and a real CDI directory."""

from __future__ import annotations

import dataclasses
import json

import pytest

from cdctl.api.refs import DomainInfo
from cdctl.domain import claims as c
from cdctl.domain.errors import PermanentError, RetriableError
from cdctl.plugin import cdi
from cdctl.plugin.checkpoint import ClaimBook
from cdctl.plugin.devices import ClaimRef, parse_claim
from cdctl.plugin.prepare import DeviceState
from cdctl.plugin.preparesettings import PrepareFenced
from tests.plugin.conftest import CLIQUE, Node
from tests.plugin.fakes import DOM1, DOM9, DOM_OTHER, channel_claim, claim_obj, daemon_claim, opaque, result

CLAIM_ID = "k8s.compute-domain.nvidia.com/claim="


async def prepared_channel(node: Node, uid: str = "c1", **kw: object) -> list[dict]:
    node.cluster.ready.add((DOM1, "node-a"))
    claim = parse_claim(channel_claim(uid, DOM1, **kw))  # type: ignore[arg-type]
    return await node.state.prepare(claim, node.state.book.version(uid))


async def test_channel_prepare_labels_node_writes_cdi_and_records_events(node: Node) -> None:
    devices = await prepared_channel(node)
    assert devices == [
        {
            "request_names": ["channel"],
            "pool_name": "node-a",
            "device_name": "channel-0",
            "cdi_device_ids": [CLAIM_ID + "c1-channel-0"],
        }
    ]
    assert node.cluster.labels == {"node-a": DOM1}
    spec = cdi.read_spec(cdi.claim_spec_path(node.settings.cdi_root, "c1"))
    assert spec is not None
    (dev,) = spec["devices"]
    assert dev["name"] == "c1-channel-0"
    assert dev["containerEdits"]["deviceNodes"] == [
        {
            "path": "/dev/nvidia-caps-imex-channels/channel0",
            "type": "c",
            "major": 234,
            "minor": 0,
            "fileMode": 438,
        }
    ]
    types = [e.type for e in await node.store.read_stream("claim/c1")]
    assert types == ["ClaimPrepareStarted", "ChannelAllocated", "CdiSpecWritten", "ClaimPrepareCompleted"]


async def test_prepare_returns_checkpointed_devices_for_completed_claim(node: Node) -> None:
    first = await prepared_channel(node)
    node.cluster.labels.clear()  # a repeat must not touch the world again
    again = await prepared_channel(node)
    assert again == first
    assert node.cluster.labels == {}
    assert len(await node.store.read_stream("claim/c1")) == 4


async def test_unprepare_missing_claim_changes_nothing_but_leaves_a_tombstone(node: Node) -> None:
    """Nothing to undo, but the Unprepare is recorded, so a Prepare already in flight is fenced."""
    assert not await node.state.unprepare(ClaimRef("nope", "default", "x"))
    assert [e.type for e in await node.store.read_stream("claim/nope")] == ["ClaimUnprepared"]
    assert node.cluster.labels == {}
    assert not await node.state.unprepare(ClaimRef("nope", "default", "x"))  # a second one records nothing
    assert len(await node.store.read_stream("claim/nope")) == 1


async def test_unprepare_removes_label_spec_and_releases_channel(node: Node) -> None:
    await prepared_channel(node)
    assert await node.state.unprepare(ClaimRef("c1", "default", "rc"))
    assert node.cluster.labels == {}
    assert not cdi.claim_spec_path(node.settings.cdi_root, "c1").exists()
    rec = node.state.book.get("c1")
    assert rec is not None and rec.state is c.ClaimState.UNPREPARED and rec.channels == ()
    assert not await node.state.unprepare(ClaimRef("c1", "default", "rc"))  # idempotent


async def test_not_ready_daemon_is_retriable_and_recorded_once(node: Node) -> None:
    claim = parse_claim(channel_claim("c1", DOM1))
    for _ in range(3):
        with pytest.raises(RetriableError, match="current node not ready in ComputeDomain"):
            await node.state.prepare(claim, 0)
    stream = [e.type for e in await node.store.read_stream("claim/c1")]
    # attempt 1 fails; attempts 2 and 3 fail the same way and add nothing
    assert stream == ["ClaimPrepareStarted", "ChannelAllocated", "ClaimPrepareFailed"]
    assert node.cluster.labels == {"node-a": DOM1}  # labelled so the daemon gets scheduled
    node.cluster.ready.add((DOM1, "node-a"))
    assert await node.state.prepare(claim, 0)
    rec = node.state.book.get("c1")
    assert rec is not None and rec.completed and rec.last_error == ""


async def test_second_channel_claim_conflicts_with_completed_one(node: Node) -> None:
    await prepared_channel(node)
    node.cluster.domains[DOM1] = DomainInfo(DOM1, "cd", "default")
    with pytest.raises(RetriableError, match="already allocated to different claim c1"):
        await prepared_channel(node, "c2", name="rc2")


async def test_label_of_another_domain_is_retriable(node: Node) -> None:
    node.cluster.labels["node-a"] = DOM_OTHER
    with pytest.raises(RetriableError, match="different ComputeDomain"):
        await prepared_channel(node)


async def test_namespace_mismatch_is_permanent_and_missing_domain_retriable(node: Node) -> None:
    with pytest.raises(PermanentError, match="namespace is different than the ComputeDomain's namespace"):
        await prepared_channel(node, namespace="other")
    rec = node.state.book.get("c1")
    assert rec is not None and rec.state is c.ClaimState.PREPARE_FAILED and not rec.last_error_retriable
    with pytest.raises(RetriableError, match=f"ComputeDomain not found: {DOM9}"):
        await node.state.prepare(parse_claim(channel_claim("c2", DOM9)), 0)


async def test_unknown_field_and_unknown_allocation_mode_are_permanent(node: Node) -> None:
    bad_field = claim_obj(
        "c1", results=[result("channel", "channel-0")],
        configs=[opaque("ComputeDomainChannelConfig", DOM1, ["channel"], unexpectedField=1)],
    )  # fmt: skip
    with pytest.raises(PermanentError, match='strict decoding error: unknown field "unexpectedField"'):
        await node.state.prepare(parse_claim(bad_field), 0)
    with pytest.raises(PermanentError, match="unknown allocationMode 'Many'"):
        await prepared_channel(node, "c2", name="rc2", mode="Many")
    assert node.cluster.labels == {}


async def test_default_config_without_domain_is_rejected(node: Node) -> None:
    bare = claim_obj("c1", results=[result("channel", "channel-0")])
    with pytest.raises(PermanentError, match="domainID cannot be empty"):
        await node.state.prepare(parse_claim(bare), 0)


async def test_all_mode_injects_every_channel(node: Node) -> None:
    await prepared_channel(node, mode="All")
    spec = cdi.read_spec(cdi.claim_spec_path(node.settings.cdi_root, "c1"))
    assert spec is not None
    nodes = spec["devices"][0]["containerEdits"]["deviceNodes"]
    assert len(nodes) == 2048 and nodes[2047]["path"].endswith("/channel2047") and nodes[222]["minor"] == 222
    rec = node.state.book.get("c1")
    assert rec is not None and len(rec.channels) == 2048


async def test_no_clique_means_no_device_nodes_and_no_claim_id(node: Node) -> None:
    node.fabric.clique_id = ""
    devices = await prepared_channel(node)
    assert devices[0]["cdi_device_ids"] == []
    assert not cdi.claim_spec_path(node.settings.cdi_root, "c1").exists()


async def test_fabric_pending_is_retriable(node: Node) -> None:
    node.fabric.pending = "NVLink fabric not attached (device 0/GPU-0): state=2 (IN_PROGRESS)"
    with pytest.raises(RetriableError, match="IN_PROGRESS"):
        await prepared_channel(node)


async def test_daemon_prepare_writes_dir_template_env_mount_and_mgmt_node(node: Node) -> None:
    node.cluster.domains[DOM1] = DomainInfo(DOM1, "cd", "default")
    devices = await node.state.prepare(parse_claim(daemon_claim("d1", DOM1)), 0)
    assert devices[0]["cdi_device_ids"] == [
        "k8s.compute-domain.nvidia.com/device=all",
        CLAIM_ID + "d1-daemon-0",
    ]
    root = node.settings.plugin_dir / "domains" / DOM1
    assert "IMEX_CMD_PORT=50005" in (root / "imexd.cfg.tmpl").read_text()
    spec = cdi.read_spec(cdi.claim_spec_path(node.settings.cdi_root, "d1"))
    assert spec is not None
    edits = spec["devices"][0]["containerEdits"]
    assert edits["env"] == [
        f"CLIQUE_ID={CLIQUE}",
        f"COMPUTE_DOMAIN_UUID={DOM1}",
        "COMPUTE_DOMAIN_NAME=cd",
        "COMPUTE_DOMAIN_NAMESPACE=default",
    ]
    assert edits["mounts"] == [
        {"hostPath": str(root), "containerPath": "/imexd", "options": ["rw", "nosuid", "nodev", "bind"]}
    ]
    assert edits["deviceNodes"] == [
        {"path": "/dev/nvidia-caps/nvidia-cap9", "type": "c", "major": 235, "minor": 9, "fileMode": 256}
    ]
    assert node.cluster.labels == {}  # daemon claims do not label


async def test_daemon_claim_with_two_devices_is_rejected(node: Node) -> None:
    obj = claim_obj(
        "d1", results=[result("daemon", "daemon-0"), result("daemon", "daemon-0")],
        configs=[opaque("ComputeDomainDaemonConfig", DOM1, ["daemon"])],
    )  # fmt: skip
    with pytest.raises(PermanentError, match="only expected 1 device"):
        await node.state.prepare(parse_claim(obj), 0)


async def test_stale_prepare_after_unprepare_is_fenced(node: Node) -> None:
    claim = parse_claim(channel_claim("c1", DOM1))
    fence = node.state.book.version("c1")  # the call begins
    with pytest.raises(RetriableError):
        await node.state.prepare(claim, fence)  # daemon not ready yet
    assert await node.state.unprepare(claim.ref)  # the kubelet gives up and unprepares
    node.cluster.ready.add((DOM1, "node-a"))
    with pytest.raises(PrepareFenced):
        await node.state.prepare(claim, fence)  # the old call's retry must not re-prepare
    assert node.cluster.labels == {}
    assert not cdi.claim_spec_path(node.settings.cdi_root, "c1").exists()
    assert (await node.store.read_stream("claim/c1"))[-1].type == "ClaimPrepareFenced"
    # a new call (new fence) for the same claim is legitimate
    assert await node.state.prepare(claim, node.state.book.version("c1"))


async def test_restart_rebuilds_the_checkpoint_from_the_log(node: Node) -> None:
    first = await prepared_channel(node)
    state = await node.restart()
    rec = state.book.get("c1")
    assert rec is not None and rec.completed and list(rec.devices) == first
    assert await state.prepare(parse_claim(channel_claim("c1", DOM1)), state.book.version("c1")) == first


async def test_changed_boot_id_invalidates_prepared_claims(node: Node) -> None:
    await node.state.book.observe_boot("boot-1")
    await prepared_channel(node)
    state = await node.restart()
    assert await state.book.observe_boot("boot-1") == []  # same boot: kept
    state = await node.restart()
    invalidated = await state.book.observe_boot("boot-2")
    assert [r.claim_uid for r in invalidated] == ["c1"]
    rec = state.book.get("c1")
    assert rec is not None and rec.state is c.ClaimState.INVALIDATED and rec.channels == ()
    state = await node.restart()
    assert state.book.boot_id == "boot-2"
    # the kubelet prepares again after the reboot: a fresh prepare, not the old answer
    assert await state.prepare(parse_claim(channel_claim("c1", DOM1)), state.book.version("c1"))
    types = [e.type for e in await node.store.read_stream("claim/c1")]
    assert types[-6:] == [
        "ChannelReleased", "ClaimInvalidated", "ClaimPrepareStarted", "ChannelAllocated", "CdiSpecWritten",
        "ClaimPrepareCompleted",
    ]  # fmt: skip


async def test_stale_sweep_unprepares_only_claims_that_are_gone(node: Node) -> None:
    for uid, name in (("gone", "rc-gone"), ("replaced", "rc-repl"), ("alive", "rc-alive")):
        with pytest.raises(RetriableError):  # each labels the node, then waits for its daemon
            await node.state.prepare(parse_claim(channel_claim(uid, DOM1, name=name)), 0)
    assert node.cluster.labels == {"node-a": DOM1}
    node.cluster.add_claim(channel_claim("alive", DOM1, name="rc-alive"))
    node.cluster.add_claim(channel_claim("new-uid", DOM1, name="rc-repl"))
    swept = await node.state.sweep_stale()
    assert sorted(swept) == ["gone", "replaced"]
    assert node.state.book.get("alive").state is c.ClaimState.PREPARE_FAILED  # type: ignore[union-attr]
    assert node.state.book.get("gone").state is c.ClaimState.UNPREPARED  # type: ignore[union-attr]
    # the claim still alive waits for this node's daemon: the label that schedules it stays
    assert node.cluster.labels == {"node-a": DOM1}
    del node.cluster.claims[("default", "rc-alive")]
    assert await node.state.sweep_stale() == ["alive"]
    assert node.cluster.labels == {}, "the last claim of the domain swept: the label goes"


async def test_host_managed_rules(node: Node) -> None:
    settings = dataclasses.replace(node.settings, host_managed=True)
    state = DeviceState(
        settings, await ClaimBook.load(node.store, "node-a"), node.cluster, node.fabric, node.gates
    )
    with pytest.raises(PermanentError, match="allocationMode All is not supported"):
        await state.prepare(parse_claim(channel_claim("c2", DOM1, name="x", mode="All")), 0)
    assert await state.prepare(parse_claim(channel_claim("c1", DOM1)), 0)
    assert node.cluster.labels == {}  # no labelling, no readiness wait
    with pytest.raises(PermanentError, match="daemon claims are disabled under HostManagedIMEX"):
        await state.prepare(parse_claim(daemon_claim("d1", DOM1)), 0)
    assert await state.unprepare(ClaimRef("c1", "default", "rc"))
    node.fabric.clique_id = ""
    with pytest.raises(PermanentError, match="requires an NVLink clique"):
        await state.prepare(parse_claim(channel_claim("c3", DOM1, name="y")), 0)


async def test_orphan_specs_are_removed(node: Node) -> None:
    await prepared_channel(node)
    orphan = cdi.claim_spec_path(node.settings.cdi_root, "orphan")
    cdi.write_spec(orphan, cdi.build_claim_spec("orphan", [cdi.ClaimDevice("channel-0")]), fsync=False)
    assert node.state.remove_orphan_specs() == [orphan]
    assert cdi.claim_spec_path(node.settings.cdi_root, "c1").exists()


async def test_prepare_for_an_older_allocation_is_fenced(node: Node) -> None:
    node.cluster.ready.add((DOM1, "node-a"))
    old = claim_obj(
        "c1", results=[result("channel", "channel-0")],
        configs=[opaque("ComputeDomainChannelConfig", DOM1, ["channel"])],
    )  # fmt: skip
    old["status"]["allocation"]["allocationTimestamp"] = "2026-01-01T00:00:00Z"
    new = json.loads(json.dumps(old))
    new["status"]["allocation"]["allocationTimestamp"] = "2026-01-01T00:05:00Z"
    first = parse_claim(old)
    assert await node.state.prepare(first, 0)
    assert await node.state.unprepare(first.ref)
    second = parse_claim(new)  # deallocated and allocated again
    assert await node.state.prepare(second, node.state.book.version("c1"))
    with pytest.raises(PrepareFenced, match="superseded"):
        await node.state.prepare(first, node.state.book.version("c1"))  # a late prepare for the old one
    rec = node.state.book.get("c1")
    assert rec is not None and rec.completed and rec.allocation == second.allocation_id
    assert rec.allocations == (first.allocation_id, second.allocation_id)


async def test_domain_cleanup_keeps_the_daemons_event_log(node: Node) -> None:
    node.cluster.domains[DOM1] = DomainInfo(DOM1, "cd", "default")
    await node.state.prepare(parse_claim(daemon_claim("d1", DOM1)), 0)
    domain_dir = node.settings.plugin_dir / "domains" / DOM1
    (domain_dir / "events.db").write_bytes(b"daemon history")
    (domain_dir / "events.db-wal").write_bytes(b"tail")
    del node.cluster.domains[DOM1]  # the ComputeDomain is gone
    assert await node.state.cleanup_domain_dirs() == [DOM1]
    assert not domain_dir.exists()
    history = node.settings.plugin_dir / "imex-history"
    assert (history / f"{DOM1}.db").read_bytes() == b"daemon history"
    assert (history / f"{DOM1}.db-wal").read_bytes() == b"tail"
