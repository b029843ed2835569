"""Channel isolation on the node: the shared channel devices, the clique's channel and the node-local fence.

Under `imex.isolation: channel` (docs/channel-isolation.md) a node publishes channel capacity that many claims
share instead of `channel-0` and `daemon-0`: one multi-allocatable device `channel` (DRA consumable capacity,
resource.k8s.io `allowMultipleAllocations`) where the API server keeps that field, else `--channel-slots`
devices `channel-slot-<k>`, one claim each. Both carry attribute `type` = `imex-channel`, which the
DeviceClass `compute-domain-channel.nvidia.com` selects. A claim's channel number is not the device: it is
the domain's channel in this node's clique, read from the ComputeDomainClique object the controller keeps
(field `imexChannel`). Called by cdctl.plugin.app (devices, capacity mode) and cdctl.plugin.prepare (the
config checks, the channel read and the fence). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

from cdctl.domain.claims import ClaimRecord
from cdctl.domain.errors import InvalidInput, PermanentError, RetriableError, clip, echo
from cdctl.k8s.resourceslices import PublishedDevice

SHARED_CHANNEL_TYPE = "imex-channel"
SHARED_DEVICE = "channel"
SLOT_PREFIX = "channel-slot-"
DEFAULT_SLOTS_PER_GPU = 2
CHANNEL_KIND = "channel"  # cdctl.plugin.devices.CHANNEL: a channel config applies to these devices

ALL_REFUSED = (
    "allocationMode All is not supported with channel isolation: it would hand one tenant every channel"
)
NO_CLIQUE = "channel isolation requires an NVLink clique on this node; NVML reports none"
FENCE_DELAY = 2.0


class ChannelCapacity(Enum):
    """How the node publishes its shared channel capacity (`--channel-capacity`)."""

    AUTO = "auto"  # the consumable device, falling back to slots when the API server drops the field
    CONSUMABLE = "consumable"
    SLOTS = "slots"


def parse_channel_capacity(text: str, *, field: str = "--channel-capacity") -> ChannelCapacity:
    for mode in ChannelCapacity:
        if text.strip() == mode.value:
            return mode
    raise InvalidInput(
        "kubelet plugin settings", field, f"must be auto, consumable or slots, got {echo(text)}"
    )


def slot_count(configured: int, gpus: int) -> int:
    """`--channel-slots` (0: DEFAULT_SLOTS_PER_GPU per GPU, at least one)."""
    if configured < 0:
        raise InvalidInput(
            "kubelet plugin settings", "--channel-slots", f"must be 0 or more, got {configured}"
        )
    return configured or max(1, DEFAULT_SLOTS_PER_GPU * gpus)


def shared_channel_devices(consumable: bool, slots: int) -> list[PublishedDevice]:
    """The node's channel capacity: one device `slots` claims share, or `slots` devices of one claim each."""
    if consumable:
        return [PublishedDevice(SHARED_DEVICE, SHARED_CHANNEL_TYPE, 0, shares=slots)]
    return [PublishedDevice(f"{SLOT_PREFIX}{k}", SHARED_CHANNEL_TYPE, k) for k in range(slots)]


def shared_device_names(slots: int) -> dict[str, str]:
    """Device name -> kind for every device this node may have published under channel isolation (the
    consumable one and each slot): what a claim's allocation may name."""
    names = {SHARED_DEVICE: CHANNEL_KIND}
    names.update({f"{SLOT_PREFIX}{k}": CHANNEL_KIND for k in range(slots)})
    return names


def waiting_for_channel(namespace: str, name: str, clique_id: str) -> str:
    return f"waiting for an IMEX channel for ComputeDomain {namespace}/{name} in clique {clique_id}"


def channel_holders(
    records: Iterable[ClaimRecord], channel: int, domain_uid: str, *, besides: str
) -> list[ClaimRecord]:
    """Completed claims on this node of another domain that still hold `channel`: their CDI spec handed the
    channel to a container that may still run. A claim whose pod was force-deleted holds it until the
    kubelet unprepares it (its container is killed first), however long that takes. A claim not completed
    never handed the channel to a container, and its completion is checked against this claim's (the
    node's DeviceHolds), so it does not count: two claims fencing each other would wait forever."""
    return [
        r
        for r in records
        if r.claim_uid != besides and r.completed and channel in r.channels and r.domain_uid != domain_uid
    ]


def fence(records: Iterable[ClaimRecord], channel: int, domain_uid: str, claim_uid: str) -> None:
    """Refuse (retriable) while a claim of another domain still holds `channel` on this node."""
    held = channel_holders(records, channel, domain_uid, besides=claim_uid)
    if held:
        other = held[0]
        raise RetriableError(
            f"IMEX channel {channel} is still held on this node by claim "
            f"{clip(other.namespace, 100)}/{clip(other.name, 100)} ({other.claim_uid}) of ComputeDomain "
            f"{other.domain_uid}; waiting for it to be unprepared",
            delay=FENCE_DELAY,
        )


def check_channel_config(all_channels: bool) -> None:
    if all_channels:
        raise PermanentError(ALL_REFUSED)


class SharedChannels:
    """What the node publishes under channel isolation; `consumable` turns off when the cluster refuses it."""

    def __init__(self, capacity: ChannelCapacity, slots: int) -> None:
        self.capacity = capacity
        self.slots = slots
        self.consumable = capacity is not ChannelCapacity.SLOTS
        self.refused = False  # the API server was seen dropping allowMultipleAllocations

    def devices(self) -> list[PublishedDevice]:
        if self.consumable and self.refused:
            # As the server stores it (a slice it keeps rewriting would be published again and again).
            return [PublishedDevice(SHARED_DEVICE, SHARED_CHANNEL_TYPE, 0)]
        return shared_channel_devices(self.consumable, self.slots)

    def consumable_refused(self) -> str:
        """The API server dropped `allowMultipleAllocations`: under auto, slots from now on (the message
        says so); under consumable, stay (the slice's one device then takes one claim at a time)."""
        self.refused = True
        if self.capacity is ChannelCapacity.AUTO:
            self.consumable = False
            return (
                "the API server does not keep allowMultipleAllocations (DRA consumable capacity is off): "
                f"publishing {self.slots} channel slot devices instead of one shared channel device"
            )
        return (
            "the API server does not keep allowMultipleAllocations (DRA consumable capacity is off) and "
            "--channel-capacity=consumable: publishing the channel device as a plain one, which takes one "
            "claim at a time; use --channel-capacity=auto or slots"
        )
