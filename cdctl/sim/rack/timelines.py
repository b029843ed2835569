"""The formation timeline `cdctl sim rack` writes at the end: collect the rack's logs, draw each domain.

`draw_timelines(rack, names)` runs, once the scenario is over and while the rack's processes still serve
their logs, what an operator would: `cdctl collect` into `<work dir>/collected.db` (cdctl.collect.run,
through the simulated API server's pod proxy, as the admin the rack's kubeconfig names; the plugins serve
the daemons' kept logs), then for each domain `cdctl timeline` into `<work dir>/timeline-<name>.html`
(cdctl.projections.formation and formationpage), and `cdctl explain` of it (cdctl.projections.explainload:
the slowest node's critical path and the cause of its longest wait). It returns the pages written, the
explanations and, for a domain it could not draw, why: the rack's verdict does not depend on it. Called by
cdctl.sim.rack.rackcommand.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdctl.collect.run import CollectSettings, collect
from cdctl.domain.errors import CdctlError
from cdctl.projections.explain import Explanation
from cdctl.projections.explainload import load_explanations
from cdctl.projections.formationload import load_view
from cdctl.projections.formationpage import write
from cdctl.projections.timeline import EventSource
from cdctl.sim.rack.launch import Rack
from cdctl.store.collected import CollectedFile


@dataclass
class Timelines:
    collected: Path | None = None
    pages: list[Path] = field(default_factory=list)
    explanations: list[Explanation] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def page_path(rack: Rack, name: str) -> Path:
    return rack.work_dir / f"timeline-{name}.html"


async def draw_timelines(rack: Rack, domains: Sequence[tuple[str, str]]) -> Timelines:
    """Collect the rack's logs, then draw each (namespace, name) domain."""
    out = Timelines()
    target = rack.work_dir / "collected.db"
    settings = CollectSettings(target, rack.settings.driver_namespace, kubeconfig=str(rack.kubeconfig))
    try:
        summary = await collect(settings)
    except CdctlError as error:
        out.problems.append(f"cdctl collect: {error.message}")
        return out
    out.collected = target
    out.problems += [f"cdctl collect: {o.name}: {o.status}: {o.error}" for o in summary.partial]
    with CollectedFile.open(target, read_only=True) as file:

        async def query(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
            return file.query(sql, params)  # the scenario is over: nothing else waits on this loop

        events = EventSource(query, collected=True, where=str(target))
        for namespace, name in domains:
            path = page_path(rack, name)
            subject = f"computedomain/{namespace}/{name}"
            try:
                explained = await load_explanations(events, subject)
                write(await load_view(events, subject), path, explained[0])
            except (CdctlError, sqlite3.Error) as error:
                out.problems.append(f"timeline of {namespace}/{name}: {getattr(error, 'message', error)}")
                continue
            out.pages.append(path)
            out.explanations += explained
    return out
