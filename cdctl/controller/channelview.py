"""The controller's channel projection under `channel` isolation: per clique, which domain holds what.

`ChannelProjection` is a pure fold (cdctl.projections contract) of two kinds of events of the controller's
log: the allocator's own `ImexChannelAssigned`/`ImexChannelReleased` (stream `channels/<clique>`), and the
clique objects it observed (`DomainObjectObserved` of a ComputeDomainClique that publishes `imexChannel`),
which a standby records from its watch. So a replica that takes the Lease knows every number a leader before
it published, even one it never assigned itself; the allocator never hands such a number out and never
invents one it cannot see. One row per clique (cdctl.domain.channels.CliqueChannels as JSON), in memory only
like the domain view: the journal (cdctl.controller.journal) folds it beside the domain projection, snapshots
it with it, and compaction keeps it at the horizon (cdctl.controller.app). Read by cdctl.controller.channels.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from cdctl.controller.observations import KIND_CLIQUE
from cdctl.domain.channels import (
    CliqueChannels,
    ImexChannelAssigned,
    ImexChannelReleased,
    fold_channel_event,
    published_channel,
)
from cdctl.domain.events import RecordedEvent, decode
from cdctl.projections.base import Change, Key, Projection, Row, View

CHANNEL_EVENTS = frozenset({ImexChannelAssigned.TYPE, ImexChannelReleased.TYPE})


class ChannelProjection(Projection):
    name = "controller_channels"
    table = "controller_channels"  # never written: rows live in memory (and in snapshots)
    columns = ("clique",)
    key_columns = ("clique",)
    handles = CHANNEL_EVENTS | {"DomainObjectObserved"}

    def fold(self, view: View, event: RecordedEvent) -> list[Change]:
        data = event.data
        if event.type in CHANNEL_EVENTS:
            typed = decode(event)
            assert isinstance(typed, ImexChannelAssigned | ImexChannelReleased)
            clique = typed.clique_id
            state = fold_channel_event(self._state(view, clique), typed)
        else:  # a clique object observed: adopt the channel it publishes
            if data.get("kind") != KIND_CLIQUE or data.get("change") == "DELETED":
                return []
            summary = data.get("summary") or {}
            channel = published_channel(summary)
            clique = str(summary.get("clique") or "")
            if channel is None or not clique:
                return []
            state, _ = self._state(view, clique).adopt(str(data.get("domain_uid", "")), channel)
        row = state.to_row()
        if view.get((clique,)) == row:
            return []
        return [Change((clique,), row, persist=False)]

    @staticmethod
    def _state(view: View, clique: str) -> CliqueChannels:
        row = view.get((clique,))
        return CliqueChannels.from_row(row) if row is not None else CliqueChannels(clique)


class ChannelBook:
    """Typed reads over the channel projection's rows (the journal's live view)."""

    def __init__(self, rows: Callable[[], Mapping[Key, Row]]) -> None:
        self._rows = rows

    def clique(self, clique_id: str) -> CliqueChannels:
        row = self._rows().get((clique_id,))
        return CliqueChannels.from_row(row) if row is not None else CliqueChannels(clique_id)

    def cliques(self) -> list[CliqueChannels]:
        return [CliqueChannels.from_row(row) for _, row in sorted(self._rows().items())]

    def of_domain(self, uid: str) -> dict[str, int]:
        """clique id -> the channel `uid` holds there."""
        held: dict[str, int] = {}
        for state in self.cliques():
            holding = state.held.get(uid)
            if holding is not None:
                held[state.clique_id] = holding.channel
        return held

    def domains(self) -> set[str]:
        return {uid for state in self.cliques() for uid in state.held}
