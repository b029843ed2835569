"""The clique step of a formation, node by node: how long after its daemon started each node was listed in
its clique, and how long after IMEX first answered READY its daemon was seen Ready.

`clique_step(view, lines)` takes a domain's formation view (cdctl.projections.formation) and its timeline's
lines (the daemons' `ImexReadinessChanged` among them) and gives, per node, `listed_after_start_s` (the
controller's `CliqueIndexAssigned` after the daemon's `ImexDaemonStarted`) and `ready_after_imex_s` (the
controller seeing the daemon's pod Ready after the last READY answer before it), with their medians and
maxima. A node without both marks is left out of that figure. Pure; used by bench/formation.py (issue:
no node waits for a periodic batch).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from cdctl.projections.formation import FormationView, node_of
from cdctl.projections.timeline import Line


@dataclass
class CliqueStep:
    listed_after_start_s: dict[str, float] = field(default_factory=dict)  # node -> seconds
    ready_after_imex_s: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, float | int | None]:
        """Median and maximum of each figure in milliseconds, and how many nodes each counts."""
        out: dict[str, float | int | None] = {}
        for name, values in (("listed_after_start", self.listed_after_start_s),
                             ("ready_after_imex", self.ready_after_imex_s)):  # fmt: skip
            seconds = list(values.values())
            out[f"{name}_median_ms"] = round(1000 * statistics.median(seconds), 1) if seconds else None
            out[f"{name}_max_ms"] = round(1000 * max(seconds), 1) if seconds else None
            out[f"{name}_nodes"] = len(seconds)
        return out


def clique_step(view: FormationView, lines: Sequence[Line]) -> CliqueStep:
    answered: dict[str, list[datetime]] = {}  # node -> when IMEX answered READY
    for line in lines:
        if line.event.type == "ImexReadinessChanged" and line.event.data.get("ready"):
            answered.setdefault(node_of(line), []).append(line.event.recorded_at)
    out = CliqueStep()
    for row in view.nodes:
        started, listed, ready = row.first("daemon-started"), row.first("listed"), row.first("ready")
        if started is not None and listed is not None:
            out.listed_after_start_s[row.name] = (listed.at - started.at).total_seconds()
        if ready is not None:
            before = [at for at in answered.get(row.name, []) if at <= ready.at]
            if before:
                out.ready_after_imex_s[row.name] = (ready.at - before[-1]).total_seconds()
    return out
