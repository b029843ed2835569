"""A component's retention loop: compact its event log under its policy, every interval, and say so.

The controller, the kubelet plugin and the IMEX daemon each run one over their log (`run`, a background task
until cancelled) with the projections whose state they resume from. The first round comes shortly after
start (finishing a compaction a crash interrupted), then one every `interval_s`. A failed round is logged
and retried at the next; the component keeps serving. `after_round` runs after each round (the plugin
prunes its kept IMEX daemon logs there: cdctl.plugin.imexhistory).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import structlog

from cdctl.domain.errors import CdctlError
from cdctl.domain.events import Actor
from cdctl.domain.retention import RetentionPolicy
from cdctl.projections.base import Projection
from cdctl.projections.compaction import ACTOR, CompactionReport, compact
from cdctl.store.sqlite import SqliteEventStore

log = structlog.get_logger("cdctl.retention")
INTERVAL_S = 3600.0
FIRST_DELAY_S = 60.0


class Retention:
    def __init__(
        self,
        store: SqliteEventStore,
        policy: RetentionPolicy,
        projections: Sequence[Projection],
        *,
        actor: Actor = ACTOR,
        interval_s: float = INTERVAL_S,
        first_delay_s: float = FIRST_DELAY_S,
        after_round: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        self.policy = policy
        self.projections = list(projections)
        self.actor = actor
        self.interval_s = interval_s
        self.first_delay_s = first_delay_s
        self.after_round = after_round
        self.rounds = 0
        self.last_report: CompactionReport | None = None  # the latest compaction done (after_round reads it)

    async def run(self) -> None:
        """Compact every `interval_s` until cancelled."""
        if not self.policy.enabled and self.after_round is None:
            return
        await asyncio.sleep(self.first_delay_s)
        while True:
            await self.run_once()
            await asyncio.sleep(self.interval_s)

    async def run_once(self) -> CompactionReport | None:
        """One round: compact if due (logged), then `after_round`; errors are logged, not raised."""
        report = None
        self.rounds += 1
        if self.policy.enabled:
            try:
                report = await compact(self.store, self.policy, self.projections, actor=self.actor)
            except CdctlError as exc:
                log.warning("event log compaction failed; retrying next round", path=str(self.store.path),
                            error=exc.message)  # fmt: skip
            if report is not None:
                self.last_report = report
                log.info("event log compacted", path=str(self.store.path), policy=self.policy.describe(),
                         **report.summary())  # fmt: skip
        if self.after_round is not None:
            try:
                await self.after_round()
            except (CdctlError, OSError) as exc:
                log.warning("retention round failed; retrying next round", error=str(exc))
        return report
