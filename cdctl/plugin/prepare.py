"""Prepare and Unprepare of compute-domain claims on this node: every step and check of the Go plugin.

Called by cdctl.plugin.driver for each claim of a NodePrepareResources / NodeUnprepareResources call (one
attempt each; the driver retries retriable errors within the kubelet's budget) and by the stale-claim sweep.
Attempts on one claim never interleave, but claims run side by side: no lock is held across an API request but
the per-domain one around the node-label decision, and the device check is made again, atomically, when a
claim completes (cdctl.plugin.locks). Events go to the claim stream before the world changes (node label, CDI
file) and the outcome after: PrepareStarted, ChannelAllocated, CdiSpecWritten + PrepareCompleted, or
PrepareFailed; Unprepare appends ChannelReleased + Unprepared and removes the node's label only when no other
claim of the domain on this node holds it (cdctl.domain.claims.holds_node_label). A prepare attempt that began
before the claim was last unprepared or invalidated is fenced (Go issue 1162). Under HostManagedIMEX
(`host_managed`) a channel claim is prepared without a node label or a daemon readiness wait (only, where
the plugin is given the host's IMEX config, until `nvidia-imex-ctl -q` answers READY: cdctl.plugin.hostimex),
`check_host_managed_config` refuses any allocationMode but unset/Single and every daemon claim, a node without
a clique is refused, and unprepare leaves node labels alone; each refusal is a permanent ClaimPrepareFailed in
the claim's stream. A daemon claim is prepared only for the controller's daemon pod of an existing domain on
this node (cdctl.plugin.daemonclaims), checked before its domain directory is built. A repeated Prepare of a
completed claim repairs a missing or changed CDI spec or domain directory before it answers
(cdctl.plugin.repair).

Under channel isolation (`isolation`, docs/channel-isolation.md) a channel claim names one of the node's
shared channel devices and is prepared with its domain's channel in this node's clique, read from the
clique object (cdctl.plugin.channels): allocationMode All is refused (permanent), a channel not assigned yet
is waited for (retriable), a channel still held on this node by a completed claim of another domain is
fenced (retriable), and under driver-managed IMEX the node's shared IMEX daemon must be Ready. No node label
is written or removed in that mode.

Under driver-managed IMEX a channel is handed out only through the daemon's handover gate (cdctl.api.imexgate,
docs/channel-isolation.md "Readiness"): after every other check the claim writes a hold in the daemon's
directory (the domain's, or the shared daemon's) and then reads the gate. A closed gate (IMEX restarting,
not ready yet, or its daemon gone) is a retriable DaemonNotReady woken when the gate opens; the hold is
released then, on a failed attempt and on Unprepare, and otherwise keeps a planned IMEX restart back until the
workload has had time to start.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from cdctl.api.configs import ChannelConfig, DaemonConfig
from cdctl.api.refs import DomainInfo
from cdctl.api.shareddaemon import SHARED_DIR
from cdctl.api.verbosity import V_DECISION
from cdctl.domain import claims as c
from cdctl.domain.errors import CdctlError, PermanentError, RetriableError
from cdctl.domain.events import DomainEvent
from cdctl.plugin import cdi
from cdctl.plugin import channels as ch
from cdctl.plugin.checkpoint import ClaimBook
from cdctl.plugin.daemonclaims import DOMAINS_DIR, authorize_daemon_claim, domain_dir
from cdctl.plugin.devices import (
    CHANNEL,
    DAEMON,
    MAX_CHANNELS,
    AllocatedClaim,
    AllocationResult,
    ClaimRef,
    OpaqueConfig,
    assert_imex_channel_not_allocated,
    claim_object_name,
    device_type,
    get_config_results_map,
    get_opaque_device_configs,
    requested_non_admin_devices,
    validate_no_overlapping_prepared_devices,
)
from cdctl.plugin.edits import DeviceFacts, channel_device, daemon_device, write_domain_dir
from cdctl.plugin.handover import GateFiles
from cdctl.plugin.locks import DeviceHolds, KeyedLocks
from cdctl.plugin.ports import ClusterPort, HandoverPort, HostImexPort
from cdctl.plugin.preparesettings import (
    NOT_READY_DELAY,
    ChannelNotAssigned,
    DaemonNotReady,
    FabricStatus,
    PrepareFenced,
    PrepareSettings,
    check_host_managed_config,
)
from cdctl.plugin.repair import RepairContext, repair_completed

log = structlog.get_logger("cdctl.plugin.prepare")

# What the stale sweep looks at: claims that may hold something on the node for a ResourceClaim now gone.
SWEPT_STATES = frozenset(
    {c.ClaimState.PREPARE_STARTED, c.ClaimState.PREPARE_FAILED, c.ClaimState.INVALIDATED}
)
NO_CLIQUE_UNDER_HOST_MANAGED = "host-managed IMEX requires an NVLink clique on this node; NVML reports none"


@dataclass
class _Prepared:
    devices: list[dict[str, Any]] = field(default_factory=list)
    cdi_devices: list[cdi.ClaimDevice] = field(default_factory=list)
    channel: bool = False  # a channel config was applied: the claim holds IMEX channel 0
    imex_channel: int | None = None  # channel isolation: the domain's channel the claim holds
    domain_uid: str = ""
    gates: list[Path] = field(default_factory=list)  # the IMEX daemon directories whose gate must be open


def _device_entry(result: AllocationResult, ids: list[str]) -> dict[str, Any]:
    return {
        "request_names": [result.request.split("/", 1)[0]],
        "pool_name": result.pool,
        "device_name": result.device,
        "cdi_device_ids": ids,
    }


class DeviceState:
    """Prepares and unprepares claims against the claim book (event log), CDI root and cluster port."""

    def __init__(
        self,
        settings: PrepareSettings,
        book: ClaimBook,
        cluster: ClusterPort,
        fabric: FabricStatus,
        gates: HandoverPort | None = None,
        host_imex: HostImexPort | None = None,
    ) -> None:
        self.settings = settings
        self.gates: HandoverPort = gates if gates is not None else GateFiles(settings.handover_hold_s)
        self.host_imex = host_imex  # HostManagedIMEX: the host's IMEX must answer READY (None: not asked)
        self.book = book
        self.cluster = cluster
        self.fabric = fabric
        self.claim_locks = KeyedLocks()  # by claim uid: one attempt on a claim at a time
        self.label_locks = KeyedLocks()  # by domain uid: one node-label decision of a domain at a time
        self.holds = DeviceHolds()  # devices of claims whose completion is being written
        self.facts = DeviceFacts(settings.proc_devices, settings.fabric_imex_mgmt_cap)
        # PrepareStarted waits here until the attempt's first write, so it commits with it (one fsync less).
        self._pending: dict[str, list[DomainEvent]] = {}

    # ---------------------------------------------------------------- prepare

    async def prepare(self, claim: AllocatedClaim, fence_version: int) -> list[dict[str, Any]]:
        """One attempt; the kubelet Device entries on success. Raises RetriableError or PermanentError."""
        uid = claim.ref.uid
        async with self.claim_locks.hold(uid):
            try:
                return await self._prepare(claim, fence_version)
            except BaseException as exc:
                self._release_handover(uid)  # nothing was handed out: keep no IMEX restart back
                if isinstance(exc, CdctlError) and not isinstance(exc, PrepareFenced):
                    await self._record_failure(uid, str(exc), isinstance(exc, RetriableError))
                raise
            finally:
                self._pending.pop(uid, None)
                self.holds.release(uid)

    async def _append(self, uid: str, events: list[DomainEvent]) -> None:
        """Append the attempt's pending events and `events` in one durable batch."""
        await self.book.append(uid, [*self._pending.pop(uid, []), *events])

    async def _prepare(self, claim: AllocatedClaim, fence_version: int) -> list[dict[str, Any]]:
        uid = claim.ref.uid
        rec = self.book.get(uid)
        reason = ""
        if rec is not None and rec.ended_version > fence_version:
            reason = f"claim {claim.ref} was unprepared after this prepare began; refusing a stale prepare"
        elif rec is not None and rec.is_older_allocation(claim.allocation_id):
            reason = (
                f"claim {claim.ref}: prepare for allocation {claim.allocation_id}, "
                f"superseded here by {rec.allocation}; refusing a stale prepare"
            )
        if reason:
            log.info("prepare decision: fenced", claim=str(claim.ref), reason=reason, v=V_DECISION)
            await self.book.append(uid, [c.ClaimPrepareFenced(uid, claim.allocation_id, reason)])
            raise PrepareFenced(reason)
        if rec is not None and rec.completed:
            if rec.allocation == claim.allocation_id:
                log.info("prepare decision: already prepared, answering from the event log",
                         claim=str(claim.ref), v=V_DECISION)  # fmt: skip
                await self._repair(claim, rec)
                return [dict(d) for d in rec.devices]
            log.info("prepare decision: wait, prepared for another allocation", claim=str(claim.ref),
                     v=V_DECISION)  # fmt: skip
            raise RetriableError(
                f"claim {claim.ref} is prepared for another allocation; waiting for its unprepare"
            )
        log.info("prepare decision: prepare", claim=str(claim.ref), allocation=claim.allocation_id,
                 resumed=rec is not None, v=V_DECISION)  # fmt: skip
        await self._start(claim, rec)
        s = self.settings
        validate_no_overlapping_prepared_devices(claim, self.book.records(), shared=s.shared_devices)
        obj = claim_object_name(claim.ref.namespace, claim.ref.name)
        configs = get_opaque_device_configs(claim.configs, strict=True, obj=obj)
        out = _Prepared()
        for opaque, results in get_config_results_map(claim, configs, published=s.published, pool=s.node):
            if s.host_managed:
                check_host_managed_config(opaque.config, s.channel_isolation)
            opaque.config.validate("default config" if opaque.default else obj)
            if isinstance(opaque.config, ChannelConfig) and s.channel_isolation:
                await self._apply_shared_channel(claim, opaque.config, results, out)
            elif isinstance(opaque.config, ChannelConfig):
                await self._apply_channel(claim, opaque.config, results, out)
            else:
                assert isinstance(opaque.config, DaemonConfig)
                await self._apply_daemon(claim, opaque, results, out)
        # Other claims ran while this one waited on the API: check the devices again and hold them until
        # the completion is durable (no await between the check and the hold).
        if out.imex_channel is not None:
            self.holds.take_shared(
                claim, self.book.records(), shared=s.shared_devices, channel=out.imex_channel,
                domain_uid=out.domain_uid,
            )  # fmt: skip
        else:
            self.holds.take(claim, self.book.records(), channel=out.channel)
        if out.gates:
            await self._handover(uid, out.gates)
        if out.channel and s.host_managed:
            await self._host_imex_ready(uid)
        events: list[DomainEvent] = []
        ids = [i for d in out.devices for i in d["cdi_device_ids"]]
        if out.cdi_devices:
            path = cdi.claim_spec_path(self.settings.cdi_root, uid)
            spec = cdi.build_claim_spec(uid, out.cdi_devices)
            # Inline: a small file and one fsync cost less than a hop to a worker thread and back.
            cdi.write_spec(path, spec, fsync=self.settings.fsync)
            events.append(c.CdiSpecWritten(uid, str(path), ids))
        events.append(c.ClaimPrepareCompleted(uid, ids, out.devices))
        await self._append(uid, events)
        log.info("prepared claim", claim=str(claim.ref), devices=ids)
        return out.devices

    async def _handover(self, uid: str, gates: list[Path]) -> None:
        """Hold each IMEX daemon's directory for this claim, then require its gate open (the order matters:
        a daemon closes the gate before it looks for holds, cdctl.api.imexgate)."""
        for directory in gates:
            closed = self.gates.hold(directory, uid)
            if closed is not None:  # its hold is gone; holds taken before go with the failed attempt
                log.info("prepare decision: wait, IMEX not ready now", claim=uid, reason=closed, v=V_DECISION)
                raise DaemonNotReady(
                    f"IMEX on this node is not ready now ({directory.name}): {closed}",
                    functools.partial(self.gates.until_open, directory),
                )

    async def _host_imex_ready(self, uid: str) -> None:
        """HostManagedIMEX: hand out the channel only while the host's IMEX answers READY (a retriable wait
        otherwise, asked again until it does)."""
        if self.host_imex is None:
            return
        reason = await self.host_imex.not_ready()
        if reason is not None:
            log.info("prepare decision: wait, host IMEX not ready", claim=uid, reason=reason, v=V_DECISION)
            raise DaemonNotReady(
                f"the host's IMEX on this node is not ready: {reason}", self.host_imex.until_ready
            )

    def _release_handover(self, uid: str) -> None:
        """Drop the claim's holds, wherever it may have written them."""
        s = self.settings
        rec = self.book.get(uid)
        gates = [s.plugin_dir / SHARED_DIR]
        if rec is not None and rec.domain_uid:
            with contextlib.suppress(CdctlError):
                gates.append(domain_dir(s.plugin_dir, rec.domain_uid))
        for directory in gates:
            self.gates.release(directory, uid)

    async def _repair(self, claim: AllocatedClaim, rec: c.ClaimRecord) -> None:
        """Rewrite what a completed claim's first Prepare wrote if it is gone or changed (an event if so)."""
        s = self.settings
        ctx = RepairContext(
            s.plugin_dir, s.cdi_root, self.fabric.clique_id, self.facts, s.fsync,
            lambda uid: self._domain(uid, "compute domain", permanent=True), s.published,
        )  # fmt: skip
        repaired = await repair_completed(ctx, claim, rec)
        if repaired is not None:
            await self.book.append(claim.ref.uid, [repaired])

    def _peek(self, claim: AllocatedClaim) -> tuple[str, str]:
        """Best-effort (kind, domain uid) for the PrepareStarted event; the strict pass comes after."""
        try:
            configs = get_opaque_device_configs(claim.configs, strict=False)
            published = self.settings.published
            for opaque, _ in reversed(get_config_results_map(claim, configs, published=published)):
                kind = CHANNEL if isinstance(opaque.config, ChannelConfig) else DAEMON
                return kind, opaque.config.domain_id
        except CdctlError:
            pass
        for r in claim.own_results():
            typed = device_type(r.device, self.settings.published)
            if typed:
                return typed[0], ""
        return "", ""

    async def _start(self, claim: AllocatedClaim, rec: c.ClaimRecord | None) -> None:
        if (
            rec is not None
            and rec.state is c.ClaimState.PREPARE_STARTED
            and rec.allocation == claim.allocation_id
        ):
            return  # a retry of the same prepare: already started
        kind, domain = self._peek(claim)
        started = c.ClaimPrepareStarted(
            claim.ref.uid,
            claim.ref.namespace,
            claim.ref.name,
            self.settings.node,
            kind=kind,
            domain_uid=domain,
            allocation=claim.allocation_id,
            devices=requested_non_admin_devices(claim),
        )
        self._pending[claim.ref.uid] = [started]

    async def _record_failure(self, uid: str, reason: str, retriable: bool) -> None:
        rec = self.book.get(uid)
        if self._pending.get(uid):
            if (
                retriable
                and rec is not None
                and rec.state is c.ClaimState.PREPARE_FAILED
                and rec.last_error == reason
            ):
                self._pending.pop(uid)  # the same retriable failure again: nothing new to record
                return
            await self._append(uid, [c.ClaimPrepareFailed(uid, reason, retriable)])
            return
        if rec is None or rec.state is not c.ClaimState.PREPARE_STARTED:
            return
        if retriable and rec.last_error == reason:
            return  # the same retriable condition again: one event is enough
        await self.book.append(uid, [c.ClaimPrepareFailed(uid, reason, retriable)])

    async def _domain(self, domain_id: str, what: str, permanent: bool = False) -> DomainInfo:
        """The ComputeDomain with this uid. A miss is retriable for a channel claim (permanent in the Go
        driver; a domain created a moment ago may not be listed yet); a daemon claim (`permanent`) is made by
        the controller only after its domain exists, so there a miss (after a fresh listing) is final."""
        domain = await self.cluster.get_compute_domain(domain_id)
        if domain is None:
            if permanent:
                raise PermanentError(f"{what} not found: {domain_id}: daemon claims need an existing domain")
            raise RetriableError(f"{what} not found: {domain_id}", delay=NOT_READY_DELAY)
        return domain

    async def _claim_domain(self, claim: AllocatedClaim, config: ChannelConfig) -> DomainInfo:
        """The channel config's ComputeDomain, which must be in the claim's namespace (a tenant cannot name
        another namespace's domain, nor so reach its channel), on a node whose fabric is ready."""
        domain = await self._domain(config.domain_id, "ComputeDomain")
        if domain.namespace != claim.ref.namespace:
            raise PermanentError(
                "the ResourceClaim's namespace is different than the ComputeDomain's namespace"
            )
        if self.fabric.pending is not None:
            raise RetriableError(f"NVLink fabric not ready on this node: {self.fabric.pending}", delay=2.0)
        return domain

    async def _apply_channel(
        self, claim: AllocatedClaim, config: ChannelConfig, results: list[AllocationResult], out: _Prepared
    ) -> None:
        s = self.settings
        if len(results) != 1:
            raise PermanentError(f"applyComputeDomainChannelConfig: unexpected results: {len(results)}")
        count = MAX_CHANNELS if config.all_channels else 1
        uid = claim.ref.uid
        assert_imex_channel_not_allocated(self.book.records(), 0, uid)
        domain = await self._claim_domain(claim, config)
        clique = self.fabric.clique_id
        if s.host_managed and not clique:
            raise PermanentError(NO_CLIQUE_UNDER_HOST_MANAGED)
        rec = self.book.get(uid)
        if rec is None or len(rec.channels) < count:
            await self._append(uid, [c.ChannelAllocated(uid, s.node, 0, domain.uid, count)])
        if not s.host_managed:
            await self._label(uid, domain.uid)
            if not await self.cluster.daemon_ready(domain, s.node, clique):
                raise DaemonNotReady(
                    "current node not ready in ComputeDomain",
                    lambda: self.cluster.until_ready(domain, s.node, clique),
                    watched=self.cluster.readiness_watched(clique),
                )
            if clique:  # a node outside any fabric runs no IMEX: nothing to wait for (as the Go driver)
                out.gates.append(domain_dir(s.plugin_dir, domain.uid))
        result = results[0]
        device, ids = channel_device(uid, result.device, range(count), clique, self.facts)
        if device is not None:
            out.cdi_devices.append(device)
        out.devices.append(_device_entry(result, ids))
        out.channel = True

    async def _apply_shared_channel(
        self, claim: AllocatedClaim, config: ChannelConfig, results: list[AllocationResult], out: _Prepared
    ) -> None:
        """Channel isolation: the domain's channel in this node's clique, fenced against other domains'
        claims on this node, and (driver-managed) the node's shared IMEX daemon Ready."""
        s = self.settings
        if len(results) != 1:
            raise PermanentError(f"applyComputeDomainChannelConfig: unexpected results: {len(results)}")
        ch.check_channel_config(config.all_channels)
        uid = claim.ref.uid
        domain = await self._claim_domain(claim, config)
        clique = self.fabric.clique_id
        if not clique:
            raise PermanentError(ch.NO_CLIQUE)
        channel = await self.cluster.clique_channel(domain, clique)
        if channel is None:
            raise ChannelNotAssigned(
                ch.waiting_for_channel(domain.namespace, domain.name, clique),
                lambda: self.cluster.until_channel(domain, clique),
                watched=self.cluster.readiness_watched(clique),
            )
        ch.fence(self.book.records(), channel, domain.uid, uid)
        rec = self.book.get(uid)
        held = rec.channels if rec is not None else ()
        events: list[DomainEvent] = []
        if held and held != (channel,):  # the clique's number changed between attempts
            events.append(c.ChannelReleased(uid, s.node, held[0], len(held)))
        if held != (channel,):
            events.append(c.ChannelAllocated(uid, s.node, channel, domain.uid, 1))
        if events:
            await self._append(uid, events)
        if not s.host_managed and not await self.cluster.shared_daemon_ready(s.node):
            raise DaemonNotReady(
                f"the shared IMEX daemon on this node is not ready (clique {clique})",
                lambda: self.cluster.until_shared_daemon_ready(s.node),
                watched=self.cluster.shared_daemon_watched(),
            )
        if not s.host_managed:
            out.gates.append(s.plugin_dir / SHARED_DIR)
        result = results[0]
        device, ids = channel_device(uid, result.device, (channel,), clique, self.facts)
        if device is not None:
            out.cdi_devices.append(device)
        out.devices.append(_device_entry(result, ids))
        out.channel = True
        out.imex_channel = channel
        out.domain_uid = domain.uid

    async def _label(self, uid: str, domain_uid: str) -> None:
        """Label the node for the domain, the claim already recorded as one that holds the label: an
        Unprepare of the domain's last other claim then either removed the label before (and this adds it
        again) or counts this claim and keeps it."""
        rec = self.book.get(uid)
        if (rec is None or not c.holds_node_label(rec, domain_uid)) and self._pending.get(uid):
            await self._append(uid, [])
        async with self.label_locks.hold(domain_uid):
            await self.cluster.add_node_label(self.settings.node, domain_uid)

    async def _apply_daemon(
        self, claim: AllocatedClaim, opaque: OpaqueConfig, results: list[AllocationResult], out: _Prepared
    ) -> None:
        s = self.settings
        if len(results) != 1:
            raise PermanentError(
                f"only expected 1 device for requests '{list(opaque.requests)}' in claim '{claim.ref.uid}'"
            )
        if self.fabric.pending is not None:
            raise RetriableError(f"NVLink fabric not ready on this node: {self.fabric.pending}", delay=2.0)
        domain = await self._domain(opaque.config.domain_id, "compute domain", permanent=True)
        await authorize_daemon_claim(
            claim, domain, namespaces=s.daemon_namespaces, node=s.node, cluster=self.cluster
        )
        root = domain_dir(s.plugin_dir, domain.uid)  # only from a validated uid, after the checks
        await asyncio.to_thread(write_domain_dir, root)
        result = results[0]
        device, ids = daemon_device(
            claim.ref.uid, result.device, domain, root, self.fabric.clique_id, self.facts
        )
        out.cdi_devices.append(device)
        out.devices.append(_device_entry(result, ids))

    # -------------------------------------------------------------- unprepare

    async def unprepare(self, ref: ClaimRef, reason: str = "kubelet", expected_version: int = 0) -> bool:
        """Undo a prepare; a claim this node never prepared (or already unprepared) is a no-op (False), and
        so is one whose stream moved past `expected_version` when that is given (the sweep decided on an
        older record). The node's label goes only when no other claim of the domain holds it
        (cdctl.domain.claims.holds_node_label): counted, removed and the claim marked Unprepared under the
        domain's label lock, so two Unprepares of a domain's last claims cannot each count the other."""
        async with self.claim_locks.hold(ref.uid):
            rec = self.book.get(ref.uid)
            if rec is None:
                # Nothing recorded yet, but a Prepare of the claim may be in flight (reading the claim): a
                # tombstone fences it, as an Unprepare after its start does (Go issue 1162 by another road).
                await self.book.append(ref.uid, [c.ClaimUnprepared(ref.uid, f"{reason}: before any prepare")])
                log.info("unprepare decision: never prepared here; recorded, to fence a prepare in flight",
                         claim=str(ref), v=V_DECISION)  # fmt: skip
                return False
            if rec.state in (None, c.ClaimState.UNPREPARED):
                log.info("unprepare decision: noop, claim not found in checkpoint data", claim=str(ref),
                         v=V_DECISION)  # fmt: skip
                return False
            if expected_version and rec.version != expected_version:
                log.info("claim changed since the sweep looked; left alone", claim=str(ref))
                return False
            s = self.settings
            if rec.kind != CHANNEL or not rec.domain_uid or s.host_managed or s.channel_isolation:
                await self._unprepared(ref, rec, reason)
                return True
            async with self.label_locks.hold(rec.domain_uid):
                holders = c.label_holders(self.book.records(), rec.domain_uid, besides=ref.uid)
                if holders:
                    log.info("node label kept: other claims of the domain hold it", claim=str(ref),
                             domain=rec.domain_uid, holders=holders)  # fmt: skip
                else:
                    await self.cluster.remove_node_label(self.settings.node, rec.domain_uid)
                await self._unprepared(ref, rec, reason)
            return True

    async def _unprepared(self, ref: ClaimRef, rec: c.ClaimRecord, reason: str) -> None:
        """Remove the claim's CDI spec and its IMEX holds, then record its channels released and the claim
        Unprepared."""
        s = self.settings
        cdi.remove_spec(cdi.claim_spec_path(s.cdi_root, ref.uid))
        self._release_handover(ref.uid)
        events: list[DomainEvent] = []
        if rec.channels:
            events.append(c.ChannelReleased(ref.uid, s.node, rec.channels[0], len(rec.channels)))
        events.append(c.ClaimUnprepared(ref.uid, reason))
        await self.book.append(ref.uid, events)
        log.info("unprepared claim", claim=str(ref), reason=reason)

    # ------------------------------------------------------------ background

    async def sweep_stale(self) -> list[str]:
        """Unprepare partially prepared claims, and claims invalidated by a reboot, whose ResourceClaim is
        gone or replaced; their UIDs. An invalidated claim keeps its domain's node label until it is
        unprepared (cdctl.domain.claims.holds_node_label): this is how one whose pod the kubelet will never
        unprepare lets go of it. A claim that changed while its ResourceClaim was read is left alone."""
        swept: list[str] = []
        for rec in list(self.book.records()):
            if rec.state not in SWEPT_STATES or not rec.name:
                continue
            try:
                obj = await self.cluster.get_claim(rec.namespace, rec.name)
            except CdctlError as exc:
                log.info(
                    "Checkpointed RC cleanup: lookup failed, next round", claim=rec.claim_uid, error=str(exc)
                )
                continue
            current_uid = ((obj or {}).get("metadata") or {}).get("uid")
            ref = ClaimRef(rec.claim_uid, rec.namespace, rec.name)
            if obj is None or current_uid != rec.claim_uid:
                if await self.unprepare(ref, reason="stale", expected_version=rec.version):
                    log.info("Checkpointed RC cleanup: unprepared stale claim", claim=str(ref))
                    swept.append(rec.claim_uid)
            else:
                log.info("partially prepared claim not stale", claim=str(ref))
        return swept

    def remove_orphan_specs(self) -> list[Path]:
        """Claim CDI specs on disk whose claim is not active in the log (e.g. after a crash): removed."""
        prefix = f"{cdi.VENDOR}-{cdi.CLAIM_CLASS}_"
        removed: list[Path] = []
        root = self.settings.cdi_root
        if not root.is_dir():
            return removed
        for path in root.glob(f"{prefix}*.yaml"):
            uid = path.name[len(prefix) : -len(".yaml")]
            rec = self.book.get(uid)
            if rec is None or not rec.active:
                cdi.remove_spec(path)
                removed.append(path)
        return removed

    async def cleanup_domain_dirs(self) -> list[str]:
        """Remove `domains/<uid>` directories of ComputeDomains that are gone (never touches labels).

        The IMEX daemon's event log in that directory (its default, /imexd/events.db) is kept, moved to
        `imex-history/<uid>.db` beside it: why IMEX restarted on this node must outlive the domain.
        """
        base = self.settings.plugin_dir / DOMAINS_DIR
        removed: list[str] = []
        if not base.is_dir():
            return removed
        for entry in base.iterdir():
            if entry.is_dir() and await self.cluster.get_compute_domain(entry.name) is None:
                await asyncio.to_thread(_keep_daemon_log, entry, self.settings.plugin_dir / IMEX_HISTORY)
                await asyncio.to_thread(shutil.rmtree, entry, True)
                removed.append(entry.name)
        return removed


IMEX_HISTORY = "imex-history"
DAEMON_LOG = "events.db"


def _keep_daemon_log(domain_dir: Path, history: Path) -> None:
    """Move a domain's daemon event log (with its WAL files) to `history/<domain uid>.db`."""
    log = domain_dir / DAEMON_LOG
    if not log.is_file():
        return
    history.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        source = domain_dir / f"{DAEMON_LOG}{suffix}"
        if source.exists():
            source.replace(history / f"{domain_dir.name}.db{suffix}")
