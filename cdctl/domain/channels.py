"""The IMEX channel allocator of `channel` isolation (docs/channel-isolation.md): pure state and its events.

One `CliqueChannels` per NVLink clique (one IMEX domain) holds which ComputeDomain holds which channel there,
and the channels released so far in the order they were released. The key of an assignment is (domain uid,
clique id): a domain whose claims span two cliques holds a channel in each. `pick` chooses the next channel
in least-recently-released order: first the channels never handed out (lowest first), then the released
ones, the one released longest ago first, so a number released a moment ago is the last one reused (a
container of a force-deleted pod may still hold it on some node). Channel 0 is never handed out.

The state is a fold over the controller's log: `ImexChannelAssigned` and `ImexChannelReleased` (stream
`channels/<clique>`, cdctl.api.isolation.channel_stream), and `adopt` for a channel seen published on a clique
object (what an earlier leader assigned, recorded by this replica as an observation): the allocator never
hands out a number it can see in use, and never invents one it cannot see. Pure: no I/O. Folded by
cdctl.controller.channels (the controller's adapter) and tested exhaustively in tests/domain/test_channels.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from cdctl.domain.events import DomainEvent, event_type

# Why a channel was assigned: picked by this allocator, or adopted from a clique object an earlier leader
# published (this replica saw the number in use before it had recorded the assignment itself).
SOURCE_PICKED = "picked"
SOURCE_OBSERVED = "observed"
FIRST_CHANNEL = 1  # channel 0 is never handed out under `channel` isolation


@event_type("ImexChannelAssigned")
@dataclass(frozen=True, slots=True)
class ImexChannelAssigned(DomainEvent):
    """A ComputeDomain holds `channel` in the IMEX domain of clique `clique_id` (stream channels/<clique>).

    `node` and `claim` (namespace/name) are the allocated claim that asked for it first (empty when adopted).
    """

    clique_id: str
    channel: int
    domain_uid: str
    namespace: str
    name: str
    node: str = ""
    claim: str = ""
    source: str = SOURCE_PICKED


@event_type("ImexChannelReleased")
@dataclass(frozen=True, slots=True)
class ImexChannelReleased(DomainEvent):
    """The domain is gone and none of its claims in the clique is allocated: `channel` is free again."""

    clique_id: str
    channel: int
    domain_uid: str
    namespace: str
    name: str
    reason: str = ""


@event_type("ImexChannelsExhausted")
@dataclass(frozen=True, slots=True)
class ImexChannelsExhausted(DomainEvent):
    """A domain waits: every channel of the clique below the limit is held (recorded once per wait)."""

    clique_id: str
    domain_uid: str
    namespace: str
    name: str
    channel_count: int


@dataclass(frozen=True, slots=True)
class Holding:
    """One domain's channel in a clique. `recorded`: an ImexChannelAssigned says so."""

    channel: int
    namespace: str = ""
    name: str = ""
    recorded: bool = True


@dataclass(frozen=True, slots=True)
class Conflict:
    """A clique object shows `channel` for `domain_uid` while the book gives it to `holder` (not adopted)."""

    clique_id: str
    channel: int
    domain_uid: str
    holder: str


