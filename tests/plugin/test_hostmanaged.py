"""The kubelet plugin's prepare path under HostManagedIMEX (the design's plugin unit test plan).

Published devices: channel-0 only. Channel prepare: no node label, no readiness wait, channel 0 through CDI
and no /imexd mount; the explicit allowlist (allocationMode unset or Single; All and unknown values refused
by name, before generic validation); an empty clique refused permanently (not skipped); daemon claims refused
permanently; the channel-0 conflict check unchanged. Unprepare: CDI spec and checkpoint entry go, node labels
stay. A fault at every prepare step leaves no CDI spec and records why in the claim's stream.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cdctl.api.refs import DomainInfo
from cdctl.domain import claims as c
from cdctl.domain.errors import CdctlError, PermanentError, RetriableError
from cdctl.domain.events import decode
from cdctl.plugin import cdi
from cdctl.plugin.checkpoint import ClaimBook
from cdctl.plugin.devices import ClaimRef, parse_claim
from cdctl.plugin.pluginconfig import published_devices
from cdctl.plugin.prepare import DeviceState
from cdctl.plugin.preparesettings import FabricStatus
from tests.plugin.conftest import CLIQUE, Node
from tests.plugin.fakes import DOM1, DOM_GONE, channel_claim, claim_obj, daemon_claim, opaque, result


@pytest.fixture
async def host(node: Node) -> DeviceState:
    """The node's device state with HostManagedIMEX on (no daemon is ever Ready in the fake cluster)."""
    settings = dataclasses.replace(node.settings, host_managed=True)
    node.settings = settings
    node.state = DeviceState(settings, await ClaimBook.load(node.store, "node-a"), node.cluster, node.fabric)
    return node.state


async def failures(node: Node, uid: str) -> list[c.ClaimPrepareFailed]:
    return [
        e
        for e in map(decode, await node.store.read_stream(f"claim/{uid}"))
        if isinstance(e, c.ClaimPrepareFailed)
    ]


def test_only_channel_zero_is_published() -> None:
    assert [(d.name, d.type, d.id) for d in published_devices(FabricStatus(CLIQUE), host_managed=True)] == [
        ("channel-0", "channel", 0)
    ]
    assert [d.name for d in published_devices(FabricStatus(CLIQUE), host_managed=False)] == [
        "channel-0",
        "daemon-0",
    ]


@pytest.mark.parametrize("mode", [None, "", "Single"])
async def test_channel_prepare_injects_channel_zero_without_label_or_readiness(
    node: Node, host: DeviceState, mode: str | None
) -> None:
    devices = await host.prepare(parse_claim(channel_claim("c1", DOM1, mode=mode)), 0)
    assert devices[0]["cdi_device_ids"] == ["k8s.compute-domain.nvidia.com/claim=c1-channel-0"]
    assert node.cluster.labels == {}  # no AddNodeLabel
    assert node.cluster.ready == set()  # prepared although no daemon is (or will be) Ready
    spec = cdi.read_spec(cdi.claim_spec_path(node.settings.cdi_root, "c1"))
    assert spec is not None
    (device,) = spec["devices"]
    edits = device["containerEdits"]
    assert [n["path"] for n in edits["deviceNodes"]] == ["/dev/nvidia-caps-imex-channels/channel0"]
    assert "mounts" not in edits or not any(m["containerPath"] == "/imexd" for m in edits["mounts"])
    assert not (node.settings.plugin_dir / "domains").exists()
    types = [e.type for e in await node.store.read_stream("claim/c1")]
    assert types == ["ClaimPrepareStarted", "ChannelAllocated", "CdiSpecWritten", "ClaimPrepareCompleted"]


@pytest.mark.parametrize("mode", ["All", "foo", "single"])
async def test_allowlist_refuses_every_other_allocation_mode_by_name(
    node: Node, host: DeviceState, mode: str
) -> None:
    with pytest.raises(PermanentError, match=f"allocationMode {mode} is not supported with HostManagedIMEX"):
        await host.prepare(parse_claim(channel_claim("c1", DOM1, mode=mode)), 0)
    (failed,) = await failures(node, "c1")
    assert not failed.retriable and f"allocationMode {mode} " in failed.reason
    assert not cdi.claim_spec_path(node.settings.cdi_root, "c1").exists()
    assert host.book.get("c1").channels == ()  # type: ignore[union-attr]


async def test_empty_clique_is_a_permanent_error_not_a_silent_skip(node: Node, host: DeviceState) -> None:
    node.fabric.clique_id = ""
    with pytest.raises(PermanentError, match="requires an NVLink clique on this node; NVML reports none"):
        await host.prepare(parse_claim(channel_claim("c1", DOM1)), 0)
    (failed,) = await failures(node, "c1")
    assert not failed.retriable and "NVLink clique" in failed.reason
    assert not cdi.claim_spec_path(node.settings.cdi_root, "c1").exists()


async def test_driver_managed_mode_still_skips_silently_without_a_clique(node: Node) -> None:
    node.fabric.clique_id = ""
    node.cluster.ready.add((DOM1, "node-a"))
    devices = await node.state.prepare(parse_claim(channel_claim("c1", DOM1)), 0)
    assert devices[0]["cdi_device_ids"] == []  # the gate-off path is unchanged


