"""`cdctl timeline SUBJECT -o FILE`: a ComputeDomain's formation, node by node, as a page or a picture.

Reads any event log or collected file (`--db`, as the history commands), resolves SUBJECT as `cdctl
history` does (computedomain/NAMESPACE/NAME, resourceclaim/NAMESPACE/NAME, domain/<uid>, claim/<uid>, a
bare uid; cdctl.projections.formationload), prints the summary and writes `-o FILE`: .html (a self-contained
page), .svg or .png (cdctl.projections.formationpage), with what `cdctl explain` says of SUBJECT on top and
its critical path marked. Exit codes as the history commands': 2 bad input
(naming SUBJECT or -o), 3 a file that is not an event log, 75 a locked one. Thin: flags -> projections.
"""

from __future__ import annotations

from pathlib import Path

import click

from cdctl.cli.collected import read_events
from cdctl.cli.errors import guarded
from cdctl.cli.options import db_option
from cdctl.projections.explain import Explanation
from cdctl.projections.explainload import load_explanations
from cdctl.projections.formation import FormationView
from cdctl.projections.formationload import load_view
from cdctl.projections.formationpage import FORMATS, check_output, write
from cdctl.projections.timeline import EventSource


async def _read(events: EventSource, subject: str) -> tuple[FormationView, Explanation]:
    """The view to draw and what `cdctl explain` says of the subject (shown on top, its path marked)."""
    view = await load_view(events, subject)
    return view, (await load_explanations(events, subject))[0]


@click.command("timeline")
@db_option
@click.argument("subject")
@click.option(
    "-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path),
    help=f"File to write: {', '.join(FORMATS)} (a self-contained page, a picture, a PNG).",
)  # fmt: skip
@guarded
def timeline(db: Path, subject: str, output: Path) -> None:
    """Draw a ComputeDomain's formation and teardown: one row per node, each milestone a mark on one time
    axis, retries and failures in colour, the event behind each mark on hover (the page), and a summary
    (formation time, the slowest node and why).

    SUBJECT: computedomain/NAMESPACE/NAME, resourceclaim/NAMESPACE/NAME (its node's row of its domain),
    domain/<uid>, claim/<uid> or a bare uid. A controller's log has the labels, clique entries and Ready
    daemons; a plugin's log its node's prepares; a collected file (cdctl collect) all of them.
    """
    check_output(output)  # before reading: a wrong -o fails at once
    view, explanation = read_events(db, lambda events: _read(events, subject))
    write(view, output, explanation)
    for line in view.summary_lines():
        click.echo(line)
    click.echo(f"wrote {output}")
