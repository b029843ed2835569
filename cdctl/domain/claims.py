"""The kubelet plugin's claim checkpoint as events, and the pure claim state machine.

Every transition of a prepared claim is an event in stream `claim/<uid>` of the node's event log; the
projections (claim_lifecycle, channel_allocations, checkpoint_transitions) and the plugin's restart path fold
them. States: PrepareStarted -> PrepareCompleted -> Unprepared, plus PrepareFailed and Invalidated (the node
rebooted). A Prepare for an allocation that was already unprepared is fenced (ClaimPrepareFenced). A repeated
Prepare of a completed claim that finds its CDI spec or domain directory missing or changed rewrites them and
records ClaimPrepareRepaired (the state stays PrepareCompleted).

Which claims keep a domain's node label on their node is decided here too (`holds_node_label`): the plugin
removes the label only when none of them is left.

`ClaimRecord` is the pure fold of one claim stream that the plugin keeps in memory (its checkpoint), rebuilt
from the log on restart. Stream `plugin/<node>` carries `PluginStarted` (the boot id that invalidation uses).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from cdctl.domain.errors import InvalidInput
from cdctl.domain.events import DomainEvent, JSONDict, event_type, upcaster


class ClaimState(StrEnum):
    PREPARE_STARTED = "PrepareStarted"
    PREPARE_COMPLETED = "PrepareCompleted"
    PREPARE_FAILED = "PrepareFailed"
    UNPREPARED = "Unprepared"
    INVALIDATED = "Invalidated"


def claim_stream(claim_uid: str) -> str:
    return f"claim/{claim_uid}"


def plugin_stream(node: str) -> str:
    return f"plugin/{node}"


CLAIM_STREAM_PREFIX = "claim/"


@event_type("ClaimPrepareStarted", version=2)
@dataclass(frozen=True, slots=True)
class ClaimPrepareStarted(DomainEvent):
    """The plugin began preparing a claim for an allocation (identified by `allocation`)."""

    claim_uid: str
    namespace: str
    name: str
    node: str
    kind: str = "channel"  # "channel" or "daemon"
    domain_uid: str = ""
    allocation: str = ""
    devices: list[str] = field(default_factory=list)


@upcaster("ClaimPrepareStarted", 1)
def _prepare_started_v1_to_v2(data: JSONDict) -> JSONDict:
    # v1 recorded the claim as one "namespace/name" string and knew only channel claims.
    namespace, _, name = str(data.pop("claim", "")).partition("/")
    data.setdefault("namespace", namespace)
    data.setdefault("name", name)
    data.setdefault("kind", "channel")
    data.setdefault("domain_uid", "")
    data.setdefault("allocation", "")
    data.setdefault("devices", [])
    return data


@event_type("ChannelAllocated")
@dataclass(frozen=True, slots=True)
class ChannelAllocated(DomainEvent):
    """Channels [channel, channel + count) of this node go to the claim (2048 for allocationMode All)."""

    claim_uid: str
    node: str
    channel: int
    domain_uid: str = ""
    count: int = 1


@event_type("ChannelReleased")
@dataclass(frozen=True, slots=True)
class ChannelReleased(DomainEvent):
    claim_uid: str
    node: str
    channel: int
    count: int = 1


@event_type("CdiSpecWritten")
@dataclass(frozen=True, slots=True)
class CdiSpecWritten(DomainEvent):
    claim_uid: str
    path: str
    device_ids: list[str] = field(default_factory=list)


@event_type("ClaimPrepareCompleted")
@dataclass(frozen=True, slots=True)
class ClaimPrepareCompleted(DomainEvent):
    """Prepared; `devices` are the kubelet Device entries returned (request_names, pool_name, device_name,
    cdi_device_ids), so a repeated Prepare answers from the log."""

    claim_uid: str
    device_ids: list[str] = field(default_factory=list)
    devices: list[JSONDict] = field(default_factory=list)


@event_type("ClaimPrepareFailed")
@dataclass(frozen=True, slots=True)
class ClaimPrepareFailed(DomainEvent):
    claim_uid: str
    reason: str
    retriable: bool = False


@event_type("ClaimUnprepared")
@dataclass(frozen=True, slots=True)
class ClaimUnprepared(DomainEvent):
    """Unprepared: `reason` is "kubelet" (NodeUnprepareResources) or "stale" (the plugin's own sweep)."""

    claim_uid: str
    reason: str = ""


@event_type("ClaimInvalidated")
@dataclass(frozen=True, slots=True)
class ClaimInvalidated(DomainEvent):
    """A prepared claim no longer holds: the node's boot id changed since it was prepared."""

    claim_uid: str
    reason: str


@event_type("ClaimPrepareFenced")
@dataclass(frozen=True, slots=True)
class ClaimPrepareFenced(DomainEvent):
    """A Prepare refused because it was for an allocation already unprepared (stale-prepare race)."""

    claim_uid: str
    allocation: str
    reason: str


@event_type("ClaimPrepareRepaired", version=1)
@dataclass(frozen=True, slots=True)
class ClaimPrepareRepaired(DomainEvent):
    """A Prepare of a completed claim found what it had written gone or changed and wrote it again.

    `repaired` names each thing rewritten: "cdi-spec" (the claim's CDI spec at `cdi_path`) and/or
    "domain-dir" (a daemon's domain directory and its IMEX config template at `domain_dir`); `reason` says
    what was found (e.g. "CDI spec missing")."""

    claim_uid: str
    repaired: list[str] = field(default_factory=list)
    reason: str = ""
    cdi_path: str = ""
    domain_dir: str = ""


# Which state each event moves a claim to; events absent here do not change the state.
TARGET_STATE: dict[str, ClaimState] = {
    ClaimPrepareStarted.TYPE: ClaimState.PREPARE_STARTED,
    ClaimPrepareCompleted.TYPE: ClaimState.PREPARE_COMPLETED,
    ClaimPrepareFailed.TYPE: ClaimState.PREPARE_FAILED,
    ClaimUnprepared.TYPE: ClaimState.UNPREPARED,
    ClaimInvalidated.TYPE: ClaimState.INVALIDATED,
}

_ALLOWED: dict[ClaimState | None, frozenset[ClaimState]] = {
    None: frozenset({ClaimState.PREPARE_STARTED, ClaimState.UNPREPARED}),
    ClaimState.PREPARE_STARTED: frozenset(
        {
            ClaimState.PREPARE_STARTED,
            ClaimState.PREPARE_COMPLETED,
            ClaimState.PREPARE_FAILED,
            ClaimState.UNPREPARED,
            ClaimState.INVALIDATED,
        }
    ),
    ClaimState.PREPARE_COMPLETED: frozenset(
        {ClaimState.PREPARE_COMPLETED, ClaimState.UNPREPARED, ClaimState.INVALIDATED}
    ),
    ClaimState.PREPARE_FAILED: frozenset(
        {ClaimState.PREPARE_STARTED, ClaimState.UNPREPARED, ClaimState.INVALIDATED}
    ),
    ClaimState.UNPREPARED: frozenset({ClaimState.PREPARE_STARTED, ClaimState.UNPREPARED}),
    ClaimState.INVALIDATED: frozenset({ClaimState.PREPARE_STARTED, ClaimState.UNPREPARED}),
}


def next_state(current: ClaimState | None, event_type_name: str) -> ClaimState | None:
    """The state after an event, or None if the event does not move the state; raises on an illegal move."""
    target = TARGET_STATE.get(event_type_name)
    if target is None:
        return current
    if target not in _ALLOWED[current]:
        raise InvalidInput(
            "claim", "state", f"{event_type_name} is not allowed in state {current or 'absent'}"
        )
    return target


@event_type("PluginStarted")
@dataclass(frozen=True, slots=True)
class PluginStarted(DomainEvent):
    """The kubelet plugin started on `node`; `boot_id` decides whether prepared claims still hold."""

    node: str
    boot_id: str
    clique_id: str = ""


@event_type("FabricStateChanged")
@dataclass(frozen=True, slots=True)
class FabricStateChanged(DomainEvent):
    """The node's NVLink fabric as the plugin's NVML probe found it: not ready (`pending`: what it waits
    for) at start-up or when that changes, or ready in clique `clique_id`. A Prepare refused for it names
    the fabric; this says when it began and ended (cdctl explain: fabric-degraded)."""

    node: str
    ready: bool
    pending: str = ""
    clique_id: str = ""


@dataclass(frozen=True, slots=True)
class ClaimRecord:
    """What the node knows about one claim: the fold of its stream (the plugin's checkpoint entry)."""

    claim_uid: str
    state: ClaimState | None = None
    version: int = 0
    namespace: str = ""
    name: str = ""
    kind: str = ""
    domain_uid: str = ""
    allocation: str = ""
    requested: tuple[str, ...] = ()
    channels: tuple[int, ...] = ()
    cdi_path: str = ""
    device_ids: tuple[str, ...] = ()
    devices: tuple[JSONDict, ...] = ()
    last_error: str = ""
    last_error_retriable: bool = False
    ended_version: int = 0  # version of the last Unprepared/Invalidated: fences older in-flight prepares
    allocations: tuple[str, ...] = ()  # every allocation this claim was prepared for, oldest first

    def is_older_allocation(self, allocation: str) -> bool:
        """`allocation` was superseded here by a later one: a prepare for it is stale (Go issue 1162)."""
        return bool(allocation) and allocation in self.allocations and allocation != self.allocations[-1]

    @property
    def active(self) -> bool:
        """Prepared or being prepared: it may hold devices, a CDI spec, a node label."""
        return self.state in (
            ClaimState.PREPARE_STARTED,
            ClaimState.PREPARE_COMPLETED,
            ClaimState.PREPARE_FAILED,
        )

    @property
    def completed(self) -> bool:
        return self.state is ClaimState.PREPARE_COMPLETED


LABEL_HOLDING_STATES = frozenset(
    {
        ClaimState.PREPARE_STARTED,
        ClaimState.PREPARE_COMPLETED,
        ClaimState.PREPARE_FAILED,
        ClaimState.INVALIDATED,
    }
)


def holds_node_label(record: ClaimRecord, domain_uid: str) -> bool:
    """Whether this claim keeps the node's ComputeDomain label of `domain_uid` on its node.

    The rule: a node keeps the label of a domain while any channel claim of that domain on the node is

    * PrepareStarted: being prepared (it labels the node before it waits for the daemon);
    * PrepareCompleted: prepared, its pod runs on the daemon the label schedules;
    * PrepareFailed, retriable or not: the kubelet retries the Prepare until it unprepares the claim, and a
      claim waiting for its daemon fails (retriably) until the daemon the label schedules is Ready;
    * Invalidated: prepared before a reboot. While its pod lives, the kubelet prepares it again; once the
      pod is gone, the kubelet unprepares it, and the plugin's sweep does when its ResourceClaim is gone or
      replaced. Either way it ends Unprepared, and only then stops counting.

    An Unprepared claim holds nothing. A daemon claim never holds the label: its daemon runs because the
    label is there, so counting it would keep a domain's daemon on a node no workload of it uses.
    """
    return (
        record.kind == "channel"
        and bool(domain_uid)
        and record.domain_uid == domain_uid
        and record.state in LABEL_HOLDING_STATES
    )


def label_holders(records: Iterable[ClaimRecord], domain_uid: str, *, besides: str = "") -> list[str]:
    """The claims (uids) that keep the node's label of `domain_uid`, leaving out claim `besides` (the one
    being unprepared): the label may be removed only when this is empty (see `holds_node_label`)."""
    return [r.claim_uid for r in records if r.claim_uid != besides and holds_node_label(r, domain_uid)]


def fold(record: ClaimRecord, event: DomainEvent, version: int) -> ClaimRecord:
    """Apply one event of the claim stream at `version`. Pure; raises InvalidInput on illegal moves."""
    state = next_state(record.state, event.TYPE)
    r = dataclasses.replace(record, state=state, version=version)
    if isinstance(event, ClaimPrepareStarted):
        fresh = record.state not in (ClaimState.PREPARE_STARTED, ClaimState.PREPARE_FAILED)
        return dataclasses.replace(
            r,
            namespace=event.namespace or r.namespace,
            name=event.name or r.name,
            kind=event.kind,
            domain_uid=event.domain_uid,
            allocation=event.allocation,
            requested=tuple(event.devices),
            allocations=r.allocations
            if not event.allocation or event.allocation in r.allocations[-1:]
            else (*r.allocations, event.allocation),
            channels=() if fresh else r.channels,
            cdi_path="" if fresh else r.cdi_path,
            device_ids=(),
            devices=(),
            last_error="" if fresh else r.last_error,
        )
    if isinstance(event, ChannelAllocated):
        new = tuple(range(event.channel, event.channel + event.count))
        return dataclasses.replace(
            r, channels=tuple(sorted(set(r.channels) | set(new))), domain_uid=event.domain_uid or r.domain_uid
        )
    if isinstance(event, ChannelReleased):
        gone = set(range(event.channel, event.channel + event.count))
        return dataclasses.replace(r, channels=tuple(c for c in r.channels if c not in gone))
    if isinstance(event, CdiSpecWritten):
        return dataclasses.replace(r, cdi_path=event.path, device_ids=tuple(event.device_ids))
    if isinstance(event, ClaimPrepareRepaired):
        return dataclasses.replace(r, cdi_path=event.cdi_path or r.cdi_path)
    if isinstance(event, ClaimPrepareCompleted):
        return dataclasses.replace(
            r, device_ids=tuple(event.device_ids), devices=tuple(event.devices), last_error=""
        )
    if isinstance(event, ClaimPrepareFailed):
        return dataclasses.replace(r, last_error=event.reason, last_error_retriable=event.retriable)
    if isinstance(event, ClaimUnprepared | ClaimInvalidated):
        return dataclasses.replace(
            r, channels=(), cdi_path="", device_ids=(), devices=(), ended_version=version
        )
    return r