async def test_daemon_claims_are_refused_permanently(node: Node, host: DeviceState) -> None:
    with pytest.raises(PermanentError, match="daemon claims are disabled under HostManagedIMEX"):
        await host.prepare(parse_claim(daemon_claim("d1", DOM1, namespace="default")), 0)
    (failed,) = await failures(node, "d1")
    assert not failed.retriable
    assert not (node.settings.plugin_dir / "domains").exists()  # no /imexd directory made


async def test_second_channel_claim_on_the_node_hits_the_checkpoint_conflict(
    node: Node, host: DeviceState
) -> None:
    await host.prepare(parse_claim(channel_claim("c1", DOM1)), 0)
    with pytest.raises(RetriableError, match="device channel-0 is already allocated to different claim c1"):
        await host.prepare(parse_claim(channel_claim("c2", DOM1, name="rc2")), 0)
    # A device name this node never published (a stale slice) is refused before any channel is looked at.
    with pytest.raises(PermanentError, match="requested device is not allocatable: channel-1"):
        await host.prepare(parse_claim(channel_claim("c3", DOM1, name="rc3", device="channel-1")), 0)
    assert not cdi.claim_spec_path(node.settings.cdi_root, "c2").exists()
    (failed,) = await failures(node, "c2")
    assert failed.retriable and "already allocated" in failed.reason
    (refused,) = await failures(node, "c3")
    assert not refused.retriable and not cdi.claim_spec_path(node.settings.cdi_root, "c3").exists()
    assert await host.unprepare(ClaimRef("c1", "default", "rc"))
    assert await host.prepare(parse_claim(channel_claim("c2", DOM1, name="rc2")), host.book.version("c2"))


async def test_unprepare_keeps_node_labels_and_removes_cdi_and_checkpoint(
    node: Node, host: DeviceState
) -> None:
    await host.prepare(parse_claim(channel_claim("c1", DOM1)), 0)
    node.cluster.labels["node-a"] = DOM1  # left by an earlier driver-managed install
    assert await host.unprepare(ClaimRef("c1", "default", "rc"))
    assert node.cluster.labels == {"node-a": DOM1}  # no RemoveNodeLabel
    assert not cdi.claim_spec_path(node.settings.cdi_root, "c1").exists()
    rec = host.book.get("c1")
    assert rec is not None and rec.state is c.ClaimState.UNPREPARED and rec.channels == ()
    assert [e.type for e in await node.store.read_stream("claim/c1")][-2:] == [
        "ChannelReleased",
        "ClaimUnprepared",
    ]


def _bad_config(_: Node) -> dict[str, Any]:
    return claim_obj(
        "c1",
        results=[result("channel", "channel-0")],
        configs=[opaque("ComputeDomainChannelConfig", DOM1, ["channel"], unknownField=1)],
    )


def _two_results(_: Node) -> dict[str, Any]:
    return claim_obj(
        "c1",
        results=[result("channel", "channel-0"), result("channel", "channel-0")],
        configs=[opaque("ComputeDomainChannelConfig", DOM1, ["channel"])],
    )


def _missing_domain(_: Node) -> dict[str, Any]:
    return channel_claim("c1", DOM_GONE)


def _other_namespace(node: Node) -> dict[str, Any]:
    node.cluster.domains[DOM1] = DomainInfo(DOM1, "cd", "elsewhere")
    return channel_claim("c1", DOM1)


def _no_clique(node: Node) -> dict[str, Any]:
    node.fabric.clique_id = ""
    return channel_claim("c1", DOM1)


def _no_channel_major(node: Node) -> dict[str, Any]:
    Path(node.settings.proc_devices).write_text("Character devices:\n195 nvidia\n\nBlock devices:\n")
    return channel_claim("c1", DOM1)


# One fault per step of the design's host-managed channel prepare (its section 7.2), in order; the checkpoint
# conflict step is covered by test_second_channel_claim_on_the_node_hits_the_checkpoint_conflict.
FAULTS: dict[str, tuple[Callable[[Node], dict[str, Any]], type[CdctlError], str]] = {
    "decode opaque config": (_bad_config, PermanentError, "unknown field"),
    "exactly one result": (_two_results, PermanentError, "unexpected results: 2"),
    "allowlist": (lambda _: channel_claim("c1", DOM1, mode="All"), PermanentError, "allocationMode All"),
    "domain exists": (
        _missing_domain,
        RetriableError,
        f"ComputeDomain not found: {DOM_GONE}",
    ),
    "same namespace": (_other_namespace, PermanentError, "different than the ComputeDomain's namespace"),
    "clique present": (_no_clique, PermanentError, "requires an NVLink clique"),
    "CDI edits for channel 0": (_no_channel_major, CdctlError, "nvidia-caps-imex-channels"),
}


@pytest.mark.parametrize("step", list(FAULTS))
async def test_a_fault_at_each_prepare_step_writes_nothing_and_is_recorded(
    node: Node, host: DeviceState, step: str
) -> None:
    build, error, message = FAULTS[step]
    with pytest.raises(error, match=message):
        await host.prepare(parse_claim(build(node)), 0)
    assert not cdi.claim_spec_path(node.settings.cdi_root, "c1").exists()
    rec = host.book.get("c1")
    assert rec is not None and not rec.completed
    (failed,) = await failures(node, "c1")
    assert message in failed.reason and failed.retriable == (error is RetriableError)
    assert node.cluster.labels == {}