@dataclass(frozen=True, slots=True)
class CliqueChannels:
    """The channels of one clique: who holds what, and the released ones in release order (oldest first)."""

    clique_id: str
    held: Mapping[str, Holding] = field(default_factory=dict)  # domain uid -> its channel here
    released: tuple[int, ...] = ()  # free channels handed out before, least recently released first

    def holder_of(self, channel: int) -> str | None:
        for uid, holding in self.held.items():
            if holding.channel == channel:
                return uid
        return None

    def in_use(self) -> frozenset[int]:
        return frozenset(h.channel for h in self.held.values())

    def pick(self, count: int) -> int | None:
        """The next channel in least-recently-released order below `count`; None when all are held."""
        used = self.in_use()
        ever = used | set(self.released)
        for channel in range(FIRST_CHANNEL, count):
            if channel not in ever:
                return channel
        for channel in self.released:
            if channel < count and channel not in used:
                return channel
        return None

    def free(self, count: int) -> int:
        """How many channels below `count` (channel 0 aside) no domain holds."""
        return max(0, count - FIRST_CHANNEL) - sum(1 for c in self.in_use() if FIRST_CHANNEL <= c < count)

    def assign(self, uid: str, channel: int, namespace: str = "", name: str = "") -> CliqueChannels:
        """`uid` holds `channel` (recorded). Assigning a channel another domain holds is a bug: refused."""
        holder = self.holder_of(channel)
        if holder is not None and holder != uid:
            raise ValueError(f"clique {self.clique_id}: channel {channel} is held by {holder}")
        held = {**self.held, uid: Holding(channel, namespace, name, True)}
        return replace(self, held=held, released=tuple(c for c in self.released if c != channel))

    def adopt(
        self, uid: str, channel: int, namespace: str = "", name: str = ""
    ) -> tuple[CliqueChannels, Conflict | None]:
        """A clique object publishes `channel` for `uid`: hold it (unrecorded) unless already known.

        A number another domain holds is not adopted (the conflict is returned for the caller to report)."""
        current = self.held.get(uid)
        if current is not None and current.channel == channel:
            return self, None
        holder = self.holder_of(channel)
        if holder is not None and holder != uid:
            return self, Conflict(self.clique_id, channel, uid, holder)
        # The object may say another number than the book: the object is what plugins use. The book's number
        # may have reached a node too: it goes to the end of the reuse order.
        released = (*self.released, current.channel) if current is not None else self.released
        held = {**self.held, uid: Holding(channel, namespace, name, False)}
        return replace(self, held=held, released=tuple(c for c in released if c != channel)), None

    def release(self, uid: str) -> CliqueChannels:
        """`uid` no longer holds a channel here; its channel goes to the end of the reuse order."""
        holding = self.held.get(uid)
        if holding is None:
            return self
        held = {k: v for k, v in self.held.items() if k != uid}
        released = (*(c for c in self.released if c != holding.channel), holding.channel)
        return replace(self, held=held, released=released)

    # ---- a JSON row (the controller's projection keeps one per clique) -----------------------------------
    def to_row(self) -> dict[str, Any]:
        return {
            "clique": self.clique_id,
            "held": {
                uid: [h.channel, h.namespace, h.name, h.recorded] for uid, h in sorted(self.held.items())
            },
            "released": list(self.released),
        }

    @staticmethod
    def from_row(row: Mapping[str, Any]) -> CliqueChannels:
        held = {
            str(uid): Holding(int(v[0]), str(v[1]), str(v[2]), bool(v[3]))
            for uid, v in (row.get("held") or {}).items()
        }
        return CliqueChannels(
            str(row.get("clique", "")), held, tuple(int(c) for c in row.get("released") or [])
        )


def published_channel(summary: Mapping[str, Any]) -> int | None:
    """The channel a clique object publishes (its observed summary), None when it publishes none or a number
    that cannot be a channel of ours (0, negative, not an integer): such a number is never adopted."""
    value = summary.get("imexChannel")
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if value >= FIRST_CHANNEL else None


def fold_channel_event(state: CliqueChannels, event: DomainEvent) -> CliqueChannels:
    """One recorded assignment or release applied to its clique's state."""
    if isinstance(event, ImexChannelAssigned):
        holder = state.holder_of(event.channel)
        if holder is not None and holder != event.domain_uid:
            state = state.release(holder)  # the log's own decision is the later word
        return state.assign(event.domain_uid, event.channel, event.namespace, event.name)
    if isinstance(event, ImexChannelReleased):
        holding = state.held.get(event.domain_uid)
        if holding is None or holding.channel != event.channel:
            return state
        return state.release(event.domain_uid)
    return state


def format_channels(channels: Mapping[str, int]) -> str:
    """The printer column of a ComputeDomain: `clique:N,...` in clique order ("" when none)."""
    return ",".join(f"{clique}:{channel}" for clique, channel in sorted(channels.items()))
